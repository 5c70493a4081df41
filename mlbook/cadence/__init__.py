"""Chapter: checkpoint cadence and resumable training state."""
