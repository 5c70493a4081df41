"""Chapter: the input pipeline (tokenise once, pack, shard by rank,
keep the device fed).

``formulas``   the loader model (step time and device idle share from load
               time, compute time and workers) and the tokens/s a trainer
               consumes;
``packing``    packing documents into fixed-length rows, the padding that
               per-document batches waste, the document mask and position reset;
``tokenizer``  the corpus that ships with Python, a byte-level BPE trained on
               it at run time, its hash and its throughput;
``shards``     memory-mapped token shards with a small index;
``experiments`` torch: the map-style dataset over the shards, the step-time
               A/B, the profiler timeline, the DataLoader sweep, pinned copies;
``figures``    matplotlib.
"""
