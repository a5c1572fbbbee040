"""`knowledge-sync` in-process against the real service served by uvicorn on 127.0.0.1."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import httpx
import pytest

from kboperator.cli import main
from kboperator.sync.engine import SyncEngine
from tests.operator.cli_support import SOURCE, TOKEN, Server, base_args, run
from tests.operator.search_service import file_uri, sha256
from tests.support.git import WorkRepo, git

RESULT_KEYS = {"commit", "added", "modified", "deleted", "renamed", "unchanged", "skipped", "failed", "documents"}


@pytest.fixture
def repo(tmp_path: Path) -> WorkRepo:
    work = WorkRepo(tmp_path / "docs-repo")
    work.write("index.md", "# Index\n")
    work.write("guide/setup.md", "# Setup\n")
    work.write("script.sh", "echo hi\n")
    work.commit()
    return work


def expected(repo: WorkRepo) -> dict[str, str]:
    return {file_uri(repo.path, p): sha256(d) for p, d in repo.files().items() if p.endswith(".md")}


def test_json_output_and_state_round_trip(server: Server, repo: WorkRepo, tmp_path: Path, capsys) -> None:
    state = tmp_path / "state" / "handbook.json"
    args = [*base_args(server, repo, tmp_path), "--state", str(state), "--json", "--metadata", "team=docs", "owner=ci"]
    code, out, err = run(capsys, *args)
    assert code == 0, err
    result = json.loads(out)
    assert set(result) >= RESULT_KEYS
    assert result["commit"] == repo.head() and result["added"] == 2 and result["documents"] == 2
    assert result["full"] is True and result["skipped"] == [] and result["failed"] == []
    assert server.listing() == expected(repo)
    assert json.loads(state.read_text())["commit"] == repo.head()

    repo.move("guide/setup.md", "guide/install.md")
    repo.write("index.md", "# Index, edited\n")
    repo.commit()
    code, out, _ = run(capsys, *args)
    result = json.loads(out)
    assert code == 0 and result["full"] is False
    assert (result["renamed"], result["modified"], result["documents"]) == (1, 1, 2)
    assert server.listing() == expected(repo)
    assert json.loads(state.read_text())["commit"] == repo.head()
    assert not [p for p in state.parent.iterdir() if p.name != state.name]  # no temp files left

    # a spec change invalidates the state: a full reconcile removes what no longer belongs
    code, out, _ = run(capsys, *args, "--exclude", "guide/**")
    result = json.loads(out)
    assert code == 0 and result["full"] is True and result["deleted"] == 1
    assert list(server.listing()) == [file_uri(repo.path, "index.md")]


def test_without_state_every_run_is_a_full_reconcile(server: Server, repo: WorkRepo, tmp_path: Path, capsys) -> None:
    args = base_args(server, repo, tmp_path)
    assert run(capsys, *args)[0] == 0
    code, out, _ = run(capsys, *args)
    assert code == 0 and "2 unchanged" in out and out.startswith("converged")
    repo.remove("index.md")
    repo.commit()
    assert run(capsys, *args)[0] == 0
    assert server.listing() == expected(repo)


def test_refused_documents_are_skipped_and_the_state_advances(
    server: Server, repo: WorkRepo, tmp_path: Path, capsys
) -> None:
    state = tmp_path / "state.json"
    args = [*base_args(server, repo, tmp_path), "--state", str(state), "--max-file-size", "2000000"]
    assert run(capsys, *args)[0] == 0
    repo.write("huge.md", "z" * (1_048_576 + 1))  # let through by the spec, refused by the service: 413
    repo.commit()
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["full"] is False and result["failed"] == []
    assert [(f["path"], f["code"]) for f in result["skipped"]] == [("huge.md", "DOCUMENT_TOO_LARGE")]
    assert "skipped: huge.md" in err
    kept = json.loads(state.read_text())
    assert kept["commit"] == repo.head() and kept["fullOwed"] is False  # the state advances past a skip
    assert kept["expectedDocuments"] == 2

    repo.write("index.md", "# Index, edited\n")
    repo.commit()
    code, out, err = run(capsys, *args, "--json")
    result = json.loads(out)
    assert code == 0 and result["full"] is False and result["modified"] == 1 and result["skipped"] == []
    assert server.listing() == {uri: sha for uri, sha in expected(repo).items() if not uri.endswith("/huge.md")}


def test_failed_documents_exit_1_and_keep_the_state(server: Server, repo: WorkRepo, tmp_path: Path, capsys) -> None:
    state = tmp_path / "state.json"
    args = [*base_args(server, repo, tmp_path), "--state", str(state)]
    assert run(capsys, *args)[0] == 0
    before = state.read_text()
    repo.write("flaky.md", "# Flaky\n")
    repo.commit()
    server.faults.failing_paths.add("flaky.md")  # the service answers 503 to it: a failure that may pass
    code, out, err = run(capsys, *args, "--json")
    assert code == 1
    failed = json.loads(out)["failed"]
    assert [f["path"] for f in failed] == ["flaky.md"] and "503" in failed[0]["reason"]
    assert "failed: flaky.md" in err
    kept = json.loads(state.read_text())
    assert kept["commit"] == json.loads(before)["commit"]  # the commit is not advanced past a failure
    assert kept["fullOwed"] is True  # and the next run reconciles fully (the failed run changed things)


def test_a_partial_run_then_a_revert_restores_what_the_partial_run_deleted(
    server: Server, repo: WorkRepo, tmp_path: Path, capsys
) -> None:
    args = [*base_args(server, repo, tmp_path), "--state", str(tmp_path / "state.json")]
    assert run(capsys, *args)[0] == 0
    repo.remove("index.md")
    repo.write("guide/setup.md", "# Setup, edited\n")
    repo.commit("delete index, edit setup")
    server.faults.failing_paths.add("guide/setup.md")
    code, out, _ = run(capsys, *args, "--json")
    assert code == 1 and [f["path"] for f in json.loads(out)["failed"]] == ["guide/setup.md"]
    assert file_uri(repo.path, "index.md") not in server.listing()  # the deletion did go through

    server.faults.heal()
    git(repo.path, "revert", "--no-edit", "HEAD")  # back to the tree the state file's commit had
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    assert json.loads(out)["full"] is True and json.loads(out)["added"] == 1
    assert server.listing() == expected(repo)


def test_a_reset_service_or_documents_deleted_behind_its_back_are_drift(
    server: Server, repo: WorkRepo, tmp_path: Path, capsys
) -> None:
    state = tmp_path / "state.json"
    args = [*base_args(server, repo, tmp_path), "--state", str(state), "--json"]
    assert run(capsys, *args)[0] == 0
    first = json.loads(state.read_text())
    assert first["expectedDocuments"] == 2 and first["collectionEpoch"]

    # Someone deletes a document with the service's API: no new commit, yet the next run repairs it.
    gone = httpx.delete(f"{server.url}/api/v1/documents", params={"uri": file_uri(repo.path, "index.md")})
    assert gone.status_code == 200 and gone.json()["chunksDeleted"] == 1
    code, out, err = run(capsys, *args)
    result = json.loads(out)
    assert code == 0 and result["full"] is True and result["added"] == 1, err
    assert "holds 1 documents" in result["drift"] and "drift detected" in err
    assert server.listing() == expected(repo)

    # The service's volume is lost; it comes back empty at the same URL.
    server.__exit__()
    shutil.rmtree(tmp_path / "service-data")
    with Server(tmp_path / "service-data", port=server.port) as reset:
        assert reset.listing() == {}
        code, out, err = run(capsys, *args)
        result = json.loads(out)
        assert code == 0 and result["full"] is True and result["added"] == 2, err
        assert "collection epoch" in result["drift"]
        assert reset.listing() == expected(repo)
        assert json.loads(state.read_text())["collectionEpoch"] != first["collectionEpoch"]
        code, out, _ = run(capsys, *args)  # and then back to incremental runs
        assert code == 0 and json.loads(out)["full"] is False and json.loads(out)["drift"] is None


def test_a_state_file_does_not_carry_over_to_another_service(
    server: Server, repo: WorkRepo, tmp_path: Path, capsys
) -> None:
    state = tmp_path / "state.json"
    assert run(capsys, *base_args(server, repo, tmp_path), "--state", str(state))[0] == 0
    with Server(tmp_path / "new-service") as empty:  # a new, empty service; same repository and commit
        code, out, err = run(capsys, *base_args(empty, repo, tmp_path), "--state", str(state), "--json")
        assert code == 0, err
        assert json.loads(out)["full"] is True
        assert empty.listing() == expected(repo)
        # and back on the first service the state written for the new one does not apply either
        code, out, _ = run(capsys, *base_args(server, repo, tmp_path), "--state", str(state), "--json")
        assert code == 0 and json.loads(out)["full"] is True


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--ref=-oops"], "must not start with '-'"),
        (["--include", "docs/**x"], "invalid glob"),
        (["--metadata", "novalue"], "KEY=VALUE"),
        (["--token-env", "KB_TEST_UNSET_TOKEN"], "KB_TEST_UNSET_TOKEN"),
        (["--ref", "no-such-branch"], "not found"),
        (["--version-pattern", "docs-(?P<v>[^/]+)/"], "has no group named 'version'"),
        (["--version-pattern", "docs-([^/]+"], "is not a regular expression"),
    ],
)
def test_config_errors_exit_2(
    server: Server, repo: WorkRepo, tmp_path: Path, capsys, extra: list[str], message: str
) -> None:
    code, out, err = run(capsys, *base_args(server, repo, tmp_path), *extra, "--json")
    assert code == 2
    assert message in err and message in json.loads(out)["error"]["message"]
    assert server.listing() == {}


def test_a_version_pattern_names_each_documents_version(server: Server, tmp_path: Path, capsys) -> None:
    work = WorkRepo(tmp_path / "manual")
    for version in ("2.1", "2.10", "2.9"):  # folders the service's own detection does not take for versions
        work.write(f"manual-{version}/upgrade.md", f"# Upgrading\n\nRun the upgrade job of release {version}.\n")
    work.write("README.md", "# About this manual\n")
    work.commit()
    args = [
        *base_args(server, work, tmp_path),
        "--include",
        "**/*.md",
        "--version-pattern",
        r"manual-(?P<version>[^/]+)/",
    ]
    code, _, err = run(capsys, *args)
    assert code == 0, err

    headers = {"Authorization": f"Bearer {TOKEN}"}
    listed = httpx.get(f"{server.url}/api/v1/documents", params={"sourceIdentifier": SOURCE}, headers=headers).json()
    versions = {doc["metadata"]["path"]: doc["metadata"].get("version") for doc in listed["documents"]}
    assert versions == {
        "manual-2.1/upgrade.md": "2.1",
        "manual-2.10/upgrade.md": "2.10",
        "manual-2.9/upgrade.md": "2.9",
        "README.md": None,  # the pattern does not match it: no version
    }
    found = httpx.post(
        f"{server.url}/api/v1/search", json={"query": "upgrade job of release", "limit": 5}, headers=headers
    ).json()
    upgrade = [r for r in found["results"] if r["metadata"]["path"].endswith("upgrade.md")]
    assert len(upgrade) == 1  # one page, its newest version, the others named
    assert upgrade[0]["version"] == "2.10" and sorted(upgrade[0]["otherVersions"]) == ["2.1", "2.9"]


def test_path_weights_become_rank_weights_that_search_ranks_by(server: Server, tmp_path: Path, capsys) -> None:
    work = WorkRepo(tmp_path / "site")
    text = "# Quotas\n\nEach team gets a quota of ten build runners, raised on request.\n"
    work.write("content/docs/quotas.md", text)
    work.write("content/blog/quotas-launch.md", text.replace("# Quotas", "# Launching quotas") + "Quotas, quotas!\n")
    work.write("content/blog/team/notes.md", "# Notes\n\nRunner notes.\n")
    work.commit()
    args = [*base_args(server, work, tmp_path), "--include", "**/*.md"]
    weights = ["--path-weight", "content/blog/**=0.5", "--path-weight", "content/blog/team/**=2"]
    code, _, err = run(capsys, *args, *weights)
    assert code == 0, err

    headers = {"Authorization": f"Bearer {TOKEN}"}
    listed = httpx.get(f"{server.url}/api/v1/documents", params={"sourceIdentifier": SOURCE}, headers=headers).json()
    assert {doc["metadata"]["path"]: doc["metadata"].get("rankWeight") for doc in listed["documents"]} == {
        "content/docs/quotas.md": None,
        "content/blog/quotas-launch.md": 0.5,
        "content/blog/team/notes.md": 2.0,  # the longest matching glob wins
    }
    query = {"query": "team quota of build runners", "limit": 3}
    found = httpx.post(f"{server.url}/api/v1/search", json=query, headers=headers).json()["results"]
    assert found[0]["metadata"]["path"] == "content/docs/quotas.md"

    # Another weight is another document set: the next sync rewrites the blog's metadata.
    code, _, err = run(capsys, *args, "--path-weight", "content/blog/**=4")
    assert code == 0, err
    found = httpx.post(f"{server.url}/api/v1/search", json=query, headers=headers).json()["results"]
    assert found[0]["metadata"]["path"] == "content/blog/quotas-launch.md"


@pytest.mark.parametrize("weight", ["content/blog/**", "content/blog/**=0", "content/blog/**=nan", "[=0.5", "=0.5"])
def test_a_bad_path_weight_exits_2(server: Server, repo: WorkRepo, tmp_path: Path, capsys, weight: str) -> None:
    code, _, err = run(capsys, *base_args(server, repo, tmp_path), "--path-weight", weight)
    assert code == 2 and ("weight" in err.lower() or "glob" in err.lower()), err
    assert server.listing() == {}


def test_usage_errors_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--source-id", "x", "--service", "http://127.0.0.1:9"])
    assert caught.value.code == 2
    assert "--repo" in capsys.readouterr().err


def test_unreachable_service_exits_1(repo: WorkRepo, tmp_path: Path, capsys) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = ["--repo", str(repo.path), "--source-id", SOURCE, "--service", f"http://127.0.0.1:{port}",
            "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    code, _, err = run(capsys, *args)
    assert code == 1 and "unreachable" in err


def test_service_token_from_the_environment(tmp_path: Path, repo: WorkRepo, capsys, monkeypatch) -> None:
    with Server(tmp_path / "secured", api_token=TOKEN) as server:
        args = base_args(server, repo, tmp_path)
        code, _, err = run(capsys, *args)
        assert code == 2 and "401" in err  # no token: the service refuses, a config error
        monkeypatch.setenv("KB_TEST_SERVICE_TOKEN", TOKEN)
        code, _, err = run(capsys, *args, "--token-env", "KB_TEST_SERVICE_TOKEN")
        assert code == 0, err
        assert TOKEN not in err
        assert server.listing() == expected(repo)


def test_a_failed_run_with_another_spec_voids_the_state_of_the_first(
    server: Server, repo: WorkRepo, tmp_path: Path, capsys
) -> None:
    args = [*base_args(server, repo, tmp_path), "--state", str(tmp_path / "state.json")]
    assert run(capsys, *args)[0] == 0
    repo.write("flaky.md", "# Flaky\n")
    repo.commit()
    server.faults.failing_paths.add("flaky.md")
    # Narrowed: the full reconcile deletes guide/setup.md, then flaky.md fails.
    code, _, _ = run(capsys, *args, "--exclude", "guide/**")
    assert code == 1 and file_uri(repo.path, "guide/setup.md") not in server.listing()
    # Back to the first spec: its commit no longer describes the service.
    server.faults.heal()
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    assert json.loads(out)["full"] is True
    assert server.listing() == expected(repo)


class _Killed(BaseException):
    """The job runner killing knowledge-sync half-way through a sync."""


def test_a_run_killed_half_way_leaves_a_full_reconcile_owed(
    server: Server, repo: WorkRepo, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state.json"
    args = [*base_args(server, repo, tmp_path), "--state", str(state)]
    assert run(capsys, *args)[0] == 0
    commit = json.loads(state.read_text())["commit"]

    async def killed(*_: object, **__: object) -> None:
        raise _Killed

    with monkeypatch.context() as patched:
        patched.setattr(SyncEngine, "sync", killed)
        with pytest.raises(_Killed):
            main(args)
    assert json.loads(state.read_text()) | {"writtenAt": None} == {
        "version": 2,
        "sourceId": SOURCE,
        "key": json.loads(state.read_text())["key"],
        "commit": commit,
        "fullOwed": True,
        "collectionEpoch": None,
        "expectedDocuments": None,
        "writtenAt": None,
    }
    code, out, _ = run(capsys, *args, "--json")
    assert code == 0 and json.loads(out)["full"] is True
    assert json.loads(state.read_text())["fullOwed"] is False


def test_an_unwritable_state_file_is_a_config_error(server: Server, repo: WorkRepo, tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    code, _, err = run(capsys, *base_args(server, repo, tmp_path), "--state", str(blocker / "state.json"))
    assert code == 2 and "--state: cannot write" in err


def sources_listed(server: Server) -> dict[str, dict]:
    response = httpx.get(f"{server.url}/api/v1/sources", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.text
    return {s["sourceIdentifier"]: s for s in response.json()["sources"]}


def test_each_run_reports_its_outcome_to_the_service(server: Server, repo: WorkRepo, tmp_path: Path, capsys) -> None:
    args = [*base_args(server, repo, tmp_path), "--max-file-size", "2000000"]
    repo.write("flaky.md", "# Flaky\n")
    repo.write("huge.md", "z" * (1_048_576 + 1))  # refused by the service: a skip with its code
    repo.commit()
    server.faults.failing_paths.add("flaky.md")  # a 503 to its PUT: a failure that may pass
    code, _, err = run(capsys, *args)
    assert code == 1, err
    sync = sources_listed(server)[SOURCE]["sync"]
    assert sync["phase"] == "partial" and sync["commit"] == repo.head() and sync["documents"] == 2
    assert [(f["path"], f["code"]) for f in sync["failedFiles"]] == [("flaky.md", None)]
    assert "503" in sync["failedFiles"][0]["reason"]
    assert [(f["path"], f["code"]) for f in sync["skippedFiles"]] == [("huge.md", "DOCUMENT_TOO_LARGE")]
    assert (sync["failed"], sync["skipped"], sync["added"]) == (1, 1, 2)

    server.faults.heal()
    assert run(capsys, *args)[0] == 0
    sync = sources_listed(server)[SOURCE]["sync"]
    assert sync["phase"] == "ok" and sync["failedFiles"] == [] and sync["documents"] == 3
    assert sync["syncedAt"].endswith("Z") and sync["nextSyncAt"] is None
    # Freshness: the run fetched the commit, counted as seen when the run started.
    assert sync["lastSuccessAt"] == sync["syncedAt"] and sync["freshness"]["remoteCommit"] == repo.head()
    assert sync["freshness"]["searchableAt"] == sync["syncedAt"] and sync["freshness"]["lagSeconds"] >= 0
    assert sync["freshness"]["seenAt"] <= sync["freshness"]["searchableAt"]


def test_a_run_that_fails_as_a_whole_reports_an_error(server: Server, tmp_path: Path, capsys) -> None:
    missing = tmp_path / "no-such-repo"
    args = ["--repo", str(missing), "--source-id", SOURCE, "--service", server.url, "--cache-dir", str(tmp_path / "c")]
    code, _, err = run(capsys, *args)
    assert code != 0 and err
    listed = sources_listed(server)[SOURCE]
    assert listed["documents"] == 0 and listed["sync"]["phase"] == "error" and listed["sync"]["message"]


def test_a_status_report_that_fails_does_not_fail_the_run(
    server: Server, repo: WorkRepo, tmp_path: Path, capsys
) -> None:
    real = server.faults.app

    async def refusing_reports(scope, receive, send) -> None:  # the service answers 503 to status reports only
        if scope["type"] == "http" and scope["method"] == "PUT" and scope["path"].endswith("/status"):
            await server.faults._refuse(send)
            return
        await real(scope, receive, send)

    server.faults.app = refusing_reports
    code, out, err = run(capsys, *base_args(server, repo, tmp_path))
    assert code == 0 and out.startswith("converged"), err
    assert "could not report the sync's outcome" in err
    # The outcome tried twice, not for the client's whole retry budget; each progress report (one per
    # stage at most in a run this small) once.
    assert 2 < server.faults.refused <= 2 + 3
    assert sources_listed(server)[SOURCE]["sync"] is None and server.listing() == expected(repo)

    server.faults.app = real  # the next run reports again
    assert run(capsys, *base_args(server, repo, tmp_path))[0] == 0
    assert sources_listed(server)[SOURCE]["sync"]["phase"] == "ok"
