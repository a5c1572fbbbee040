"""The console in a real Chromium against the real service on 127.0.0.1."""

from __future__ import annotations

import re
from urllib.parse import quote

from playwright.sync_api import Browser, Page, expect

from tests.console.browser.conftest import (
    HEALTHY_SOURCE,
    SYNCED_SOURCE,
    TEAM_A_TOKEN,
    TEAM_B_TOKEN,
    TEAM_B_URI,
    TEAM_B_WORD,
    Console,
    shoot,
)
from tests.console.corpus import XSS_MARKER, XSS_URI


def test_a_search_shows_highlighted_results(handbook: Console, page: Page) -> None:
    page.goto(f"{handbook.url}/ui/?q=rolling+back+deploy&source=platform%2Fhandbook")
    first = page.locator(".hit").first
    expect(first.locator(".hit-title")).to_have_text("Rolling deploys")
    marks = [m.lower() for m in first.locator("mark").all_inner_texts()]
    assert "rolling" in marks and all(re.match(r"rolling|back|deploy", m) for m in marks)
    expect(first.locator(".headings")).to_contain_text("Rolling deploys")
    expect(first.locator(".tag")).to_have_text("platform/handbook")
    expect(first.locator("a.external")).to_have_attribute("href", re.compile(r"^https://git\.example\.com/"))
    shoot(page, "search")


def test_typing_searches_live_and_the_url_follows(handbook: Console, page: Page) -> None:
    problems: list[str] = []  # CSP violations and script errors: htmx must work under the policy
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.goto(f"{handbook.url}/ui/")
    expect(page.locator(".hint")).to_be_visible()
    page.locator("#q").press_sequentially("disk pressure evicted")
    expect(page.locator(".hit").first.locator(".hit-title")).to_have_text("Node disk full")
    expect(page).to_have_url(
        re.compile(r"q=disk(\+|%20)pressure(\+|%20)evicted")
    )  # pushed by htmx: back and reload work
    page.select_option("select[name=source]", "platform/handbook")
    expect(page.locator(".hit .tag").first).to_have_text("platform/handbook")
    assert set(page.locator(".hit .tag").all_inner_texts()) == {"platform/handbook"}
    assert problems == []


def test_paging_through_documents(handbook: Console, page: Page) -> None:
    page.goto(f"{handbook.url}/ui/documents")
    rows = page.locator("table.docs tbody tr")
    expect(rows).to_have_count(25)
    first_page = set(rows.locator("td:first-child a").all_inner_texts())
    shoot(page, "documents")
    page.get_by_role("link", name="Next page →").click()
    expect(page.get_by_role("link", name="← First page")).to_be_visible()
    second_page = set(rows.locator("td:first-child a").all_inner_texts())
    assert len(second_page) == 35 - 25 and not first_page & second_page  # 4 pages, 30 ADRs, 1 hostile page
    expect(page.get_by_role("link", name="Next page →")).to_have_count(0)
    page.select_option("#doc-source", "platform/runbooks")
    expect(rows).to_have_count(2)


def test_a_document_page_shows_metadata_and_chunks_in_order(handbook: Console, page: Page) -> None:
    page.goto(f"{handbook.url}/ui/?q=rotate+postgres+password")
    page.locator(".hit-title", has_text="Rotating database credentials").first.click()
    expect(page.locator("h1")).to_have_text("Rotating database credentials")
    page.evaluate("window.scrollTo(0, 0)")  # the link scrolled to its chunk; the screenshot starts at the top
    expect(page.locator(".checksum")).to_have_text(re.compile(r"^sha256:[0-9a-f]{64}$"))
    expect(page.locator("table.meta")).to_contain_text("security/credential-rotation.md")
    chunks = page.locator("ol.chunks > li")
    assert chunks.count() >= 1
    ids = [chunks.nth(i).get_attribute("id") for i in range(chunks.count())]
    assert ids == [f"chunk-{i}" for i in range(len(ids))]
    expect(page.locator("ol.chunks")).to_contain_text("ALTER ROLE app PASSWORD")
    expect(chunks.first.locator(".headings")).to_contain_text("Rotating database credentials")


def test_a_hostile_document_is_inert_text(handbook: Console, page: Page) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(f"{handbook.url}/ui/?q={XSS_MARKER}")
    hit = page.locator(".hit").first
    expect(hit.locator(".hit-title")).to_contain_text("<script>window.__xss = 'title'</script>")
    expect(hit.locator(".snippet")).to_contain_text("<script>window.__xss = 'body'; alert('xss')</script>")
    hit.locator(".hit-title").click()
    # The chunks, for debugging, are the text as indexed: markup shown, not run (test_document_page renders it).
    expect(page.locator(".chunk-text").first).to_contain_text("<img src=x onerror=")
    expect(page.locator("table.meta")).to_contain_text("<script>window.__xss='meta'</script>")
    assert page.locator("main script, main img, main a[href^='javascript']").count() == 0
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert dialogs == []
    assert f"uri={quote(XSS_URI, safe='')}" in page.url


def test_the_console_works_without_javascript(handbook: Console, browser: Browser) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(f"{handbook.url}/ui/")
        page.fill("#q", "paging policy")
        page.select_option("select[name=mode]", "keyword")
        page.press("#q", "Enter")  # a plain GET form
        expect(page).to_have_url(re.compile(r"/ui/\?q=paging\+policy&mode=keyword"))
        expect(page.locator(".hit").first.locator(".hit-title")).to_have_text("On-call paging policy")
        page.goto(f"{handbook.url}/ui/documents")
        page.get_by_role("link", name="Next page →").click()
        expect(page.get_by_role("link", name="← First page")).to_be_visible()
    finally:
        context.close()


def test_sign_in_and_sign_out_with_a_read_token(team_console: Console, page: Page) -> None:
    page.goto(f"{team_console.url}/ui/sources")
    expect(page).to_have_url(re.compile(r"/ui/login\?next=/ui/sources$"))
    shoot(page, "login")
    page.fill("#token", TEAM_A_TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{team_console.url}/ui/sources")
    expect(page.locator(".caller")).to_have_text("team-a-reader")
    cookie = next(c for c in page.context.cookies() if c["name"] == "kb_console_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    assert TEAM_A_TOKEN not in page.content() and TEAM_A_TOKEN not in page.url
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{team_console.url}/ui/login")
    assert not [c for c in page.context.cookies() if c["name"] == "kb_console_session"]
    page.goto(f"{team_console.url}/ui/")
    expect(page).to_have_url(re.compile(r"/ui/login"))


def test_a_wrong_token_is_refused(team_console: Console, page: Page) -> None:
    page.goto(f"{team_console.url}/ui/login")
    page.fill("#token", "not-a-token-anyone-has")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator(".alert")).to_have_text("That token was not accepted.")
    assert "not-a-token-anyone-has" not in page.content()


def sign_in(page: Page, console: Console, token: str) -> None:
    page.goto(f"{console.url}/ui/login")
    page.fill("#token", token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator(".caller")).to_be_visible()


def test_team_a_sees_none_of_team_b(teams: Console, page: Page) -> None:
    team_b = {"Authorization": f"Bearer {TEAM_B_TOKEN}"}
    secret_query = "quokkaflux budget"  # only team B ever searches this
    assert teams.rest.get("/api/v1/search", params={"q": secret_query}, headers=team_b).status_code == 200
    for _ in range(100):  # until team B's own insights show its query: the log is written in batches
        logged = teams.rest.get("/api/v1/insights", headers=team_b).json()["topQueries"]
        if any(q["query"] == secret_query for q in logged):
            break
        page.wait_for_timeout(100)
    else:
        raise AssertionError(f"team B's query never reached the log: {logged}")
    sign_in(page, teams, TEAM_A_TOKEN)
    page.goto(f"{teams.url}/ui/sources")
    assert sorted(page.locator(".source h2").all_inner_texts()) == ["team-a/handbook", "team-a/qa", "team-a/runbooks"]
    page.goto(f"{teams.url}/ui/?q={TEAM_B_WORD}&mode=keyword")
    expect(page.locator(".empty")).to_contain_text("No results")
    page.goto(f"{teams.url}/ui/?q={TEAM_B_WORD}+rolling+deploys")  # hybrid: the nearest of what team A may see
    expect(page.locator(".hit").first).to_be_visible()
    assert set(page.locator(".hit .tag").all_inner_texts()) <= {"team-a/handbook", "team-a/qa", "team-a/runbooks"}
    assert TEAM_B_WORD not in page.locator("#results").inner_text()
    page.goto(f"{teams.url}/ui/document?uri={quote(TEAM_B_URI, safe='')}")
    expect(page.locator("h1")).to_have_text("No such document")
    page.goto(f"{teams.url}/ui/documents")
    assert TEAM_B_WORD not in page.content() and "team-b/" not in page.content()
    for _ in range(100):  # team A's own searches reach its insights once the log has written them
        page.goto(f"{teams.url}/ui/insights?window=30d")
        if page.locator("#top-queries", has_text="rolling deploys").count():
            break
        page.wait_for_timeout(100)
    expect(page.locator("#top-queries")).to_contain_text("rolling deploys")
    assert "quokkaflux" not in page.content()


def test_a_sources_sync_status_after_a_real_knowledge_sync_run(synced, page: Page) -> None:
    service, commit = synced
    page.goto(f"{service.url}/ui/sources")
    card = page.locator("article.source", has=page.locator("h2", has_text=SYNCED_SOURCE))
    expect(card.locator(".phase")).to_have_text("partial")
    expect(card.locator("dd code")).to_have_text(commit[:12])
    failed = card.locator("details.failed")
    expect(failed.locator("summary")).to_have_text("1 failed file")
    expect(failed.locator("li")).to_contain_text("flaky.md")
    expect(failed.locator(".reason")).to_contain_text("503")
    skipped = card.locator("details.skipped")
    expect(skipped.locator("summary")).to_have_text("1 skipped file")
    skipped.locator("summary").click()
    expect(skipped.locator("li")).to_contain_text("huge.md")
    expect(skipped.locator(".code")).to_have_text("DOCUMENT_TOO_LARGE")
    facts = dict(zip(card.locator("dt").all_inner_texts(), card.locator("dd").all_inner_texts(), strict=True))
    assert facts["DOCUMENTS"] == "2" and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", facts["LAST SYNC (UTC)"]), facts
    # A partial run is no success: no age of a last success, no push → searchable lag yet.
    assert (facts["LAST SUCCESS"], facts["PUSH → SEARCHABLE"]) == ("none reported", "—"), facts
    expect(card.locator(".counts")).to_contain_text("1 failed")
    healthy = page.locator("article.source", has=page.locator("h2", has_text=HEALTHY_SOURCE))
    expect(healthy.locator(".phase")).to_have_text("ok")
    expect(healthy.locator("details.failed, details.skipped")).to_have_count(0)
    # Its judged questions, as the sync asked them: one answered, one whose page the source lacks.
    quality = healthy.locator("section.quality")
    expect(quality).to_contain_text("2 judged questions")
    expect(quality).to_contain_text("hit@5 50%")
    missed = quality.locator("details.failed-questions")
    expect(missed.locator("summary")).to_have_text("1 failed question")
    missed.locator("summary").click()
    expect(missed.locator("li")).to_contain_text("oncall/certificates.md not in the top 5")
    expect(card.locator("section.quality")).to_have_count(0)  # its repository has no questions file
    shoot(page, "sources")


def test_a_nonsense_query_shows_under_zero_result_queries(handbook: Console, page: Page) -> None:
    nonsense = "qwxzzy flarnbottle"
    page.goto(f"{handbook.url}/ui/?q={nonsense.replace(' ', '+')}&mode=keyword")
    expect(page.locator(".empty")).to_contain_text("No results")
    page.goto(f"{handbook.url}/ui/?q=rolling+deploys")  # and one that finds something
    expect(page.locator(".hit").first).to_be_visible()
    # Agents' searches through REST, for the page's other tables: a dense search far from every
    # chunk is a low-score one; the repeated one leads the top queries. Other tests of this package
    # type queries live into the same log (a slow machine logs a few of their prefixes), so the
    # leader is repeated far more often than any of those.
    repeats = 8
    for query, mode in [("orbital zeppelin marmalade", "dense"), *[("on-call paging policy", "hybrid")] * repeats]:
        assert handbook.rest.get("/api/v1/search", params={"q": query, "mode": mode}).status_code == 200

    def landed() -> bool:
        """Every row and count asserted below is on the page: the log is written in batches."""
        top = page.locator("#top-queries tbody tr")
        return bool(
            page.locator("#zero-result", has_text=nonsense).count()
            and page.locator("#low-score", has_text="orbital zeppelin marmalade").count()
            and top.count()
            and "on-call paging policy" in top.first.inner_text()
            and page.locator("#top-queries", has_text="rolling deploys").count()
            and page.locator(".stat", has_text="via api").locator("dd").inner_text().strip() == str(repeats + 1)
        )

    for _ in range(150):
        page.goto(f"{handbook.url}/ui/insights?window=24h")
        if landed():
            break
        page.wait_for_timeout(200)
    expect(page.locator("#zero-result")).to_contain_text(nonsense)
    expect(page.locator("#top-queries tbody tr").first).to_contain_text("on-call paging policy")
    expect(page.locator("#low-score")).to_contain_text("orbital zeppelin marmalade")
    expect(page.locator("#top-queries")).to_contain_text("rolling deploys")
    assert "rolling deploys" not in page.locator("#zero-result").inner_text()
    assert int(page.locator(".stat", has_text="via ui").locator("dd").inner_text()) >= 2
    assert int(page.locator(".stat", has_text="via api").locator("dd").inner_text()) == repeats + 1
    page.get_by_role("link", name="7d").click()
    expect(page.locator("#zero-result")).to_contain_text(nonsense)
    shoot(page, "insights")


def test_pages_fit_a_phone_screen(handbook: Console, browser: Browser) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        page = context.new_page()
        for path in (
            "/ui/?q=rolling+deploys",
            "/ui/documents",
            "/ui/document?uri=" + quote(XSS_URI, safe=""),
            "/ui/sources",
        ):
            page.goto(handbook.url + path)
            overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert overflow <= 0, f"{path} scrolls sideways by {overflow}px on a phone"
        page.goto(f"{handbook.url}/ui/?q=rolling+deploys")
        shoot(page, "search-phone")
    finally:
        context.close()


def test_the_ask_panel_answers_with_chips_that_open_the_cited_chunk(handbook: Console, page: Page) -> None:
    page.goto(f"{handbook.url}/ui/?q=rotate+database+password&source=platform%2Fhandbook")
    page.fill("#question", "How do we rotate the database password in Postgres?")
    page.get_by_role("button", name="Ask", exact=True).click()
    chip = page.locator("#answer .answer a.chip").first
    expect(chip).to_be_visible()
    expect(page.locator("#answer .badge").first).to_have_text("extractive")
    expect(page.locator("#answer .citations li").first).to_contain_text("Rotating database credentials")
    assert page.url.endswith("/ui/?q=rotate+database+password&source=platform%2Fhandbook")  # answered in place
    shoot(page, "ask")
    href = chip.get_attribute("href")
    assert href is not None and href.startswith("/ui/document?uri=")
    chip.click()
    expect(page.locator("article.doc .passage")).to_be_in_viewport()  # the cited chunk's passage, marked
    assert page.evaluate("location.hash") == "#passage" and href.endswith("#passage")
    expect(page.locator("h1")).to_have_text("Rotating database credentials")
