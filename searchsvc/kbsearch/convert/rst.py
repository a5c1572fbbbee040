"""reStructuredText (docutils): parsed to HTML5, then to markdown like any page.

Sphinx adds roles and directives docutils does not know; the common ones are registered here so
their text survives (`:ref:` shows its title, `.. versionadded::` its body) and `toctree` goes.
Anything still unknown is left out silently rather than shown as an error message. Includes and
raw passthrough are off: a document never reads a file of the server.
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Sequence
from typing import Any, ClassVar

from docutils import nodes
from docutils.core import publish_parts
from docutils.parsers.rst import Directive, directives, roles

from kbsearch.convert.base import ConversionError, Converted, decode_utf8
from kbsearch.convert.htmltext import html_to_markdown

__all__ = ["RstConverter"]

# Sphinx cross-reference roles: `:ref:`Title <label>`` reads as "Title", `:func:`name`` as "name".
_TEXT_ROLES = (
    "ref", "doc", "term", "numref", "any", "download", "keyword", "option", "envvar", "token",
    "abbr", "command", "dfn", "file", "guilabel", "kbd", "mailheader", "makevar", "manpage",
    "menuselection", "mimetype", "newsgroup", "program", "regexp", "samp",
    "py:func", "py:meth", "py:class", "py:mod", "py:attr", "py:exc", "py:data", "py:const", "py:obj",
    "func", "meth", "class", "mod", "attr", "exc", "data", "const", "obj",
)  # fmt: skip
# Roles whose text reads as prose (a link's title, a term); the others name code and stay code.
_PROSE_ROLES = frozenset(
    {"ref", "doc", "term", "numref", "any", "download", "abbr", "dfn", "guilabel", "menuselection"}
)
# Sphinx directives whose body is ordinary content.
_BODY_DIRECTIVES = (
    "versionadded", "versionchanged", "deprecated", "seealso", "only", "glossary", "centered", "hlist",
    "tab", "tabs", "group-tab", "code-tab", "card", "grid", "grid-item", "grid-item-card", "dropdown",
    "tab-set", "tab-item", "admonition-body",
)  # fmt: skip
# Sphinx directives with nothing to read: navigation, or text taken from elsewhere.
_DROPPED_DIRECTIVES = (
    "toctree", "literalinclude", "autoclass", "automodule", "autofunction", "automethod", "autodata",
    "autoattribute", "autosummary", "index", "highlight", "currentmodule", "module", "program",
    "sectionauthor", "codeauthor", "tabularcolumns", "graphviz", "plantuml", "mermaid",
)  # fmt: skip
_TARGET = re.compile(r"^(.*?)\s*<[^<>]+>$", re.DOTALL)
_registered = threading.Lock()
_done = False


def _text_role(
    name: str, rawtext: str, text: str, lineno: int, inliner: Any, options: Any = None, content: Any = None
) -> tuple[Sequence[nodes.Node], list[nodes.system_message]]:
    match = _TARGET.match(text)
    shown = (match.group(1) if match and match.group(1) else text).lstrip("~!")
    if name in _PROSE_ROLES:
        return [nodes.inline(rawtext, shown)], []
    return [nodes.literal(rawtext, shown)], []


class _Body(Directive):  # type: ignore[misc]  # docutils ships no types
    """Parses its content as ordinary body elements; its arguments, if any, become a first paragraph."""

    has_content = True
    optional_arguments = 1
    final_argument_whitespace = True
    option_spec: ClassVar[dict[str, Any]] = {}

    def run(self) -> list[nodes.Node]:
        container = nodes.container()
        if self.arguments:
            container += nodes.paragraph(text=self.arguments[0])
        self.state.nested_parse(self.content, self.content_offset, container)
        return [container]


class _AnyOptions(dict[str, Any]):
    def __missing__(self, key: str) -> Any:
        return directives.unchanged


_Body.option_spec = _AnyOptions()


class _Dropped(Directive):  # type: ignore[misc]
    has_content = True
    optional_arguments = 10
    final_argument_whitespace = True
    option_spec = _AnyOptions()

    def run(self) -> list[nodes.Node]:
        return []


def _register() -> None:
    """Once per process: docutils keeps roles and directives in module-level registries."""
    global _done
    with _registered:
        if _done:
            return
        for name in _TEXT_ROLES:
            roles.register_local_role(name, _text_role)
        for name in _BODY_DIRECTIVES:
            directives.register_directive(name, _Body)
        for name in _DROPPED_DIRECTIVES:
            directives.register_directive(name, _Dropped)
        _done = True


_SETTINGS = {
    "file_insertion_enabled": False,  # no `.. include::` of server files
    "raw_enabled": False,
    "report_level": 5,  # problems are not shown in the text...
    "halt_level": 5,  # ...nor do they stop the conversion
    "doctitle_xform": False,  # the top heading stays a heading (the chunker takes the H1 as title)
    "initial_header_level": 1,
    "syntax_highlight": "none",
    "embed_stylesheet": False,
    "smart_quotes": False,
    "input_encoding": "unicode",
    "_disable_config": True,
}


class RstConverter:
    name = "rst"
    version = 1
    binary = False

    def convert(self, data: bytes) -> Converted:
        source = decode_utf8(data, "the reStructuredText file")
        _register()
        try:
            parts = publish_parts(
                source, writer="html5", settings_overrides={**_SETTINGS, "warning_stream": io.StringIO()}
            )
        except (nodes.NodeFound, ValueError, AttributeError, IndexError) as exc:  # docutils' own failures
            raise ConversionError(f"docutils could not read the file: {exc}", code="CORRUPT_DOCUMENT") from None
        text, _ = html_to_markdown(parts["body"], whole=True)
        return Converted(text)
