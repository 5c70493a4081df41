"""Chapter: the input pipeline (tokenise once, pack, shard by rank,
keep the device fed).

``formulas``   the loader model (step time and device idle share from load
               time, compute time and workers) and the tokens/s a trainer
               consumes;
``artifacts``  seeded step timings of a loop and its loader, to diagnose;
``packing``    packing documents into fixed-length rows, the padding that
               per-document batches waste, the document mask and position reset;
``tokenizer``  the corpus that ships with Python, a byte-level BPE trained on
               it at run time, its hash and its throughput;
``shards``     memory-mapped token shards with a small index;
``experiments`` torch: the map-style dataset over the shards, the step-time
               A/B, the profiler timeline, the DataLoader sweep, pinned copies;
``figures``    matplotlib;
``exercises``  the chapter's problem set (mlbook.exercises registers it).

The loader model (``formulas``) is named here too, so a page or a reader can
write ``from mlbook import input_pipeline`` and call
``input_pipeline.workers_needed(...)``; importing the package loads neither
torch, numpy nor matplotlib (tests/test_layering.py), and the HTML book imports
it in the browser. ``packing`` and ``shards`` use numpy and stay in their
modules.
"""

from mlbook.input_pipeline.artifacts import LoaderLog, StepRow, loader_log
from mlbook.input_pipeline.formulas import (
    BEKMAN_NUM_WORKERS,
    BEKMAN_PIN_MEMORY_S,
    HF_TOKENIZERS_SERVER,
    WAIT_VERDICTS,
    PublishedLoaderBench,
    PublishedThroughput,
    device_idle_fraction,
    loader_epoch_s,
    loader_overhead_s,
    loader_step_s,
    trainer_tokens_per_s,
    wait_verdict,
    workers_needed,
)

__all__ = [
    "BEKMAN_NUM_WORKERS",
    "BEKMAN_PIN_MEMORY_S",
    "HF_TOKENIZERS_SERVER",
    "LoaderLog",
    "StepRow",
    "WAIT_VERDICTS",
    "PublishedLoaderBench",
    "PublishedThroughput",
    "device_idle_fraction",
    "loader_epoch_s",
    "loader_log",
    "loader_overhead_s",
    "loader_step_s",
    "trainer_tokens_per_s",
    "wait_verdict",
    "workers_needed",
]
