"""The runtime: pooled actors (:mod:`.pool`), token buckets, per-thread metric shards and the
garbage collector's settings. Knows nothing of calls or objects beyond the model's errors and
configuration.
"""
