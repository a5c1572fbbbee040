"""reStructuredText (docutils): parsed to HTML5, then to markdown like any page.

Sphinx adds roles and directives docutils does not know; the common ones are registered here so
their text survives (`:ref:` shows its title, `.. versionadded::` its body) and `toctree` goes.
Anything still unknown is left out silently rather than shown as an error message.

A document never reads a file, a URL or the environment of the server: images and figures become
their alt text (their caption and legend stay), `include`, `raw` (directive and role),
`literalinclude` and a `csv-table` with `:file:` or `:url:` are dropped, file insertion and raw
passthrough are off in the settings too, and before the HTML writer runs any image or raw node
left in the tree is replaced by its alt text, so the writer has nothing to embed or measure.
The conversion child's sandbox (worker.py) stops any read these miss.
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Sequence
from typing import Any, ClassVar

from docutils import nodes
from docutils.core import publish_doctree, publish_from_doctree
from docutils.parsers.rst import Directive, directives, roles, states
from docutils.parsers.rst.directives.tables import CSVTable
from docutils.writers.html5_polyglot import Writer

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


class _BodyWriter(Writer):  # type: ignore[misc]
    """docutils' HTML5 writer without the page template: only `parts["body"]` is used, and the
    template is a file the conversion sandbox does not let the writer open."""

    def apply_template(self) -> str:
        return ""


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
    """Every option accepted as text. Truthy though empty: docutils parses no options for a falsy spec."""

    def __missing__(self, key: str) -> Any:
        return directives.unchanged

    def __bool__(self) -> bool:
        return True


_Body.option_spec = _AnyOptions()


class _Dropped(Directive):  # type: ignore[misc]
    has_content = True
    optional_arguments = 10
    final_argument_whitespace = True
    option_spec = _AnyOptions()

    def run(self) -> list[nodes.Node]:
        return []


def _alt(options: dict[str, Any]) -> str:
    return str(options.get("alt") or "").strip()


class _Image(Directive):  # type: ignore[misc]
    """`.. image::`: its alt text, never the file (docutils' own would embed it for `:loading: embed`)."""

    required_arguments = 1
    final_argument_whitespace = True
    option_spec = _AnyOptions()

    def run(self) -> list[nodes.Node]:
        alt = _alt(self.options)
        if isinstance(self.state, states.SubstitutionDef):  # `.. |name| image::` stands inline
            return [nodes.Text(alt)] if alt else []
        return [nodes.paragraph(text=alt)] if alt else []


class _Figure(_Image):
    """`.. figure::`: alt text, then the caption and legend as ordinary paragraphs."""

    has_content = True

    def run(self) -> list[nodes.Node]:
        container = nodes.container()
        container += super().run()
        self.state.nested_parse(self.content, self.content_offset, container)
        return [container]


class _CsvTable(CSVTable):  # type: ignore[misc]
    """A `csv-table` of its own content; one that would read `:file:` or `:url:` is dropped."""

    def run(self) -> list[nodes.Node]:
        if "file" in self.options or "url" in self.options:
            return []
        return list(super().run())


class _DroppedRole:
    """The `raw` role, and `.. role:: x(raw)` made from it: its text is left out (and never passed through)."""

    options: ClassVar[dict[str, Any]] = {"format": directives.unchanged, "encoding": directives.unchanged}

    def __call__(
        self, name: str, rawtext: str, text: str, lineno: int, inliner: Any, options: Any = None, content: Any = None
    ) -> tuple[Sequence[nodes.Node], list[nodes.system_message]]:
        return [], []


# Directives that would read a file, a URL or pass markup through; `literalinclude` is above.
_REFUSED_DIRECTIVES = ("include", "raw")


def _alt_text_only(doctree: nodes.document) -> None:
    """Whatever made an image or raw node (a directive we did not foresee), the writer sees none."""
    for node in list(doctree.findall(nodes.image)):
        alt = _alt(node.attributes)
        replacement = nodes.Text(alt) if isinstance(node.parent, nodes.TextElement) else nodes.paragraph(text=alt)
        node.replace_self(replacement if alt else [])
    for node in list(doctree.findall(nodes.raw)):
        node.parent.remove(node)


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
        for name in (*_DROPPED_DIRECTIVES, *_REFUSED_DIRECTIVES):
            directives.register_directive(name, _Dropped)
        directives.register_directive("image", _Image)
        directives.register_directive("figure", _Figure)
        directives.register_directive("csv-table", _CsvTable)
        roles.register_local_role("raw", _DroppedRole())  # also the base of `.. role:: x(raw)`
        _done = True


_SETTINGS = {
    "file_insertion_enabled": False,  # no `.. include::` of server files
    "raw_enabled": False,
    "image_loading": "link",  # never "embed": the writer would read the file
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
    version = 2  # 2: images and figures are their alt text
    binary = False

    def convert(self, data: bytes) -> Converted:
        source = decode_utf8(data, "the reStructuredText file")
        _register()
        settings = {**_SETTINGS, "warning_stream": io.StringIO()}
        writer = _BodyWriter()
        try:
            doctree = publish_doctree(source, settings_overrides=settings)
            _alt_text_only(doctree)
            publish_from_doctree(doctree, writer=writer, settings_overrides=settings)
        except (nodes.NodeFound, ValueError, AttributeError, IndexError) as exc:  # docutils' own failures
            raise ConversionError(f"docutils could not read the file: {exc}", code="CORRUPT_DOCUMENT") from None
        text, _ = html_to_markdown(writer.parts["body"], whole=True)
        return Converted(text)
