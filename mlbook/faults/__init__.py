"""Chapter: faults (failures, stragglers, elastic training, silent corruption,
loss spikes, determinism)."""
