"""Exports a local BERT sentence-transformers model to ONNX (fp32 and int8), without torch.

The fp32 graph is built from the model's safetensors weights by kbsearch.embedders.onnx_graph: the
BERT encoder, the model's pooling and L2 normalisation, exactly as its modules.json (Transformer ->
Pooling -> Normalize) runs them. Its inputs are `input_ids`, `attention_mask` and
`token_type_ids` (int64, batch x tokens), its one output `sentence_embedding` (float32, batch x
dimensions). The int8 graph is onnxruntime's dynamic quantisation of it.

Called at image build time (`python -m kbsearch.embedders.onnx_export DIR`) or at first start by
kbsearch.embedders.onnx_files, which makes the result atomic and shared between processes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kbsearch.embedders.onnx_graph import INPUTS, OUTPUT, build_sentence_graph

__all__ = ["INPUTS", "OUTPUT", "export_fp32", "quantize_int8"]

log = logging.getLogger(__name__)


def export_fp32(model_dir: Path, target: Path) -> None:
    """Write the fp32 ONNX graph of the sentence-transformers model at `model_dir` to `target`."""
    build_sentence_graph(model_dir, target)


def quantize_int8(source: Path, target: Path) -> None:
    """Dynamic int8 quantisation of `source`'s MatMul weights (activations are scaled at run time).

    Per-channel scales keep every text's vector within cosine ~0.99 of fp32 (per-tensor scales
    fell to 0.69 on SciFact abstracts); reduce_range (7-bit weights) avoids the int16 overflow of
    CPUs without VNNI, so the one export is right on any x86 it is copied to.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quantiser_quiet():
        quantize_dynamic(
            str(source),
            str(target),
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=True,
            op_types_to_quantize=["MatMul"],  # not the embedding tables (Gather): they hold the vocabulary
        )


def _drop(record: logging.LogRecord) -> bool:
    return False


@contextmanager
def _quantiser_quiet() -> Iterator[None]:
    """onnxruntime's quantiser logs through the root logger itself (`logging.info(...)`), about 35
    lines per export that say nothing to whoever runs the service ("Quantization parameters for
    tensor ... not specified", "Ignore MatMul due to non constant B", a hint to pre-process).
    A filter on the root logger drops only records made on it by name; every named logger
    (ours, uvicorn's) passes, and so does an exception, which propagates."""
    root = logging.getLogger()
    root.addFilter(_drop)
    try:
        yield
    finally:
        root.removeFilter(_drop)
