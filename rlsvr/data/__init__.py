"""Datasets, read by the environments and the evaluation alike (never the reverse).

`corpora` (the spy tasks' documents; its names are re-exported here), `bundled`
(generated documents), `arithmetic` (generated math word problems, the offline
prompts of `configs/rlvr_math.py:cpu`), `sources` (rows from the shared data folder,
local files, the hub), `math_datasets` (math sets as `MathItem`s).
"""
from rlsvr.data.corpora import (
    TASK_SOURCES,
    CorpusError,
    Document,
    HubSource,
    bundled_corpus,
    load_corpus,
    load_hub,
    load_local,
)

__all__ = [
    "TASK_SOURCES",
    "CorpusError",
    "Document",
    "HubSource",
    "bundled_corpus",
    "load_corpus",
    "load_hub",
    "load_local",
]
