"""The document page reads like the docs, results link to the hit's passage, and /docs works offline: in Chromium."""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit

from playwright.sync_api import Page, Request, expect

from tests.console.browser.conftest import Console, shoot
from tests.console.corpus import BASE, XSS_URI

ROLLING = f"{BASE}/handbook/-/blob/main/deploy/rolling-deploys.md"

# Every attribute of every element whose name starts with "on", and every script or frame: none may be there.
HANDLERS = """() => [...document.querySelectorAll('*')].flatMap(e =>
  [...e.attributes].filter(a => a.name.startsWith('on')).map(a => e.tagName + ' ' + a.name))"""


def watch(page: Page) -> list[str]:
    """Console errors (a CSP violation is one) and uncaught script errors."""
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    return problems


def test_a_document_renders_as_markdown_once(handbook: Console, page: Page) -> None:
    problems = watch(page)
    page.goto(f"{handbook.url}/ui/document?uri={quote(ROLLING, safe='')}")
    doc = page.locator("article.doc")
    expect(page.locator("h1")).to_have_text("Rolling deploys")
    assert doc.locator("h1").count() == 0  # the title heading is the page's own, not repeated
    assert doc.locator("h2").all_inner_texts() == ["Before you deploy", "Rolling out", "Rolling back"]
    code = doc.locator("pre > code").first
    expect(code).to_contain_text("rollingUpdate:\n    maxSurge: 25%")  # lines and indentation kept
    assert code.evaluate("e => getComputedStyle(e).fontFamily").startswith("ui-monospace")
    table = doc.locator("table")
    assert table.locator("th").all_inner_texts() == ["Setting", "Value", "Why"]
    expect(table.locator("tbody tr")).to_have_count(2)
    assert table.locator("td.align-right").first.evaluate("e => getComputedStyle(e).textAlign") == "right"
    admonition = doc.locator("div.admonition.warning")
    expect(admonition.locator(".admonition-title")).to_have_text("Database migrations")
    expect(admonition).to_contain_text("must stay backward compatible")
    inline = doc.locator("p code", has_text="maxSurge: 25%")
    expect(inline).to_have_count(1)
    relative = doc.get_by_role("link", name="deployment guide")
    expect(relative).to_have_attribute("href", f"{BASE}/handbook/-/blob/main/guides/deploying.md")
    expect(relative).to_have_attribute("rel", "noopener noreferrer nofollow")
    # The markdown is shown once: the chunks behind it are folded away, for those who debug.
    chunks = page.locator("details.chunks-toggle")
    assert chunks.get_attribute("open") is None and not page.locator("ol.chunks").is_visible()
    assert "```yaml" not in page.locator("main").inner_text()
    height = page.evaluate("document.documentElement.scrollHeight")
    chunks.locator("summary").click()
    expect(page.locator("ol.chunks > li").first).to_be_visible()
    assert page.evaluate("document.documentElement.scrollHeight") > height * 1.3  # the chunks were most of it
    chunks.locator("summary").click()
    page.evaluate("window.scrollTo(0, 0)")
    shoot(page, "document")
    assert problems == []


def test_a_result_opens_its_passage_highlighted_and_scrolled_to(handbook: Console, page: Page) -> None:
    page.set_viewport_size({"width": 1280, "height": 600})
    page.goto(f"{handbook.url}/ui/?q=kubectl+rollout+undo+previous+ReplicaSet&source=platform%2Fhandbook")
    hit = page.locator(".hit").first
    expect(hit.locator(".hit-title")).to_have_text("Rolling deploys")
    href = hit.locator(".hit-title").get_attribute("href") or ""
    chunk = int(re.search(r"[?&]chunk=(\d+)", href).group(1))  # type: ignore[union-attr]
    assert href.endswith("#passage")
    hit.locator(".hit-title").click()
    passage = page.locator("article.doc .passage")
    expect(passage).to_have_count(1)
    expect(passage).to_contain_text("returns to the previous ReplicaSet")
    expect(passage).to_be_in_viewport()
    assert page.evaluate("window.scrollY") > 0  # scrolled down to it
    assert page.evaluate("location.hash") == "#passage"
    color = passage.evaluate("e => getComputedStyle(e).backgroundColor")
    assert color not in ("rgba(0, 0, 0, 0)", "rgb(255, 255, 255)"), color  # marked
    # The chunk the result was: the same text as the passage.
    chunk_text = page.locator(f"#chunk-{chunk} .chunk-text").text_content() or ""
    assert "returns to the previous ReplicaSet" in chunk_text
    assert "Before you deploy" not in passage.inner_text()  # only the hit's blocks are marked
    shoot(page, "document-passage")


def test_a_hostile_document_renders_without_running_anything(handbook: Console, page: Page) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    problems = watch(page)
    outside: list[str] = []
    page.on("request", lambda asked: None if asked.url.startswith(handbook.url) else outside.append(asked.url))
    page.goto(f"{handbook.url}/ui/document?uri={quote(XSS_URI, safe='')}")
    doc = page.locator("article.doc")
    expect(doc.locator("h1")).to_contain_text("Hostile")  # the document's own heading (its title differs)
    expect(doc.locator("b")).to_have_text("bold")  # harmless markup stays
    expect(doc.get_by_role("link", name="markdown link")).to_have_count(0)  # javascript: is no link
    expect(doc.locator("a.image-link")).to_have_text("Image: image")  # a remote image is a link, not loaded
    for element in ("script", "img", "svg", "iframe", "style", "form", "input"):
        assert page.locator(f"main {element}").count() == 0, element
    assert page.evaluate(HANDLERS) == []
    assert page.locator("a[href^='javascript'], [src^='javascript']").count() == 0
    doc.locator("b").hover()
    doc.locator("details summary").click()
    doc.get_by_text("click", exact=True).click()
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert dialogs == [] and problems == [] and outside == []
    assert page.evaluate("getComputedStyle(document.body).display") == "block"  # its <style> did not apply
    shoot(page, "hostile-document")


def test_snippets_read_as_plain_text(handbook: Console, page: Page) -> None:
    page.goto(f"{handbook.url}/ui/?q=How+to+deploy+with+the+Kubernetes+docs&source=platform%2Fhandbook")
    hit = page.locator(".hit", has=page.locator(".snippet", has_text="Kubernetes docs")).first
    text = hit.locator(".snippet").inner_text()
    assert "](" not in text and "**" not in text and "`" not in text and "https://" not in text, text
    marks = {m.lower() for m in page.locator(".snippet mark").all_inner_texts()}
    assert {"kubernetes", "docs"} <= marks and not marks & {"how", "to", "with", "the"}, marks
    shoot(page, "search-snippets")
    page.goto(f"{handbook.url}/ui/?q=rollingUpdate+maxUnavailable+strategy+type&source=platform%2Fhandbook")
    code = page.locator(".hit .snippet code.snippet-code").first
    expect(code).to_contain_text("strategy:\n  type: RollingUpdate")  # a YAML block keeps its lines
    assert code.evaluate("e => getComputedStyle(e).whiteSpace") == "pre"
    shoot(page, "search-code")


def test_the_ask_panel_is_wide_enough_for_an_answer_with_code(handbook: Console, page: Page) -> None:
    page.goto(f"{handbook.url}/ui/?q=rolling+update+strategy&source=platform%2Fhandbook")
    layout = page.locator(".layout.with-ask")
    before = page.locator("aside.ask").bounding_box()
    page.fill("#question", "What rolling update strategy do deploys use?")
    page.get_by_role("button", name="Ask", exact=True).click()
    expect(page.locator("#answer .answer")).to_be_visible()
    after, whole = page.locator("aside.ask").bounding_box(), layout.bounding_box()
    assert before and after and whole
    assert after["width"] >= 0.45 * whole["width"] and after["width"] > before["width"] * 1.2, (before, after)
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0
    shoot(page, "ask-wide")


def test_api_docs_load_only_from_the_service(handbook: Console, page: Page) -> None:
    problems = watch(page)
    requests: list[str] = []

    def record(request: Request) -> None:
        requests.append(request.url)

    page.on("request", record)
    page.goto(f"{handbook.url}/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Knowledge search service")
    expect(page.locator(".opblock").first).to_be_visible()
    assert page.locator(".opblock-summary-path", has_text="/api/v1/search").count() >= 1
    origins = {f"{urlsplit(url).scheme}://{urlsplit(url).netloc}" for url in requests if not url.startswith("data:")}
    assert origins == {handbook.url}, origins
    assert problems == []
    shoot(page, "api-docs")
