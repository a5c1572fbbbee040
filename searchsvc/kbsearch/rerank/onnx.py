"""A cross-encoder on ONNX Runtime, read from a directory the operator mounts.

The directory holds one `.onnx` graph (`model.onnx` when there are several) and the model's
`tokenizer.json`. The graph takes `input_ids` and `attention_mask` (and `token_type_ids` when it
declares it) for query/passage pairs and returns one logit per pair (shape [n] or [n, 1]), or two
(shape [n, 2], the second meaning "relevant"), as ms-marco-MiniLM-L-6-v2 and bge-reranker-base
exported to ONNX do. Nothing is downloaded: users fetch the weights themselves.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from kbsearch.rerank.base import RerankError

__all__ = ["OnnxCrossEncoder"]


class OnnxCrossEncoder:
    name = "local"

    def __init__(self, model_dir: Path, *, max_tokens: int = 512, threads: int = 1) -> None:
        graphs = sorted(model_dir.glob("*.onnx"))
        if not graphs:
            raise FileNotFoundError(f"no .onnx graph in {model_dir}")
        graph = model_dir / "model.onnx" if (model_dir / "model.onnx").exists() else graphs[0]
        tokenizer_file = model_dir / "tokenizer.json"
        if not tokenizer_file.exists():
            raise FileNotFoundError(f"no tokenizer.json in {model_dir}")
        self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        # Pairs are cut to the longest the model reads; the passage loses its tail, never the query.
        self.tokenizer.enable_truncation(max_length=max_tokens, strategy="only_second")
        self.tokenizer.enable_padding()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - self.inputs
        if missing:
            raise ValueError(f"{graph.name} lacks the inputs {sorted(missing)} a cross-encoder takes")

    async def scores(self, query: str, passages: Sequence[str]) -> list[float]:
        if not passages:
            return []
        return await asyncio.to_thread(self._scores, query, list(passages))

    def _scores(self, query: str, passages: list[str]) -> list[float]:
        encoded = self.tokenizer.encode_batch([(query, passage) for passage in passages])
        feed: dict[str, Any] = {
            "input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64),
        }
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = np.array([e.type_ids for e in encoded], dtype=np.int64)
        logits = np.asarray(self.session.run(None, feed)[0], dtype=np.float64)
        if logits.ndim == 2 and logits.shape[1] == 2:
            logits = logits[:, 1]
        logits = logits.reshape(-1)
        if logits.shape[0] != len(passages):
            raise RerankError(f"the cross-encoder gave {logits.shape[0]} scores for {len(passages)} passages")
        out = [float(x) for x in logits]
        if not all(math.isfinite(x) for x in out):
            raise RerankError("the cross-encoder gave a score that is not a finite number")
        return out

    async def close(self) -> None:
        pass
