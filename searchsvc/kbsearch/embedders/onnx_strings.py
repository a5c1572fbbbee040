"""A fetched ONNX graph that takes the texts themselves (use-multilingual-v3, see catalog.py): its
SentencePiece tokenizer is an operator of the graph (onnxruntime-extensions), its output the
L2-normalised sentence vector, so there is no tokenizer file and no pooling here.

Bounds: each text is cut to MAX_CHARS characters before it goes in (the graph has no length limit
of its own; chunks are at most 800 characters by default), and runs hold at most `batch_size` texts.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kbsearch.embedders.base import InProcessEmbedder
from kbsearch.embedders.catalog import spec_for
from kbsearch.embedders.lanes import TurnLock
from kbsearch.embedders.onnx import available_cpus
from kbsearch.embedders.onnx_files import FETCHED_GRAPH, fetched_files
from kbsearch.errors import ConfigurationError

MAX_CHARS = 4000


class StringGraphEmbedder(InProcessEmbedder):
    """Runs a graph whose input is a string tensor; a query lane of its own, as OnnxEmbedder has."""

    provider = "local"
    turn_texts = 16

    def __init__(self, model: str, *, models_dir: Path | None, batch_size: int = 32, threads: int = 0) -> None:
        if batch_size < 1 or threads < 0:
            raise ValueError("batch_size must be at least 1, threads at least 0 (0: every available CPU)")
        self.model = model
        self.spec = spec_for(model)
        self.backend = self.spec.fetched_backend or "onnx-int8"
        self.models_dir = models_dir
        self.batch_size = batch_size
        self.threads = threads or available_cpus()
        self._sessions: dict[bool, Any] = {}  # by lane: query or not
        self._input = self._output = ""
        self._dimensions: int | None = None
        self._load_lock = threading.Lock()
        self._locks = {False: TurnLock(), True: TurnLock()}

    def load(self) -> None:
        with self._load_lock:
            if self._sessions:
                return
            graph = self._graph()
            sessions = {lane: _session(graph, self.threads) for lane in (False, True)}
            self._input, self._output = sessions[False].get_inputs()[0].name, sessions[False].get_outputs()[0].name
            self._dimensions = int(self._run(sessions[False], ["dimension probe"]).shape[1])
            self._sessions = sessions

    def _graph(self) -> Path:
        (graph,) = fetched_files(self.models_dir, self.model, self.spec.fetch_hint, FETCHED_GRAPH)
        return graph

    @property
    def _loaded(self) -> bool:
        return bool(self._sessions)

    def _embed(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        cut = [(self.spec.query_prefix if query else "") + t[:MAX_CHARS] for t in texts]
        out = np.empty((len(cut), self.dimensions), dtype=np.float32)
        for start in range(0, len(cut), self.batch_size):
            with self._locks[query].hold(query=query):
                out[start : start + self.batch_size] = self._run(
                    self._sessions[query], cut[start : start + self.batch_size]
                )
        vectors: list[list[float]] = out.tolist()
        return vectors

    def _run(self, session: Any, texts: list[str]) -> np.ndarray:
        vectors = np.asarray(session.run([self._output], {self._input: texts})[0], dtype=np.float32)
        return np.asarray(vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12), dtype=np.float32)


def _session(graph: Path, threads: int) -> Any:
    import onnxruntime as ort
    from onnxruntime_extensions import get_library_path

    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())  # the graph's SentencePiece tokenizer
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ConfigurationError(f"cannot load the ONNX model {graph}: {exc}") from exc
