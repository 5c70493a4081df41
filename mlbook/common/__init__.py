"""Torch-free pieces several chapters share: validation, units, TransformerConfig
and the model presets, the accelerator and interconnect tables, model-state bytes,
and the values a page run in JupyterLab keeps (book_values)."""
