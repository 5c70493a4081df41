"""Torch pieces several chapters share: the small GPT, toy models, timing and device helpers, process launch, the checkpointer and sampler."""
