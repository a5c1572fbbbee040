"""The document page's markdown: rendered once, sanitised (Hypothesis over hostile markdown), the passage marked."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbsearch.console.markdown import MAX_RAW_TAGS, Passage, render_document
from tests.console.corpus import XSS_CONTENT, XSS_URI
from tests.support.service import running_service

URI = "https://git.example.com/team/docs/-/blob/main/guide/page.md"
SAFE_SCHEMES = ("http://", "https://", "mailto:")


class Elements(HTMLParser):
    """Every start tag with its attributes, as a browser's tokenizer reads them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, {name: value or "" for name, value in attrs}))


def elements(html: str) -> list[tuple[str, dict[str, str]]]:
    parser = Elements()
    parser.feed(html)
    parser.close()
    return parser.found


def unsafe(html: str) -> list[str]:
    """What a sanitised fragment must never hold: active tags, handlers, styles, ids, foreign URLs."""
    problems = []
    for tag, attrs in elements(html):
        if tag in ("script", "style", "iframe", "object", "embed", "img", "svg", "math", "form", "input", "base"):
            problems.append(tag)
        for name, value in attrs.items():
            if name.startswith("on") or name in ("style", "src", "srcdoc", "formaction"):
                problems.append(f"{tag} {name}")
            if name == "href" and not value.startswith(SAFE_SCHEMES):
                problems.append(f"{tag} href={value}")
            if name == "id" and (tag, attrs.get("class")) != ("div", "passage"):
                problems.append(f"{tag} id")  # only the page's own passage wrapper has one
        if tag == "a" and "href" in attrs and attrs.get("rel") != "noopener noreferrer nofollow":
            problems.append(f"a rel={attrs.get('rel')}")
    return problems


HOSTILE = [
    "<script>alert(1)</script>",
    "<SCRIPT SRC=//evil.example.com/x.js></SCRIPT>",
    '<img src=x onerror="alert(1)">',
    "<svg/onload=alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
    '<a href="  JaVaScRiPt:alert(1)">x</a>',
    "[x](javascript:alert(1))",
    "[x](&#106;avascript:alert(1))",
    "[x](data:text/html,<script>alert(1)</script>)",
    "![y](https://tracker.example.com/p.png)",
    '<iframe srcdoc="<script>alert(1)</script>"></iframe>',
    '<div style="background:url(javascript:alert(1))">s</div>',
    '<p class="passage" id="passage">forged</p>',
    "<style>*{display:none}</style>",
    '<details open ontoggle="alert(1)">d</details>',
    '<form action="https://evil.example.com"><button formaction="javascript:alert(1)">b</button></form>',
    "<!-- <script>alert(1)</script> -->",
    '<a href="vbscript:msgbox(1)">v</a>',
    "<math><mi xlink:href=javascript:alert(1)>m</mi></math>",
    "<base href=https://evil.example.com/>",
    "`<script>` in code",
    "```html\n<script>alert(1)</script>\n```",
    '!!! note "<img src=x onerror=alert(1)>"\n    body <script>alert(1)</script>',
    "> [!WARNING]\n> <img src=x onerror=alert(1)>",
    '| a | <b onclick="alert(1)">b</b> |\n|---|---|\n| <script>x</script> | y |',
    '<noscript><p title="</noscript><img src=x onerror=alert(1)>"></noscript>',
]
BLOCKS = st.sampled_from(
    ["# Title", "## Section", "- item", "1. first", "> quote", "    indented", "```", "---", "| a |", "!!! tip", ""]
)
markdown = st.lists(
    st.one_of(st.sampled_from(HOSTILE), BLOCKS, st.text(alphabet=st.characters(codec="utf-8"), max_size=40)),
    max_size=12,
).map("\n".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=markdown, start=st.integers(0, 400), length=st.integers(0, 400), web=st.booleans())
def test_no_markdown_yields_script_handlers_or_foreign_urls(body: str, start: int, length: int, web: bool) -> None:
    rendered = render_document(body, base=URI if web else None, passage=Passage(start, start + length), title=None)
    assert unsafe(str(rendered.html)) == [], body
    # An element, not text: a code block may show `id="passage"` as escaped characters.
    assert sum(attrs.get("id") == "passage" for _, attrs in elements(str(rendered.html))) <= 1


def test_headings_code_tables_admonitions_and_links_render_as_readers_expect() -> None:
    body = (
        "# Page\n\nIntro with [a link](../other.md#part), [an absolute one](https://example.com/x) "
        "and `code`.\n\n## Install\n\n```bash\nhelm install kb ./chart\n```\n\n"
        '| Name | Size |\n|:--|--:|\n| a | 1 |\n\n!!! warning "Careful"\n    Back up first.\n\n'
        "> [!TIP]\n> Use the chart's defaults.\n\n![diagram](img/d.png)\n"
    )
    html = str(render_document(body, base=URI, passage=None, title="Page").html)
    assert "<h1>" not in html  # the page's title already says it
    assert "<h2>Install</h2>" in html
    assert "<pre><code>helm install kb ./chart\n</code></pre>" in html
    assert '<th class="align-left">Name</th>' in html and '<td class="align-right">1</td>' in html
    assert re.search(r'<div class="admonition warning">\s*<p class="admonition-title">Careful</p>', html)
    assert re.search(r'<div class="admonition tip">\s*<p class="admonition-title">Tip</p><p>Use the chart', html)
    rel = 'rel="noopener noreferrer nofollow"'
    assert f'<a href="https://git.example.com/team/docs/-/blob/main/other.md#part" {rel}>a link</a>' in html
    assert f'<a class="image-link" href="https://git.example.com/team/docs/-/blob/main/guide/img/d.png" {rel}>' in html
    # Without a web address, a relative link cannot be resolved: it is dropped, its text kept.
    local = str(render_document(body, base=None, passage=None, title="Page").html)
    assert "other.md" not in local and "a link" in local and 'href="https://example.com/x"' in local


def test_the_passage_is_the_blocks_its_chunk_spans() -> None:
    body = "Intro paragraph.\n\n## Steps\n\nFirst step here.\n\nSecond step here.\n\n## After\n\nThe end.\n"
    start = body.index("First step")
    rendered = render_document(body, base=None, passage=Passage(start, body.index("## After")), title=None)
    html = str(rendered.html)
    assert rendered.has_passage
    inside = html[html.index('<div class="passage"') : html.index("</div>")]
    assert "First step" in inside and "Second step" in inside and "Intro" not in inside and "The end" not in inside
    assert html.index("Intro") < html.index('<div class="passage"') < html.index("The end")
    outside = render_document(body, base=None, passage=Passage(len(body) + 10, len(body) + 20), title=None)
    assert not outside.has_passage and "passage" not in str(outside.html)


async def test_the_document_page_renders_the_hostile_page_safely_and_marks_the_hit(tmp_path: Path) -> None:
    guide = (
        "# Guide\n\n## Setup\n\nRun `helm install` with the values file that the platform team keeps.\n\n"
        "| a | b |\n|---|---|\n| 1 | 2 |\n\n## Use\n\nSearch away: every team's pages are indexed within minutes.\n"
    )
    chunking = {"chunk_min_chars": 50, "chunk_max_chars": 100}
    async with running_service("edge", tmp_path / "data", chunking=chunking) as client:
        for uri, content in ((XSS_URI, XSS_CONTENT), (URI, guide)):
            response = await client.put("/api/v1/documents", json={"uri": uri, "content": content})
            assert response.status_code == 200, response.text
        page = await client.get("/ui/document", params={"uri": XSS_URI})
        assert page.status_code == 200
        main = page.text[page.text.index('<article class="doc') : page.text.index("</article>")]
        assert unsafe(main) == [] and "<h1>Hostile" in main and "<b>bold</b>" in main
        scripts = [attrs for tag, attrs in elements(page.text) if tag == "script"]
        assert [s["src"].split("?")[0] for s in scripts] == ["/ui/static/htmx.min.js"]  # the page's own, no other
        plain = (await client.get("/ui/document", params={"uri": URI})).text
        assert "<h2>Setup</h2>" in plain and 'class="passage"' not in plain
        found = re.findall(r'<li id="chunk-(\d+)"[^>]*>.*?<div class="chunk-text">(.*?)</div>', plain, re.S)
        assert len(found) >= 2, found
        setup = next(int(index) for index, text in found if "helm install" in text)
        marked = (await client.get("/ui/document", params={"uri": URI, "chunk": setup})).text
        passage = marked[marked.index('<div class="passage" id="passage"') :]
        passage = passage[: passage.index("</div>")]  # its blocks have no div of their own
        assert "<h2>Setup</h2>" in passage and "<code>helm install</code>" in passage
        assert "<table>" not in passage and "<table>" in marked  # the next chunk's blocks are not marked


def test_raw_html_past_the_cap_is_shown_as_text() -> None:
    nested = "<div>" * (MAX_RAW_TAGS + 1) + "deep"
    html = str(render_document(nested, base=None, passage=None, title=None).html)
    assert "<div>" not in html and "&lt;div&gt;" in html and "deep" in html
    kept = str(render_document("<kbd>Ctrl</kbd> " * 10, base=None, passage=None, title=None).html)
    assert kept.count("<kbd>Ctrl</kbd>") == 10


async def test_markdown_too_costly_to_render_is_shown_as_text_in_time(tmp_path: Path) -> None:
    hostile = "[" * 400_000 + " needle"  # markdown-it's inline pass is superlinear on runs of brackets
    async with running_service("edge", tmp_path / "data") as client:
        response = await client.put("/api/v1/documents", json={"uri": URI, "content": hostile})
        assert response.status_code == 200, response.text
        page = await client.get("/ui/document", params={"uri": URI})
        assert page.status_code == 200 and "too large or too complex to render" in page.text
        assert '<pre class="document-text card">[[[' in page.text and "needle" in page.text
