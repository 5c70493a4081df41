"""Torch-free pieces several chapters share: validation, units, TransformerConfig and the model presets, the accelerator table, model-state bytes."""
