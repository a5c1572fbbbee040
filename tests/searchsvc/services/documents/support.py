"""What the documents tests share with the child processes they start (test_kill_midwrite.py)."""

from __future__ import annotations

from kbsearch.models import CollectionSignature
from kbsearch.store.bm25 import Bm25Encoder

SIGNATURE = CollectionSignature("hashing", "hashing-v1", 64, Bm25Encoder.name)
