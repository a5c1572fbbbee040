"""The local embedder on ONNX Runtime: the bundled MiniLM exported once (fp32, or int8), or a fetched
prebuilt graph (bge-small-en-v1.5, see catalog.py); no torch at any time."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kbsearch.embedders.base import InProcessEmbedder
from kbsearch.embedders.catalog import BUNDLED_MODEL, spec_for
from kbsearch.embedders.lanes import TurnLock
from kbsearch.embedders.onnx_files import FETCHED_GRAPH, TOKENIZER, Variant, ensure_exports, fetched_files
from kbsearch.errors import ConfigurationError

# all-MiniLM-L6-v2's max_seq_length (sentence_bert_config.json); its tokenizer.json says 128.
MAX_TOKENS = spec_for(BUNDLED_MODEL).max_tokens


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask), not all the machine has."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class OnnxEmbedder(InProcessEmbedder):
    """Tokenises with `tokenizers`, runs the model's graph on CPU: our export (encoder, pooling and L2
    norm inside), or a fetched graph whose [CLS] token this class takes and L2-normalises.

    Texts are tokenised once, sorted by token count and cut into runs of at most `batch_size` texts
    and `batch_tokens` padded tokens, so a run pads to its longest text and stays small: on 2 cores,
    runs of ~512 tokens embedded 1.3x the chunks per second of 32 texts (~4,800 tokens), whose
    attention tensors no longer fit in cache (bench/README.md). One document run goes at a time, on
    `threads` intra-op threads: parallel runs would only fight over the same cores.

    Queries (embed_query_lane) have a lane of their own: a second session of the same graph with
    its own lock, so a query never waits for a document's run, only shares the cores with it. On
    2 busy cores a query took 7-40 ms at p95 beside a document being embedded (1 or 2 threads
    alike), where waiting its turn at one session, even ahead of every waiting run, took 300 ms: a
    run of long chunks lasts that long. The price is the graph loaded twice (int8 MiniLM: 59 MB).
    Each lane takes its lock per run, in turns (lanes.TurnLock): one caller's long ask or document
    holds its lane for one run at a time.
    """

    provider = "local"
    # ~4 runs of 512 tokens: a lone write is as fast as in one call, another writer waits ~0.5 s a turn.
    turn_texts = 16

    def __init__(
        self,
        model: str = BUNDLED_MODEL,
        *,
        variant: Variant = "fp32",
        export_dir: Path,
        models_dir: Path | None = None,
        batch_size: int = 32,
        batch_tokens: int = 512,
        threads: int = 0,
    ) -> None:
        if batch_size < 1 or batch_tokens < 1 or threads < 0:
            raise ValueError(
                "batch_size and batch_tokens must be at least 1, threads at least 0 (0: every available CPU)"
            )
        self.model = model
        self.spec = spec_for(model)
        self.variant = variant
        self.backend = "onnx" if variant == "fp32" else "onnx-int8"
        if self.spec.fetched_backend is not None and self.backend != self.spec.fetched_backend:
            raise ConfigurationError(
                f"{model} comes only as a prebuilt {self.spec.fetched_backend} graph: "
                f"set SEARCHSVC_LOCAL_BACKEND={self.spec.fetched_backend}"
            )
        self.query_prefix = self.spec.query_prefix
        self.export_dir = Path(export_dir)
        self.models_dir = Path(models_dir) if models_dir is not None else None
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.threads = threads or available_cpus()
        self._session: Any = None
        self._query_session: Any = None
        self._tokenizer: Any = None
        self._inputs: set[str] = set()
        self._dimensions: int | None = None
        self._load_lock = threading.Lock()
        self._locks = {False: TurnLock(), True: TurnLock()}  # by lane: query or not

    def load(self) -> None:
        with self._load_lock:
            if self._session is not None:
                return
            graph, tokenizer_file = self._files()
            import onnxruntime as ort
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(tokenizer_file))
            # MiniLM's packaged tokenizer.json pads and truncates at 128; the model reads 256.
            tokenizer.enable_truncation(max_length=self.spec.max_tokens)
            tokenizer.no_padding()  # each run is padded to its own longest text in _run
            session = _session(ort, graph, self.threads)
            query_session = _session(ort, graph, self.threads)
            self._tokenizer, self._session, self._query_session = tokenizer, session, query_session
            self._inputs = {i.name for i in session.get_inputs()}
            self._dimensions = int(self._run(session, [tokenizer.encode("dimension probe")]).shape[1])

    def _files(self) -> tuple[Path, Path]:
        """The graph and tokenizer.json: exported here (made at first use), or fetched beforehand."""
        if self.spec.fetched_backend is None:
            folder = ensure_exports(self.model, self.export_dir, self.variant)
            return folder / f"{self.variant}.onnx", folder / TOKENIZER
        graph, tokenizer = fetched_files(self.models_dir, self.model, self.spec.fetch_hint, FETCHED_GRAPH, TOKENIZER)
        return graph, tokenizer

    @property
    def _loaded(self) -> bool:
        return self._session is not None

    def _embed(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        encodings = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids), reverse=True)
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        session = self._query_session if query else self._session
        for rows in self._runs(order, [len(e.ids) for e in encodings]):
            with self._locks[query].hold(query=query):  # per run: another caller's query goes in between
                out[rows] = self._run(session, [encodings[i] for i in rows])
        vectors: list[list[float]] = out.tolist()
        return vectors

    def _runs(self, order: list[int], lengths: list[int]) -> list[list[int]]:
        """`order` (longest first) cut into runs within both limits; a run pads to its first text."""
        runs: list[list[int]] = []
        for i in order:
            run = runs[-1] if runs else None
            if run is None or len(run) >= self.batch_size or (len(run) + 1) * lengths[run[0]] > self.batch_tokens:
                runs.append([i])
            else:
                run.append(i)
        return runs

    def _run(self, session: Any, encodings: list[Any]) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)  # [PAD] is token id 0
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for row, encoding in enumerate(encodings):
            n = len(encoding.ids)
            ids[row, :n], mask[row, :n], types[row, :n] = encoding.ids, encoding.attention_mask, encoding.type_ids
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        # A fetched graph may take fewer inputs; its first output is the one (ours has only one).
        vectors = np.asarray(session.run(None, {n: feeds[n] for n in self._inputs})[0], dtype=np.float32)
        if self.spec.pooling == "graph":
            return vectors
        cls = vectors[:, 0, :]  # last_hidden_state, batch x tokens x hidden: [CLS] is token 0
        return np.asarray(cls / np.maximum(np.linalg.norm(cls, axis=1, keepdims=True), 1e-12), dtype=np.float32)


def _session(ort: Any, graph: Path, threads: int) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # warnings about unused initialisers are noise in service logs
    # Idle intra-op threads otherwise spin between operators, taking the CPU the service's
    # own threads (HTTP, chunking, BM25, store writes) need on a small machine.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ConfigurationError(f"cannot load the ONNX model {graph}: {exc}") from exc
