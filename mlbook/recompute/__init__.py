"""Chapter: activation recompute."""
