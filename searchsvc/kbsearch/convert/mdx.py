"""MDX (Docusaurus and friends): markdown with ESM imports/exports, JSX and {expressions}.

No maintained Python MDX parser exists, so this is a small scanner (MDX 2 rules, simplified):
- `import`/`export` blocks at the top level (up to the next blank line) are left out;
- JSX tags (`<Tabs>`, `<TabItem value="x">`, `<Foo />`) are left out, their children's text kept
  and dedented, so markdown indented inside a component is not taken for a code block;
- `{/* comments */}` and `{expressions}` are left out (outside code);
- fenced code and inline code are kept verbatim; front matter is kept for title and tags.
"""

from __future__ import annotations

import re

from kbsearch.convert.base import Converted, decode_utf8

__all__ = ["MdxConverter", "mdx_to_markdown"]

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})")
_ESM = re.compile(r"^(import|export)\s")
_FRONT_MATTER = re.compile(r"\A(---|\+\+\+)\n.*?\n\1[ \t]*(\n|\Z)", re.DOTALL)
_TAG_START = re.compile(r"<(/?)([A-Za-z][\w.:-]*)?")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# A tag or expression still open after this many lines was a stray "<" or "{" in prose.
MAX_JOINED_LINES = 40


def _scan_tag(line: str, i: int) -> int | None:
    """End (exclusive) of a JSX tag starting at line[i] == '<', or None if it is not one."""
    match = _TAG_START.match(line, i)
    if not match or (not match.group(2) and not match.group(1) and line[i + 1 : i + 2] != ">"):
        return None
    j, depth, quote = match.end(), 0, ""
    while j < len(line):
        c = line[j]
        if quote:
            quote = "" if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == ">" and depth <= 0:
            return j + 1
        j += 1
    return None


def _scan_braces(text: str, i: int) -> int | None:
    """End (exclusive) of a balanced {...} starting at text[i], or None."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return None


def _strip_jsx(text: str) -> tuple[str, int]:
    """Text without tags and expressions, and the change in component depth (opened minus closed)."""
    out: list[str] = []
    i, opened = 0, 0
    spans = {m.start(): m.end() for m in _CODE_SPAN.finditer(text)}
    while i < len(text):
        if i in spans:
            out.append(text[i : spans[i]])
            i = spans[i]
            continue
        c = text[i]
        if c == "<":
            end = _scan_tag(text, i)
            if end is not None:
                tag = text[i:end]
                if tag.startswith("</"):
                    opened -= 1
                elif not tag.endswith("/>"):
                    opened += 1
                i = end
                continue
        elif c == "{":
            end = _scan_braces(text, i)
            if end is not None:
                i = end
                continue
        out.append(c)
        i += 1
    return "".join(out), opened


def mdx_to_markdown(source: str) -> str:
    front = _FRONT_MATTER.match(source)
    head = front.group(0) if front else ""
    lines = source[len(head) :].split("\n")
    out: list[str] = [head.rstrip("\n")] if head else []
    depth = 0  # JSX components open around the current line
    fence: tuple[str, int] | None = None  # (marker, indentation) of the open code fence
    in_esm = False
    pending = ""  # a tag or expression spanning lines, joined until it closes
    for line in lines:
        if fence is not None:
            if line.strip().startswith(fence[0]) and not line.strip().strip(fence[0][0]):
                out.append(line.strip())
                fence = None
            else:
                out.append(line[fence[1] :] if line[: fence[1]].strip() == "" else line.lstrip())
            continue
        if in_esm:
            in_esm = bool(line.strip())
            continue
        if not pending and depth == 0 and _ESM.match(line):
            in_esm = bool(line.strip())
            continue
        opening = _FENCE.match(line)
        if opening and not pending:
            fence = (opening.group(2), len(opening.group(1)))
            out.append(line.lstrip())
            continue
        text = pending + line
        stripped, change = _strip_jsx(text)
        if _unclosed(text) and text.count("\n") < MAX_JOINED_LINES:
            pending = text + "\n"
            continue
        pending = ""
        depth = max(0, depth + change)
        if change or depth:
            stripped = stripped.strip() if not stripped.strip() else stripped.lstrip()
        out.append(stripped.rstrip())
    if pending:
        out.append(_strip_jsx(pending)[0])
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"


def _unclosed(text: str) -> bool:
    """Whether `text` ends inside a tag or an expression that continues on the next line."""
    spans = [(m.start(), m.end()) for m in _CODE_SPAN.finditer(text)]
    i = 0
    while i < len(text):
        inside = next((end for start, end in spans if start == i), None)
        if inside is not None:
            i = inside
            continue
        if text[i] == "{" and _scan_braces(text, i) is None:
            return True
        tag = _TAG_START.match(text, i) if text[i] == "<" else None
        if tag is not None and tag.group(2) and _scan_tag(text, i) is None:
            return True
        i += 1
    return False


class MdxConverter:
    name = "mdx"
    version = 1
    binary = False

    def convert(self, data: bytes) -> Converted:
        return Converted(mdx_to_markdown(decode_utf8(data, "the MDX file")))
