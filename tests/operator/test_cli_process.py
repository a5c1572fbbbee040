"""`knowledge-sync` as a real process against the real service process, off a terminal.

What a user sees: the first line says a first sync is one, progress lines arrive while documents
are sent, every skipped file is named with its reason, the result reads in words, `--json-lines`
gives one event per document, and a clone's origin remote gives its documents web links.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.git import WorkRepo, git
from tests.support.service_process import REPO, ServiceProcess, ready_service, service_env

SOURCE = "cli/process"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    folder = tmp_path_factory.mktemp("cli-process")
    with ready_service(folder / "service.log", {"SEARCHSVC_DATA_DIR": str(folder / "data")}) as process:
        yield process


def make_repo(path: Path, pages: int = 6) -> WorkRepo:
    repo = WorkRepo(path)
    for number in range(pages):
        repo.write(f"docs/page{number}.md", f"# Page {number}\n\nAbout topic {number}.\n")
    repo.write("docs/logo.md", b"\x89PNG\r\n\x1a\n\x00\x00binary")  # matched by the glob, binary
    repo.write("docs/huge.md", "# Huge\n\n" + "x" * 5000)  # over --max-file-size
    repo.commit()
    return repo


def sync(service: ServiceProcess, repo: WorkRepo, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "kboperator.cli", "--repo", str(repo.path), "--source-id", source,
               "--service", service.url, "--cache-dir", str(repo.path.parent / "cache"), "--max-file-size", "4096",
               *args]  # fmt: skip
    env = service_env() | {"PYTHONPATH": f"{REPO / 'operator'}:{REPO / 'searchsvc'}:{REPO}"}
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


def test_a_first_sync_says_so_shows_progress_names_skips_and_reads_in_words(
    service: ServiceProcess, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "docs")
    state = tmp_path / "state.json"
    run = sync(service, repo, f"{SOURCE}-1", "--state", str(state), "--progress-interval", "0")
    assert run.returncode == 0, run.stderr
    err = run.stderr
    assert "first sync" in err and "the spec or service changed" not in err
    # Off a terminal: plain progress lines, no bar redraws, the last one complete.
    progress = [line for line in err.splitlines() if line.startswith("knowledge-sync: ") and " documents (" in line]
    assert [line.split()[1] for line in progress] == [f"{n}/6" for n in range(1, 7)], err
    assert "\r" not in err
    # Every skipped file, also those skipped before reaching the service, with its reason.
    assert "skipped: docs/logo.md: binary" in err
    assert "skipped: docs/huge.md: " in err and "4096" in err.split("skipped: docs/huge.md: ")[1].splitlines()[0]
    assert run.stdout.startswith("converged at ")
    assert "6 added" in run.stdout and "2 skipped" in run.stdout and "0 failed" in run.stdout
    assert "the source holds 6 documents" in run.stdout
    again = sync(service, repo, f"{SOURCE}-1", "--state", str(state))
    assert again.returncode == 0 and "first sync" not in again.stderr
    assert "nothing to do" in again.stdout


def test_quiet_prints_the_skips_and_the_result_only(service: ServiceProcess, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "docs", pages=2)
    run = sync(service, repo, f"{SOURCE}-2", "--quiet", "--progress-interval", "0")
    assert run.returncode == 0, run.stderr
    assert sorted(run.stderr.splitlines()) == [
        line for line in sorted(run.stderr.splitlines()) if line.startswith("skipped: ")
    ]
    assert len(run.stderr.splitlines()) == 2 and run.stdout.startswith("converged")


def test_json_lines_gives_one_event_per_document_then_a_summary(service: ServiceProcess, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "docs", pages=3)
    run = sync(service, repo, f"{SOURCE}-3", "--json-lines")
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines()]
    kinds = [event["event"] for event in events]
    assert kinds[:3] == ["phase", "phase", "plan"] and kinds[-1] == "summary"
    plan = events[2]
    assert plan["total"] == 3 and plan["skipped"] == 2 and plan["full"] is True
    documents = {event["path"]: event for event in events if event["event"] == "document"}
    assert set(documents) == {"docs/page0.md", "docs/page1.md", "docs/page2.md", "docs/logo.md", "docs/huge.md"}
    assert {documents[f"docs/page{n}.md"]["outcome"] for n in range(3)} == {"added"}
    assert documents["docs/logo.md"]["outcome"] == "skipped" and documents["docs/logo.md"]["action"] == "read"
    assert "binary" in documents["docs/logo.md"]["reason"]
    summary = events[-1]
    assert summary["added"] == 3 and summary["documents"] == 3 and len(summary["skipped"]) == 2


def test_a_clone_with_an_origin_remote_links_to_its_web_page(service: ServiceProcess, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "docs", pages=1)
    git(repo.path, "remote", "add", "origin", "git@gitlab.example.com:team/handbook.git")
    run = sync(service, repo, f"{SOURCE}-4")
    assert run.returncode == 0, run.stderr
    listed = httpx.get(f"{service.url}/api/v1/documents", params={"sourceIdentifier": f"{SOURCE}-4"}).json()
    assert [doc["uri"] for doc in listed["documents"]] == [
        "https://gitlab.example.com/team/handbook/-/blob/main/docs/page0.md"
    ]


def test_on_a_terminal_a_progress_bar_shows_done_total_and_rate(service: ServiceProcess, tmp_path: Path) -> None:
    import fcntl
    import os
    import pty
    import struct
    import termios

    repo = make_repo(tmp_path / "docs", pages=4)
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))  # a 100-column terminal
    command = [sys.executable, "-m", "kboperator.cli", "--repo", str(repo.path), "--source-id", f"{SOURCE}-5",
               "--service", service.url, "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    env = service_env() | {"PYTHONPATH": f"{REPO / 'operator'}:{REPO / 'searchsvc'}:{REPO}"}
    process = subprocess.Popen(command, env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=secondary)  # fmt: skip
    os.close(secondary)
    drawn = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the process closed the terminal
            break
        if not chunk:
            break
        drawn += chunk
    os.close(primary)
    code = process.wait(timeout=300)
    screen = drawn.decode()
    assert code == 0, screen
    assert "syncing:" in screen and "5/5" in screen and "doc/s" in screen, screen  # 4 pages and huge.md
    assert process.stdout is not None
    with process.stdout:
        assert process.stdout.read().startswith(b"converged")
