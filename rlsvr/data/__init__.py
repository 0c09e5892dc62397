"""Corpora for the environments: hub datasets, local files, bundled documents."""
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
