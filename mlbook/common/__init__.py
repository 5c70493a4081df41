"""Torch-free pieces several chapters share: validation, units, TransformerConfig
and the model presets, the accelerator and interconnect tables, model-state bytes,
and reading another page's glued values (book_values)."""
