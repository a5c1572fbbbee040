"""The console's browser tests: one Chromium per package, the real service as a process on 127.0.0.1.

Chromium is Debian's (/usr/bin/chromium, `make chromium` installs it); Playwright only drives it.
A missing browser fails the tests with a clear message: they are never skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from tests.console.corpus import seed
from tests.support.service_process import ServiceProcess

CHROMIUM = Path(os.environ.get("KB_CHROMIUM", "/usr/bin/chromium"))
# Quiet on a closed network: no sandbox (CI runs as root), no background fetches.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).parents[1] / "artifacts"

WRITER_TOKEN = "console-writer-token"
TEAM_A_TOKEN = "console-team-a-token"
TEAM_B_TOKEN = "console-team-b-token"


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the console's browser tests need Debian's Chromium. "
            "Run `make chromium` (as root: apt-get install -y chromium) and retry.",
            pytrace=False,
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    fresh = browser.new_context(viewport={"width": 1280, "height": 860})
    yield fresh
    fresh.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    return opened


def shoot(page: Page, name: str) -> Path:
    """Keep a screenshot of what the test saw (tests/console/artifacts/, git-ignored)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


class Console:
    """A running service and a REST client for seeding it."""

    def __init__(self, process: ServiceProcess, token: str | None) -> None:
        self.process = process
        self.url = f"http://127.0.0.1:{process.port}"
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.rest = httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def put(self, uri: str, content: str, **metadata: object) -> None:
        response = self.rest.put("/api/v1/documents", json={"uri": uri, "content": content, "metadata": metadata})
        assert response.status_code == 200, response.text


def _start(tmp: Path, env: dict[str, str], token: str | None) -> Iterator[Console]:
    process = ServiceProcess(tmp / "service.log", {"SEARCHSVC_DATA_DIR": str(tmp / "data"), **env}).start()
    try:
        process.wait_ready()
        console = Console(process, token)
        yield console
        console.rest.close()
    finally:
        process.stop()


@pytest.fixture(scope="package")
def open_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """The single-tenant default: no tokens, reads and writes open on loopback."""
    yield from _start(tmp_path_factory.mktemp("open-console"), {}, None)


@pytest.fixture(scope="package")
def team_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """Scoped access: a writer, and readers for team A and team B; every read needs a token."""
    tmp = tmp_path_factory.mktemp("team-console")
    tokens = {
        "tokens": [
            {"name": "console-writer", "token": WRITER_TOKEN, "write": True, "sources": ["*"]},
            {"name": "team-a-reader", "token": TEAM_A_TOKEN, "sources": ["team-a/*"]},
            {"name": "team-b-reader", "token": TEAM_B_TOKEN, "sources": ["team-b/*"]},
        ]
    }
    (tmp / "tokens.yaml").write_text(yaml.safe_dump(tokens))
    yield from _start(tmp, {"SEARCHSVC_TOKENS_FILE": str(tmp / "tokens.yaml")}, WRITER_TOKEN)


@pytest.fixture(scope="package")
def handbook(open_console: Console) -> Console:
    """The open service with the handbook, 30 ADRs and the hostile page written."""
    seed(open_console.put)
    return open_console


TEAM_B_WORD = "zebracornium"
TEAM_B_URI = "https://git.example.com/team-b/secrets/-/blob/main/plan.md"


@pytest.fixture(scope="package")
def teams(team_console: Console) -> Console:
    """Team A's handbook and runbooks, and one page of team B's that team A must never see."""
    seed(team_console.put, sources=("team-a/handbook", "team-a/runbooks"), adrs=3)
    team_console.put(
        TEAM_B_URI,
        f"# Team B plan\n\nThe {TEAM_B_WORD} migration starts in March; rolling deploys are frozen until then.\n",
        sourceIdentifier="team-b/secrets",
    )
    return team_console
