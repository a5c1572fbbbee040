"""Builds the ONNX graph of a BERT sentence-transformers model from its safetensors weights, without torch.

The graph is what the torch exporter traced before (kbsearch.embedders.onnx_export), operator for
operator as transformers' eager BertModel runs them: token, position and segment embeddings with a
LayerNorm; per layer self-attention with an additive mask, a residual LayerNorm, a GELU (erf)
feed-forward and a second residual LayerNorm; then mean pooling over the attention mask and L2
normalisation, as its modules.json chains them (a model pooled otherwise is refused). Every dense layer
is a MatMul by a constant plus an Add, which is what onnxruntime's dynamic int8 quantiser rewrites.

Inputs `input_ids`, `attention_mask`, `token_type_ids` (int64, batch x tokens); output
`sentence_embedding` (float32, batch x hidden). Reads only numpy arrays (safetensors' numpy API).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from kbsearch.errors import ConfigurationError

OUTPUT = "sentence_embedding"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# Opset 17 is understood by every onnxruntime since 1.14 and by the int8 quantizer, and has LayerNormalization.
OPSET = 17
# transformers' additive attention mask: the most negative float32, as torch.finfo(float32).min.
MASKED = float(np.finfo(np.float32).min)


class UnsupportedModel(ConfigurationError):
    """The model folder is not a BERT encoder this builder knows how to write."""


def check_pooling(model_dir: Path) -> None:
    """Refuse a model whose sentence-transformers Pooling module is not mean pooling (what this graph does)."""
    for config in sorted(model_dir.glob("*_Pooling/config.json")):
        settings = json.loads(config.read_text())
        if not settings.get("pooling_mode_mean_tokens") or settings.get("pooling_mode_cls_token"):
            raise UnsupportedModel(f"{config}: only mean pooling is supported")


def build_sentence_graph(model_dir: Path, target: Path) -> None:
    """Write the fp32 ONNX graph (encoder, pooling, L2 norm) of the BERT model at `model_dir` to `target`."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from safetensors.numpy import load_file

    config = json.loads((model_dir / "config.json").read_text())
    if config.get("model_type") != "bert" or config.get("hidden_act", "gelu") != "gelu":
        raise UnsupportedModel(f"{model_dir}: a BERT model with GELU is needed, not {config.get('model_type')!r}")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise UnsupportedModel(f"{model_dir}: only absolute position embeddings are supported")
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    head_size, eps = hidden // heads, float(config.get("layer_norm_eps", 1e-12))
    check_pooling(model_dir)
    weights = _strip_prefix(load_file(str(model_dir / "model.safetensors")))

    nodes: list[Any] = []
    initializers: list[Any] = []

    def const(name: str, array: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def weight(key: str) -> str:
        try:
            return const(key, weights[key].astype(np.float32))
        except KeyError:
            raise UnsupportedModel(f"{model_dir}: the weights have no tensor {key!r}") from None

    def node(op: str, inputs: list[str], name: str, **attributes: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attributes))
        return name

    def dense(x: str, prefix: str) -> str:
        # torch's Linear computes x @ W.T + b: the transposed weight is the MatMul's constant operand.
        if f"{prefix}.weight" not in weights:
            raise UnsupportedModel(f"{model_dir}: the weights have no tensor {prefix}.weight")
        kernel = const(f"{prefix}.weight_t", weights[f"{prefix}.weight"].astype(np.float32).T)
        return node("Add", [node("MatMul", [x, kernel], f"{prefix}/matmul"), weight(f"{prefix}.bias")], f"{prefix}/out")

    def layer_norm(x: str, prefix: str) -> str:
        scale, bias = weight(f"{prefix}.weight"), weight(f"{prefix}.bias")
        return node("LayerNormalization", [x, scale, bias], f"{prefix}/out", axis=-1, epsilon=eps)

    ids, mask, types = INPUTS
    one_i = const("const.one_i64", np.array([1], dtype=np.int64))
    two_i = const("const.two_i64", np.array([2], dtype=np.int64))
    zero_i = const("const.zero_i64", np.array([0], dtype=np.int64))
    axis1 = const("const.axis1", np.array([1], dtype=np.int64))

    # Embeddings: word + position (the first `tokens` rows) + segment, then LayerNorm.
    tokens = node("Slice", [node("Shape", [ids], "emb/shape"), one_i, two_i, zero_i], "emb/tokens")
    positions = node("Slice", [weight("embeddings.position_embeddings.weight"), zero_i, tokens, zero_i], "emb/pos")
    words = node("Gather", [weight("embeddings.word_embeddings.weight"), ids], "emb/words")
    segments = node("Gather", [weight("embeddings.token_type_embeddings.weight"), types], "emb/types")
    summed = node("Add", [node("Add", [words, positions], "emb/add1"), segments], "emb/add2")
    x = layer_norm(summed, "embeddings.LayerNorm")

    # The additive mask, batch x 1 x 1 x tokens: 0 where attended, float32 min where padded.
    mask_f = node("Cast", [mask], "mask/float", to=TensorProto.FLOAT)
    one_f = const("const.one_f", np.array(1.0, dtype=np.float32))
    inverted = node("Sub", [one_f, mask_f], "mask/inverted")
    additive = node("Mul", [inverted, const("const.masked", np.array(MASKED, dtype=np.float32))], "mask/additive")
    additive = node("Unsqueeze", [additive, const("const.axes12", np.array([1, 2], dtype=np.int64))], "mask/4d")

    split_heads = const("const.split_heads", np.array([0, 0, heads, head_size], dtype=np.int64))
    merge_heads = const("const.merge_heads", np.array([0, 0, hidden], dtype=np.int64))
    scale = const("const.scale", np.array(1.0 / math.sqrt(head_size), dtype=np.float32))
    sqrt2 = const("const.sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    half = const("const.half", np.array(0.5, dtype=np.float32))

    def heads_of(x: str, prefix: str, perm: list[int]) -> str:
        split = node("Reshape", [dense(x, prefix), split_heads], f"{prefix}/split")
        return node("Transpose", [split], f"{prefix}/heads", perm=perm)

    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}"
        query = heads_of(x, f"{p}.attention.self.query", [0, 2, 1, 3])  # batch x heads x tokens x head_size
        key = heads_of(x, f"{p}.attention.self.key", [0, 2, 3, 1])  # batch x heads x head_size x tokens
        value = heads_of(x, f"{p}.attention.self.value", [0, 2, 1, 3])
        scores = node("Mul", [node("MatMul", [query, key], f"{p}/scores/raw"), scale], f"{p}/scores/scaled")
        probs = node("Softmax", [node("Add", [scores, additive], f"{p}/scores/masked")], f"{p}/probs", axis=-1)
        context = node("MatMul", [probs, value], f"{p}/context")
        context = node("Transpose", [context], f"{p}/context/t", perm=[0, 2, 1, 3])
        context = node("Reshape", [context, merge_heads], f"{p}/context/merged")
        attended = node("Add", [dense(context, f"{p}.attention.output.dense"), x], f"{p}/attention/residual")
        x = layer_norm(attended, f"{p}.attention.output.LayerNorm")

        # GELU as BERT's (erf), in torch's own order, x * (1 + erf(x / sqrt 2)) * 0.5, which
        # onnxruntime fuses into one Gelu (with the bias before it: BiasGelu).
        inner = dense(x, f"{p}.intermediate.dense")
        erf = node("Erf", [node("Div", [inner, sqrt2], f"{p}/gelu/scaled")], f"{p}/gelu/erf")
        gelu = node("Mul", [inner, node("Add", [erf, one_f], f"{p}/gelu/1+erf")], f"{p}/gelu/times")
        gelu = node("Mul", [gelu, half], f"{p}/gelu")
        output = node("Add", [dense(gelu, f"{p}.output.dense"), x], f"{p}/output/residual")
        x = layer_norm(output, f"{p}.output.LayerNorm")

    # Mean pooling as sentence_transformers.models.Pooling does it, then Normalize (x / max(|x|, 1e-12)).
    mask3 = node("Unsqueeze", [mask_f, two_i], "pool/mask")
    total = node("ReduceSum", [node("Mul", [x, mask3], "pool/masked"), axis1], "pool/sum", keepdims=0)
    count = node("ReduceSum", [mask3, axis1], "pool/count", keepdims=0)
    count = node("Max", [count, const("const.min_count", np.array(1e-9, dtype=np.float32))], "pool/count/clamped")
    pooled = node("Div", [total, count], "pool/mean")
    norm = node("ReduceL2", [pooled], "norm/l2", axes=[1], keepdims=1)  # axes: an attribute until opset 18
    norm = node("Max", [norm, const("const.min_norm", np.array(1e-12, dtype=np.float32))], "norm/clamped")
    nodes.append(helper.make_node("Div", [pooled, norm], [OUTPUT], name=OUTPUT))

    dynamic = ["batch", "tokens"]
    graph = helper.make_graph(
        nodes,
        "sentence_embedding",
        [helper.make_tensor_value_info(name, TensorProto.INT64, dynamic) for name in INPUTS],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", hidden])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="kbsearch")
    model.ir_version = 8  # what onnxruntime >= 1.14 reads
    onnx.checker.check_model(model, full_check=True)
    onnx.save_model(model, str(target))


def _strip_prefix(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """BertModel's tensor names, whether saved bare (sentence-transformers) or under `bert.`."""
    if "embeddings.word_embeddings.weight" in weights:
        return weights
    return {name.removeprefix("bert."): array for name, array in weights.items()}
