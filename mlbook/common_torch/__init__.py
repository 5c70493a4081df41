"""Torch pieces several chapters share: the small GPT, toy models, the dtype map,
timing and device helpers, the matmul ceiling probe (MAMF), process launch,
the checkpointer and sampler, and the reference training loop the capstone
and the calibration both run."""
