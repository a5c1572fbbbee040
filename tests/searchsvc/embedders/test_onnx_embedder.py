"""The ONNX Runtime backends of the bundled MiniLM against torch, on real texts; the export cache."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import kbsearch
from kbsearch.chunker import MarkdownChunker
from kbsearch.embedders import onnx_export
from kbsearch.embedders.local import BUNDLED_MODEL, LocalEmbedder
from kbsearch.embedders.onnx import MAX_TOKENS, OnnxEmbedder
from kbsearch.embedders.onnx_export import _quantiser_quiet, quantize_int8
from kbsearch.embedders.onnx_files import ensure_exports, is_valid, manifest_path, model_slug
from kbsearch.errors import ConfigurationError
from kbsearch.settings import Settings
from tests.support.paths import REPO_ROOT
from tests.support.settings import embedder_of

REPO = REPO_ROOT

# Lower bounds of per-text cosine to torch, from bench/embedders.py on 2,710 SciFact chunks
# (fp32: min 0.9999995; int8 per-channel, 7-bit: mean 0.9933, min 0.9848); here on this repo's docs.
# The fp32 graph is built from the safetensors without torch (test_onnx_graph.py checks it further).
FP32_MIN_COSINE = 0.9999
INT8_MIN_COSINE = 0.97
INT8_MEAN_COSINE = 0.985


# In the order the README held them before it became a map, so the texts stay what they were.
DOC_PAGES = (
    "docs/user/api.md",
    "docs/user/ask.md",
    "docs/user/mcp.md",
    "docs/user/sync-status-and-insights.md",
    "docs/dev/storage.md",
)


def real_texts() -> list[str]:
    """What the service embeds: the chunks of this repository's own docs and bench notes."""
    chunker = MarkdownChunker(500, 800, 0)
    texts = []
    for name in ("README.md", *DOC_PAGES, "bench/README.md"):
        texts += [c.embed_text for c in chunker.chunk((REPO / name).read_text()).chunks]
    return texts[:120]


def cosines(a: list[list[float]], b: list[list[float]]) -> np.ndarray:
    x, y = np.asarray(a), np.asarray(b)
    return np.asarray((x * y).sum(axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)))


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("onnx")
    ensure_exports(BUNDLED_MODEL, folder, "int8")  # both graphs, exported from the installed weights
    return folder


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return real_texts()


@pytest.fixture(scope="module")
def torch_embedder() -> LocalEmbedder:
    model = LocalEmbedder()
    model.load()
    return model


@pytest.fixture(scope="module")
def torch_vectors(torch_embedder: LocalEmbedder, texts: list[str]) -> list[list[float]]:
    return torch_embedder.embed_documents(texts)


@pytest.fixture(scope="module", params=["fp32", "int8"])
def onnx_embedder(request: pytest.FixtureRequest, export_dir: Path) -> OnnxEmbedder:
    model = OnnxEmbedder(variant=request.param, export_dir=export_dir)
    model.load()
    return model


@pytest.mark.slow
def test_fp32_gives_torch_vectors(export_dir, texts, torch_vectors):
    fp32 = OnnxEmbedder(variant="fp32", export_dir=export_dir)
    agreement = cosines(fp32.embed_documents(texts), torch_vectors)
    assert len(texts) >= 50
    assert agreement.min() >= FP32_MIN_COSINE, agreement.min()


@pytest.mark.slow
def test_int8_stays_close_to_torch(export_dir, texts, torch_vectors):
    int8 = OnnxEmbedder(variant="int8", export_dir=export_dir)
    agreement = cosines(int8.embed_documents(texts), torch_vectors)
    assert agreement.min() >= INT8_MIN_COSINE, agreement.min()
    assert agreement.mean() >= INT8_MEAN_COSINE, agreement.mean()
    # Close, but not the same numbers: that is why int8 may not share a collection with torch.
    assert agreement.min() < 0.9999


@pytest.mark.slow
def test_vectors_have_the_models_size_and_unit_length(onnx_embedder, texts):
    assert (onnx_embedder.provider, onnx_embedder.model, onnx_embedder.dimensions) == ("local", BUNDLED_MODEL, 384)
    assert onnx_embedder.backend == {"fp32": "onnx", "int8": "onnx-int8"}[onnx_embedder.variant]
    vectors = np.asarray(onnx_embedder.embed_documents([*texts[:5], "x"]))
    assert vectors.shape == (6, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)


@pytest.mark.slow
def test_long_text_is_truncated_at_256_tokens_like_torch(onnx_embedder, torch_embedder):
    words = [f"word{i}" for i in range(400)]
    head = " ".join(words)
    longer = head + " " + "completely different tail about volcanoes " * 40
    tokens = len(onnx_embedder._tokenizer.encode(head).ids)
    assert tokens == MAX_TOKENS  # cut to the window: 400 words make far more than 256 tokens
    same_window = cosines(onnx_embedder.embed_documents([head]), onnx_embedder.embed_documents([longer]))
    assert same_window[0] == pytest.approx(1.0, abs=1e-5)  # the tail past 256 tokens is cut off

    # Past 128 tokens still counts (the packaged tokenizer.json says 128): the vector follows torch.
    mid = " ".join(words[:100]) + " the end of this text is about volcanoes and lava"
    assert 128 < len(onnx_embedder._tokenizer.encode(mid).ids) < MAX_TOKENS
    ours = onnx_embedder.embed_documents([head, mid])
    reference = torch_embedder.embed_documents([head, mid])
    floor = FP32_MIN_COSINE if onnx_embedder.variant == "fp32" else INT8_MIN_COSINE
    assert cosines(ours, reference).min() >= floor


@pytest.mark.slow
def test_empty_input(onnx_embedder, torch_embedder):
    assert onnx_embedder.embed_documents([]) == []
    (empty,) = onnx_embedder.embed_documents([""])
    assert len(empty) == 384 and np.linalg.norm(empty) == pytest.approx(1.0, abs=1e-4)
    floor = FP32_MIN_COSINE if onnx_embedder.variant == "fp32" else INT8_MIN_COSINE
    assert cosines([empty], torch_embedder.embed_documents([""]))[0] >= floor


@pytest.mark.slow
def test_batching_and_order_do_not_change_vectors(onnx_embedder, export_dir, texts):
    sample = [texts[0], "short", texts[5], "", texts[9] * 3, "short"]
    one_by_one = OnnxEmbedder(variant=onnx_embedder.variant, export_dir=export_dir, batch_size=1)
    together = onnx_embedder.embed_documents(sample)
    alone = cosines(together, one_by_one.embed_documents(sample))
    if onnx_embedder.variant == "fp32":
        assert alone.min() == pytest.approx(1.0, abs=1e-5)
    else:
        # Dynamic int8 scales activations per batch tensor, so a text's vector depends a little on
        # its batch-mates (measured: cosine 0.96 for a short text beside long ones). Another reason
        # int8 vectors never share a collection with float ones.
        assert alone.min() >= 0.95, alone.min()
    reversed_order = onnx_embedder.embed_documents(sample[::-1])[::-1]
    assert cosines(together, reversed_order).min() == pytest.approx(1.0, abs=1e-5)
    assert together[1] == together[5]  # the same text, the same vector


@pytest.mark.slow
def test_runs_stay_within_the_token_budget_and_the_batch_size(export_dir, texts):
    model = OnnxEmbedder(variant="fp32", export_dir=export_dir, batch_size=8, batch_tokens=512)
    model.load()
    shapes: list[tuple[int, int]] = []
    session = model._session

    class Recording:  # the real session, with each run's input shape written down
        def run(self, outputs, feeds):
            shapes.append(feeds["input_ids"].shape)
            return session.run(outputs, feeds)

    model._session = Recording()
    sample = [*texts[:20], *[f"short text {i}" for i in range(30)]]
    vectors = model.embed_documents(sample)
    assert sum(rows for rows, _ in shapes) == len(sample) and len(vectors) == len(sample)
    assert all(rows <= 8 and (rows == 1 or rows * width <= 512) for rows, width in shapes), shapes
    assert max(width for _, width in shapes) > 100 and min(width for _, width in shapes) < 10  # padded per run
    assert max(rows for rows, _ in shapes) == 8  # short texts share a run up to the batch size
    model._session = session
    alone = OnnxEmbedder(variant="fp32", export_dir=export_dir, batch_size=1)
    assert cosines(vectors, alone.embed_documents(sample)).min() == pytest.approx(1.0, abs=1e-5)


def test_a_query_does_not_wait_for_a_document_run_and_gets_the_same_vector(export_dir, texts):
    model = OnnxEmbedder(variant="int8", export_dir=export_dir)
    model.load()
    expected = model.embed_documents(["how do I roll back a release?", *texts[:3]])
    held, release = threading.Event(), threading.Event()

    def document_run_in_progress() -> None:
        with model._locks[False].hold(query=False):
            held.set()
            release.wait(timeout=60)

    writer = threading.Thread(target=document_run_in_progress)
    writer.start()
    try:
        assert held.wait(timeout=30)
        answer: list[list[list[float]]] = []
        asker = threading.Thread(
            target=lambda: answer.append(model.embed_query_lane(["how do I roll back a release?", *texts[:3]]))
        )
        asker.start()
        asker.join(timeout=60)
        assert answer, "the query waited for the document's run"
    finally:
        release.set()
        writer.join(timeout=60)
    assert cosines(answer[0], expected).min() == pytest.approx(1.0, abs=1e-5)


# --- the export cache --------------------------------------------------------------------------------


def copy_exports(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target / model_slug(BUNDLED_MODEL)


@pytest.mark.slow
def test_a_valid_export_is_reused(export_dir, tmp_path, monkeypatch):
    folder = copy_exports(export_dir, tmp_path / "onnx")
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}

    def no_export(*args: object) -> None:
        raise AssertionError("a valid export was made again")

    monkeypatch.setattr(onnx_export, "export_fp32", no_export)
    monkeypatch.setattr(onnx_export, "quantize_int8", no_export)
    assert ensure_exports(BUNDLED_MODEL, tmp_path / "onnx", "int8") == folder
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "flipped-byte", "no-manifest"])
def test_a_damaged_export_is_made_again(export_dir, tmp_path, damage):
    folder = copy_exports(export_dir, tmp_path / "onnx")
    graph = folder / "int8.onnx"
    if damage == "truncated":  # a write cut short (a killed export from before the atomic rename)
        with open(graph, "r+b") as fh:
            fh.truncate(graph.stat().st_size // 2)
    elif damage == "flipped-byte":
        with open(graph, "r+b") as fh:
            fh.seek(graph.stat().st_size // 2)
            byte = fh.read(1)
            fh.seek(-1, os.SEEK_CUR)
            fh.write(bytes([byte[0] ^ 0xFF]))
    else:
        manifest_path(graph).unlink()
    assert not is_valid(graph, None)
    (folder / ".int8.onnx.abc123.tmp").write_bytes(b"left by a killed export")

    ensure_exports(BUNDLED_MODEL, tmp_path / "onnx", "int8")
    assert is_valid(graph, None)
    assert graph.read_bytes() == (export_dir / model_slug(BUNDLED_MODEL) / "int8.onnx").read_bytes()
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind


@pytest.mark.slow
def test_two_starts_at_once_export_once(export_dir, tmp_path, monkeypatch):
    folder = copy_exports(export_dir, tmp_path / "onnx")
    (folder / "int8.onnx").unlink()
    calls: list[int] = []
    real = onnx_export.quantize_int8

    def counted(source: Path, target: Path) -> None:
        calls.append(1)
        real(source, target)

    monkeypatch.setattr(onnx_export, "quantize_int8", counted)
    errors: list[BaseException] = []

    def start() -> None:
        try:
            ensure_exports(BUNDLED_MODEL, tmp_path / "onnx", "int8")
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and calls == [1]
    assert is_valid(folder / "int8.onnx", None)


def test_without_weights_a_missing_export_is_a_configuration_error(tmp_path):
    with pytest.raises(ConfigurationError, match="no valid ONNX export") as refused:
        ensure_exports(str(tmp_path / "no-such-model"), tmp_path / "onnx", "fp32")
    assert "requirements/search-model.txt" in str(refused.value)


@pytest.mark.slow
def test_the_onnx_backend_never_imports_torch(export_dir):
    script = (
        "import sys\n"
        "from kbsearch.embedders.factory import build_embedder\n"
        "from kbsearch.settings import Settings\n"
        "settings = Settings()\n"
        "embedder = build_embedder(settings.embedding, settings.storage.data_dir)\n"
        "embedder.load()\n"
        "assert len(embedder.embed_query('hello')) == 384\n"
        "heavy = sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules)\n"
        "print(embedder.backend, heavy)\n"
    )
    paths = [str(Path(kbsearch.__file__).resolve().parents[1]), str(REPO)]
    for backend in ("onnx", "onnx-int8"):
        env = os.environ | {
            "PYTHONPATH": os.pathsep.join(paths),
            "SEARCHSVC_LOCAL_BACKEND": backend,
            "SEARCHSVC_ONNX_DIR": str(export_dir),
        }
        child = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert child.returncode == 0, child.stderr
        assert child.stdout.split() == [backend, "[]"]


def test_settings_choose_the_backend(tmp_path):
    torch_backend = embedder_of(Settings(local_backend="torch", embed_cache_size=0))
    assert isinstance(torch_backend, LocalEmbedder) and torch_backend.backend == "torch"
    int8 = embedder_of(Settings(local_backend="onnx-int8", data_dir=tmp_path, embed_cache_size=0, local_threads=1))
    assert isinstance(int8, OnnxEmbedder)
    assert (int8.backend, int8.variant, int8.export_dir, int8.threads) == ("onnx-int8", "int8", tmp_path / ".onnx", 1)
    cached = embedder_of(Settings(local_backend="onnx", onnx_dir=tmp_path / "elsewhere"))
    assert cached.backend == "onnx"
    assert cached.inner.export_dir == tmp_path / "elsewhere"  # type: ignore[attr-defined]


def test_the_quantiser_says_nothing_through_the_root_logger(export_dir, tmp_path, caplog):
    source = next(export_dir.rglob("fp32.onnx"))  # the module's export, made by the fixture
    target = tmp_path / "int8.onnx"
    caplog.set_level(logging.INFO)
    quantize_int8(source, target)  # onnxruntime's quantiser logs ~35 lines through the root logger
    assert target.stat().st_size > 1_000_000
    assert [r.getMessage() for r in caplog.records if r.name == "root"] == []
    # What the quiet block drops and keeps: records made on the root logger, not named loggers'.
    with _quantiser_quiet():
        logging.info("dropped")  # noqa: LOG015 - what the quantiser does
        logging.getLogger("kbsearch.probe").info("kept")
    logging.info("spoken again")  # noqa: LOG015 - the root logger, as the quantiser uses it
    assert [r.getMessage() for r in caplog.records] == ["kept", "spoken again"]
