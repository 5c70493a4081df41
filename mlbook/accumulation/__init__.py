"""Chapter: gradient accumulation."""
