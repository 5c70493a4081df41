"""Chapter: mixed precision."""
