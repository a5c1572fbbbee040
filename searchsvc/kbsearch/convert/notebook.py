"""Jupyter notebooks (nbformat): markdown cells as they are, code cells fenced, outputs cut short.

Each cell is anchored (1-based, in notebook order) so a hit can name its cell. Outputs are results,
not documentation: each keeps at most OUTPUT_CHARS characters of its text (images and HTML
outputs are left out), so a notebook with megabytes of output indexes like one without.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import nbformat
from nbformat.reader import NotJSONError

from kbsearch.convert.base import Anchor, ConversionError, Converted, decode_utf8

__all__ = ["OUTPUT_CHARS", "NotebookConverter"]

OUTPUT_CHARS = 1_000  # per output
CELL_OUTPUT_CHARS = 2_000  # all outputs of one cell
_TRUNCATED = "… (output truncated)"
# A fence's info string is one word: a kernel language with a newline or a backtick would end the
# fence early (or never open it) and let the cell's code run on as markdown.
_LANGUAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_+.#-]{0,31}")


def _joined(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


def _output_text(output: Any) -> str:
    kind = output.get("output_type")
    if kind == "stream":
        return _joined(output.get("text"))
    if kind == "error":
        return f"{output.get('ename', '')}: {output.get('evalue', '')}"
    data = output.get("data") or {}
    if "text/markdown" in data:
        return _joined(data["text/markdown"])
    return _joined(data.get("text/plain", ""))


def _fence(text: str, lang: str = "") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def _outputs(outputs: list[Any]) -> str:
    kept: list[str] = []
    budget = CELL_OUTPUT_CHARS
    for output in outputs:
        text = _output_text(output).strip()
        if not text:
            continue
        cut = min(OUTPUT_CHARS, budget)
        if len(text) > cut:
            text = text[:cut].rstrip() + "\n" + _TRUNCATED
        kept.append(text)
        budget -= min(len(text), budget)
        if budget <= 0:
            kept.append(_TRUNCATED)
            break
    return _fence("\n".join(kept), "text") if kept else ""


class NotebookConverter:
    name = "ipynb"
    version = 1
    binary = False

    def convert(self, data: bytes) -> Converted:
        source = decode_utf8(data, "the notebook")
        logging.getLogger("traitlets").setLevel(logging.CRITICAL)  # nbformat's validation chatter
        try:
            # Not nbformat.reads: its schema validation only logs, and opens a schema file per minor
            # version, which the conversion sandbox forbids (a notebook "from the future" has a new one).
            notebook = nbformat.convert(nbformat.reader.reads(source), 4)  # type: ignore[no-untyped-call]
        except (NotJSONError, json.JSONDecodeError) as exc:
            raise ConversionError(f"the notebook is not valid JSON: {exc}", code="CORRUPT_DOCUMENT") from None
        except (nbformat.ValidationError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConversionError(f"the file is not a Jupyter notebook: {exc}", code="CORRUPT_DOCUMENT") from None
        declared = str((notebook.get("metadata") or {}).get("kernelspec", {}).get("language") or "python")
        language = declared if _LANGUAGE.fullmatch(declared) else ""
        parts: list[str] = []
        anchors: list[Anchor] = []
        offset = 0
        for number, cell in enumerate(notebook.get("cells") or [], start=1):
            body = _joined(cell.get("source")).strip()
            if cell.get("cell_type") == "code":
                pieces = [_fence(body, language)] if body else []
                outputs = _outputs(cell.get("outputs") or [])
                if outputs:
                    pieces.append(outputs)
                body = "\n\n".join(pieces)
            if not body:
                continue
            anchors.append(Anchor(offset, cell=number))
            parts.append(body)
            offset += len(body) + 2
        return Converted("\n\n".join(parts) + "\n", tuple(anchors))
