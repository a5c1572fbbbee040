"""Front matter: a leading YAML (`---`), TOML (`+++`) or JSON (`{...}`) block, and the title and tags it names."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from typing import Any

import yaml

# Front matter larger than this is not parsed (it is kept as body text): real front matter is a
# few lines, and the cap bounds YAML/TOML parse time on hostile input.
MAX_FRONT_MATTER_CHARS = 64 * 1024
# Deeper YAML is not front matter: libyaml's composer recurses without a check (`a: [[[[...` 30,000
# deep crashes the process), so nesting is measured on the event stream before anything is built.
MAX_YAML_DEPTH = 32
# Aliases are built as shared references, but anything that walks the mapping (a print, a JSON
# dump) expands them: a 1 KB "billion laughs" is 10^9 nodes. Front matter that would expand to more
# nodes than this is not front matter.
MAX_YAML_NODES = 100_000

_YAML_CLOSE = re.compile(r"^(?:---|\.\.\.)[ \t]*$", re.MULTILINE)
_TOML_CLOSE = re.compile(r"^\+\+\+[ \t]*$", re.MULTILINE)


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """Front matter as a mapping, and the body after it.

    Front matter that does not parse, or is not a mapping, stays in the body: a leading `---` is
    also legal markdown (a thematic break, or a setext underline below it), and its text must
    remain searchable rather than vanish silently. Blank lines before the opener are allowed (Hugo
    and many editors accept them), and the body then starts after the closer.
    """
    lead = len(text) - len(text.lstrip(" \t\n"))
    lead = text.rfind("\n", 0, lead) + 1  # the opener's line start: its indentation is not skipped
    if text.startswith("{", lead):
        return _split_json(text, lead)
    first = text.find("\n", lead)
    if first < 0:
        return {}, text
    opener = text[lead:first].rstrip(" \t")
    parse: Callable[[str], Any]
    if opener == "---":
        closer, parse = _YAML_CLOSE, _parse_yaml
    elif opener == "+++":
        closer, parse = _TOML_CLOSE, tomllib.loads
    else:
        return {}, text
    match = closer.search(text, first + 1, first + 1 + MAX_FRONT_MATTER_CHARS + 8)
    # The search window may end mid-line: a closer must be a whole line.
    if match is None or (match.end() < len(text) and text[match.end()] != "\n"):
        return {}, text
    raw = text[first + 1 : match.start()]
    try:
        data = parse(raw)
    except Exception:  # noqa: BLE001 - any parser failure (syntax, recursion, bad types) means "not front matter"
        return {}, text
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return {}, text
    body_start = match.end() + 1 if match.end() < len(text) else match.end()
    return data, text[body_start:]


def _split_json(text: str, lead: int) -> tuple[dict[str, Any], str]:
    """Hugo's JSON front matter: an object at the very start, the body after the line it closes on."""
    try:
        data, end = json.JSONDecoder().raw_decode(text[lead : lead + MAX_FRONT_MATTER_CHARS])
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the interpreter's stack
        return {}, text
    end += lead
    if not isinstance(data, dict) or text[end : text.find("\n", end) if "\n" in text[end:] else len(text)].strip():
        return {}, text
    newline = text.find("\n", end)
    return data, "" if newline < 0 else text[newline + 1 :]


def _parse_yaml(raw: str) -> Any:
    """The YAML document, once a pass over its events (iterative, linear) has measured its nesting
    and the number of nodes it holds with every alias expanded."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    open_nodes: list[tuple[str | None, int]] = [(None, 0)]  # (anchor, nodes so far) per open collection
    expanded: dict[str, int] = {}  # anchor -> nodes of what it names, aliases expanded
    for event in yaml.parse(raw, Loader=loader):
        if isinstance(event, yaml.CollectionStartEvent):
            open_nodes.append((event.anchor, 1))
            if len(open_nodes) > MAX_YAML_DEPTH:
                raise ValueError("front matter nested too deep")
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, nodes = open_nodes.pop()
        elif isinstance(event, yaml.AliasEvent):
            anchor, nodes = None, expanded.get(event.anchor or "", 1)
        elif isinstance(event, yaml.ScalarEvent):
            anchor, nodes = event.anchor, 1
        else:
            continue
        if anchor:
            expanded[anchor] = nodes
        parent_anchor, total = open_nodes[-1]
        open_nodes[-1] = (parent_anchor, total + nodes)
        if total + nodes > MAX_YAML_NODES:
            raise ValueError("front matter expands to too many nodes")
    return yaml.load(raw, Loader=loader)


def front_matter_title(meta: dict[str, Any]) -> str | None:
    title = meta.get("title")
    if isinstance(title, str) and title.strip():
        return " ".join(title.split())
    return None


def front_matter_tags(meta: dict[str, Any]) -> list[str]:
    raw = meta.get("tags")
    if isinstance(raw, str):
        items = raw.split(",")
    elif isinstance(raw, list):
        items = [item for item in raw if isinstance(item, str)]
    else:
        return []
    return list(dict.fromkeys(tag.strip() for tag in items if tag.strip()))
