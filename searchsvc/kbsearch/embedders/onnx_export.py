"""Exports a sentence-transformers model to ONNX (fp32 and int8); the only ONNX code that needs torch.

The exported graph is the whole sentence-transformers pipeline after tokenisation: the BERT
encoder, mean pooling over the attention mask, and L2 normalisation, exactly as the bundled
model's modules.json (Transformer -> Pooling(mean) -> Normalize) runs them. Its inputs are
`input_ids`, `attention_mask` and `token_type_ids` (int64, batch x tokens), its one output
`sentence_embedding` (float32, batch x dimensions).

Called at image build time (`python -m kbsearch.embedders.onnx_export DIR`) or at first start by
kbsearch.embedders.onnx_files, which makes the result atomic and shared between processes.
"""

from __future__ import annotations

import argparse
import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

OUTPUT = "sentence_embedding"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# Opset 17 is understood by every onnxruntime since 1.14 and by the int8 quantizer.
OPSET = 17

log = logging.getLogger(__name__)


def export_fp32(model_dir: Path, target: Path) -> None:
    """Write the fp32 ONNX graph of the sentence-transformers model at `model_dir` to `target`."""
    import torch
    from transformers import AutoModel

    class SentenceEmbedding(torch.nn.Module):
        def __init__(self, encoder: Any) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            tokens = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            # sentence_transformers.models.Pooling (mean) and Normalize, step for step.
            mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
            summed = (tokens * mask).sum(dim=1)
            counts = mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(summed / counts, p=2.0, dim=1)

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    encoder = AutoModel.from_pretrained(str(model_dir), local_files_only=True, attn_implementation="eager")
    module = SentenceEmbedding(encoder).eval()
    sample = torch.ones((2, 8), dtype=torch.int64)
    dynamic = {name: {0: "batch", 1: "tokens"} for name in INPUTS}
    dynamic[OUTPUT] = {0: "batch"}
    # The tracer warns about Python booleans in transformers' mask code (constant for a padded
    # batch, checked by the tests against torch), and torch about the legacy exporter itself.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (sample, sample, torch.zeros_like(sample)),
            str(target),
            input_names=list(INPUTS),
            output_names=[OUTPUT],
            dynamic_axes=dynamic,
            opset_version=OPSET,
            dynamo=False,  # the TorchScript exporter: no onnxscript needed, and a graph the quantizer knows
        )


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


def main(argv: list[str] | None = None) -> None:
    """Export the bundled model (or SEARCHSVC_LOCAL_MODEL) into DIR, as the service would at first start."""
    from kbsearch.embedders.onnx_files import ensure_exports
    from kbsearch.settings import Settings

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("directory", type=Path, help="where the .onnx files go (SEARCHSVC_ONNX_DIR at run time)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    settings = Settings()
    for variant in ("fp32", "int8"):
        path = ensure_exports(settings.local_model, args.directory, variant)
        log.info("ONNX %s export ready at %s", variant, path)


if __name__ == "__main__":
    main()
