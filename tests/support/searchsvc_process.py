"""`python -m tests.support.searchsvc_process`: the service's real entry point (`python -m kbsearch`)
with the test-only hashing embedder in place of MiniLM, for tests that run and kill a real process."""

from __future__ import annotations

import sys

from kbsearch import __main__ as entry
from kbsearch.embedders import factory
from tests.support.hashing import HashingEmbedder

if __name__ == "__main__":
    factory.build_embedder = lambda settings: HashingEmbedder()  # read by the app's lifespan
    sys.exit(entry.main())
