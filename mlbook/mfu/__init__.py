"""Chapter: MFU and the FLOPs of a training step."""
