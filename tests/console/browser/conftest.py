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
    """Keep what the test saw in tests/console/artifacts/ (git-ignored): the whole page, and its
    first screen in artifacts/readme/ (what docs/console/*.png, shown in docs/user/console.md, are copied from)."""
    (ARTIFACTS / "readme").mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    page.screenshot(path=str(ARTIFACTS / "readme" / f"{name}.png"))
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
    """The single-tenant default: no tokens, reads and writes open on loopback.

    Small chunks, so that the short handbook pages have several each, with their heading paths.
    """
    small_chunks = {"SEARCHSVC_CHUNK_MIN_CHARS": "120", "SEARCHSVC_CHUNK_MAX_CHARS": "320"}
    yield from _start(tmp_path_factory.mktemp("open-console"), small_chunks, None)


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


class FaultyService:
    """The real app under uvicorn in a thread on 127.0.0.1, behind the operator tests' fault switch."""

    def __init__(self, data_dir: Path) -> None:
        import socket
        import threading

        import uvicorn

        from kbsearch.app import create_app
        from kbsearch.settings import Settings
        from tests.operator.world import Faults
        from tests.support.hashing import HashingEmbedder
        from tests.support.service import make_store

        app = create_app(Settings(data_dir=data_dir), store=make_store("edge", data_dir), embedder=HashingEmbedder())
        self.faults = Faults(app)
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        config = uvicorn.Config(self.faults, log_level="warning", ws="none", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> FaultyService:
        self.thread.start()
        for _ in range(6000):  # up to 60 s; normally well under one
            if self.server.started or not self.thread.is_alive():
                break
            threading_sleep(0.01)
        assert self.server.started, "uvicorn did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        self.socket.close()


def threading_sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)


@pytest.fixture(scope="package")
def synced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FaultyService, str]]:
    """A real `knowledge-sync` run of a git repository with one file the service fails (503) and one it refuses."""
    import subprocess
    import sys

    from tests.support.git import WorkRepo

    tmp = tmp_path_factory.mktemp("synced")
    repo = WorkRepo(tmp / "repo")
    repo.write("index.md", "# Platform docs\n\nWhere the platform team keeps its runbooks.\n")
    repo.write("guide/setup.md", "# Setup\n\n## Install\n\nRun helm install to deploy the chart.\n")
    repo.write("flaky.md", "# Flaky\n\nThe service answers 503 to this one.\n")
    repo.write("huge.md", "z" * (1_048_576 + 1))  # over the service's document limit: refused (413)
    repo.commit()
    healthy = WorkRepo(tmp / "healthy")
    healthy.write("oncall/paging.md", "# Paging\n\n## Who is paged\n\nThe primary on-call engineer, then the next.\n")
    healthy.write("oncall/disk-full.md", "# Node disk full\n\n## Remedy\n\nCordon the node and prune images.\n")
    # Judged questions: one the source answers, one whose page it does not hold.
    questions = (
        "questions:\n"
        "  - question: Who is paged first?\n    expected: oncall/paging.md\n"
        "  - question: How is the TLS certificate renewed?\n    expected: oncall/certificates.md\n"
    )
    healthy.write(".kb/questions.yaml", questions)
    healthy.commit()
    with FaultyService(tmp / "data") as service:

        def knowledge_sync(path: Path, source: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [
                    *(sys.executable, "-c", "import sys; from kboperator.cli import main; sys.exit(main())"),
                    *("--repo", str(path), "--source-id", source, "--service", service.url),
                    *("--cache-dir", str(tmp / "cache"), "--max-file-size", "2000000"),
                ],
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )

        assert knowledge_sync(healthy.path, HEALTHY_SOURCE).returncode == 0
        service.faults.failing_paths.add("flaky.md")
        run = knowledge_sync(repo.path, SYNCED_SOURCE)
        assert run.returncode == 1, run.stderr  # 1: a file failed
        assert "failed: flaky.md" in run.stderr and "skipped: huge.md" in run.stderr
        service.faults.heal()
        yield service, repo.head()


SYNCED_SOURCE = "platform/docs"
HEALTHY_SOURCE = "platform/runbooks"
