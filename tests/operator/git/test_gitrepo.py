"""The cached clone: fetch, list, read and diff real repositories; hostile specs; credentials."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import threading
from contextlib import closing
from pathlib import Path
from urllib.parse import quote

import pytest

from kboperator.errors import InvalidSpecError, RepositoryAuthError, RepositoryReadError, RepositoryUnavailableError
from kboperator.git.auth import git_call
from kboperator.git.repo import RepoCache
from kboperator.models import Credentials, RepoSpec
from kboperator.repourl import check_repo, parse_repo_url
from tests.support.git import WorkRepo, git, serve_git_http, serve_redirect, ssh_config

TOKEN = "ghp_S3cretT0kenValue_do_not_leak"


@pytest.fixture
def work(tmp_path: Path) -> WorkRepo:
    repo = WorkRepo(tmp_path / "work")
    repo.write("a.md", "# A\n")
    repo.write("docs/b.md", "bee\n")
    repo.commit("first")
    return repo


@pytest.fixture
def cache(tmp_path: Path) -> RepoCache:
    return RepoCache(tmp_path / "cache")


def open_local(cache: RepoCache, repo: WorkRepo, ref: str = "main", source: str = "ns/src"):
    return cache.open(source, check_repo(RepoSpec(str(repo.path), ref=ref), allow_local=True))


def test_fetch_lists_and_reads_without_checkout(cache: RepoCache, work: WorkRepo) -> None:
    work.symlink("link.md", "/etc/passwd")
    sub_sha = work.head()
    git(work.path, "add", "link.md")
    git(work.path, "update-index", "--add", "--cacheinfo", f"160000,{sub_sha},vendor/sub")
    git(work.path, "commit", "--quiet", "-m", "symlink and submodule")
    with closing(open_local(cache, work)) as checkout:
        assert checkout.head == work.head()
        entries = {e.path: e for e in checkout.list_files()}
        assert entries["a.md"].kind == "file" and entries["a.md"].size == 4
        assert entries["link.md"].kind == "symlink"
        assert entries["vendor/sub"].kind == "submodule" and entries["vendor/sub"].size is None
        assert checkout.read_blob(entries["docs/b.md"].sha) == b"bee\n"
        # the clone is bare: nothing is ever checked out, so no symlink can be followed
        assert not (checkout.folder / "a.md").exists()
        assert (checkout.folder / "HEAD").is_file() and not (checkout.folder / ".git").exists()


def test_incremental_fetch_and_typed_diff(cache: RepoCache, work: WorkRepo) -> None:
    with closing(open_local(cache, work)) as checkout:
        first = checkout.head
    work.write("a.md", "# A changed\n")
    work.move("docs/b.md", "docs/renamed.md")
    work.write("c.md", "new\n")
    work.symlink("docs/renamed.md", "../a.md")  # renamed, then turned into a symlink
    work.commit("second")
    work.write("x.md", "x\n")
    work.commit("third")
    with closing(open_local(cache, work)) as checkout:
        assert checkout.head == work.head()
        changes = {
            (c.status, c.old.path if c.old else None, c.new.path if c.new else None): c for c in checkout.diff(first)
        }
    assert set(changes) == {
        ("M", "a.md", "a.md"),
        ("A", None, "c.md"),
        ("A", None, "x.md"),
        ("D", "docs/b.md", None),
        ("A", None, "docs/renamed.md"),
    }
    assert changes[("A", None, "docs/renamed.md")].new.kind == "symlink"
    assert changes[("M", "a.md", "a.md")].new.size == len("# A changed\n")
    assert changes[("M", "a.md", "a.md")].old.size == 4


def test_rename_and_type_change_are_reported(cache: RepoCache, work: WorkRepo) -> None:
    with closing(open_local(cache, work)) as checkout:
        first = checkout.head
    work.move("docs/b.md", "guide/b.md")
    work.symlink("a.md", "/etc/hostname")
    work.commit("rename and type change")
    with closing(open_local(cache, work)) as checkout:
        changes = {c.status: c for c in checkout.diff(first)}
    assert changes["R"].old.path == "docs/b.md" and changes["R"].new.path == "guide/b.md"
    assert changes["T"].old.kind == "file" and changes["T"].new.kind == "symlink"


def test_force_push_is_detected(cache: RepoCache, work: WorkRepo) -> None:
    base = work.head()
    work.write("a.md", "doomed\n")
    doomed = work.commit("doomed")
    with closing(open_local(cache, work)) as checkout:
        assert checkout.is_ancestor(base)
    work.reset_hard(base)
    work.write("z.md", "rewritten\n")
    work.commit("rewritten history")
    work.gc_prune()
    with closing(open_local(cache, work)) as checkout:
        assert checkout.has_commit(doomed)  # still in our cache...
        assert not checkout.is_ancestor(doomed)  # ...but no longer in the branch's history
        assert checkout.is_ancestor(base)
    with closing(open_local(RepoCache(cache.root.parent / "fresh"), work)) as checkout:
        assert not checkout.has_commit(doomed)  # a fresh clone never saw it
        assert not checkout.is_ancestor(doomed)
        assert not checkout.has_commit("not-a-sha")


def test_tags_and_branches(cache: RepoCache, work: WorkRepo) -> None:
    tagged = work.head()
    work.tag("v1.0", annotated=True)
    git(work.path, "branch", "release/1.x")
    work.write("later.md", "later\n")
    work.commit("later")
    with closing(open_local(cache, work, ref="v1.0")) as checkout:
        assert checkout.head == tagged and checkout.is_tag
    with closing(open_local(cache, work, ref="release/1.x")) as checkout:
        assert checkout.head == tagged and not checkout.is_tag
    with closing(open_local(cache, work)) as checkout:
        assert checkout.head == work.head()


def test_a_missing_ref_is_a_spec_error(cache: RepoCache, work: WorkRepo) -> None:
    with pytest.raises(InvalidSpecError, match="not found"):
        open_local(cache, work, ref="no-such-branch")


@pytest.mark.parametrize("target", ["HEAD:a.md", "HEAD^{tree}"])
def test_a_tag_of_something_other_than_a_commit_is_a_spec_error(cache: RepoCache, work: WorkRepo, target: str) -> None:
    git(work.path, "tag", "odd", git(work.path, "rev-parse", target))
    with pytest.raises(InvalidSpecError, match="does not name a commit"):
        open_local(cache, work, ref="odd")


@pytest.mark.parametrize(
    ("url", "ref"),
    [
        ("--upload-pack=touch {marker}", "main"),
        ("-oProxyCommand=touch {marker}", "main"),
        ("ext::sh -c touch% {marker}", "main"),
        ("ssh://-oProxyCommand=touch%20{marker}/x/y", "main"),
        ("git@-oProxyCommand=touch {marker}:x/y", "main"),
        ("{work}", "--upload-pack=touch {marker}"),
        ("{work}", "-b"),
        ("{work}", "main:refs/heads/evil"),
        ("{work}", "a..b"),
        ("{work}", "HEAD@{{1}}"),
        ("{work}", "bad ref"),
    ],
)
def test_option_injection_is_refused_before_git_runs(
    cache: RepoCache, work: WorkRepo, tmp_path: Path, url: str, ref: str
) -> None:
    marker = tmp_path / "pwned"
    spec = RepoSpec(url.format(marker=marker, work=work.path), ref=ref.format(marker=marker))
    with pytest.raises(InvalidSpecError):
        cache.open("ns/src", check_repo(spec, allow_local=True))
    assert not marker.exists()


@pytest.mark.parametrize(
    "url",
    [
        "ssh://-oProxyCommand={command}@example.com/x/y",
        "ssh://%2DoProxyCommand={command}@example.com/x/y",  # git or ssh might decode it
        "ssh://git@-oProxyCommand={command}/x/y",
    ],
)
def test_an_ssh_url_whose_user_or_host_is_an_option_is_invalid(cache: RepoCache, tmp_path: Path, url: str) -> None:
    # Permanent, so never retried as an unreachable repository; and refused before git runs.
    marker = tmp_path / "pwned"
    spec = RepoSpec(url.format(command=quote(f"touch {marker}", safe="")))
    with pytest.raises(InvalidSpecError):
        cache.open("ns/src", check_repo(spec, allow_local=False))
    assert not marker.exists()
    assert not list(cache.root.glob("*"))  # not even a clone was started


@pytest.mark.parametrize("url", ["git://example.com/o/r", "ftp://example.com/o/r", "fd::17"])
def test_unknown_schemes_are_refused(cache: RepoCache, url: str) -> None:
    with pytest.raises(InvalidSpecError):
        cache.open("ns/src", check_repo(RepoSpec(url), allow_local=True))


def test_local_repositories_only_when_allowed(cache: RepoCache, work: WorkRepo) -> None:
    for url in (str(work.path), work.path.as_uri()):
        with pytest.raises(InvalidSpecError, match="not allowed"):
            cache.open("ns/src", check_repo(RepoSpec(url), allow_local=False))
    with pytest.raises(InvalidSpecError, match="not a folder"):
        cache.open("ns/src", check_repo(RepoSpec(str(work.path / "missing")), allow_local=True))
    with pytest.raises(InvalidSpecError, match="not a git repository"):
        cache.open("ns/src", check_repo(RepoSpec(str(work.path / "docs")), allow_local=True))


def test_unreachable_host_is_transient(cache: RepoCache) -> None:
    # port 9 on loopback: nothing listens, so the connection is refused at once
    with pytest.raises(RepositoryUnavailableError):
        cache.open("ns/src", check_repo(RepoSpec("http://127.0.0.1:9/o/r.git"), allow_local=False))


def test_inherited_git_environment_is_ignored(
    cache: RepoCache, work: WorkRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As inside a CI hook: these would redirect or trace every git command we run.
    monkeypatch.setenv("GIT_DIR", str(work.path / "nowhere"))
    monkeypatch.setenv("GIT_TRACE", "1")
    with closing(open_local(cache, work)) as checkout:
        assert checkout.head == work.head()


def test_no_inherited_git_variable_reaches_git_or_gitpython(
    cache: RepoCache, work: WorkRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pre-receive hook's quarantine, a worktree's common dir, traces and config injection:
    # git would obey each of them, and so would GitPython's own Repo() for the first three.
    elsewhere = WorkRepo(tmp_path / "elsewhere")
    elsewhere.write("a.md", "# somebody else's\n")
    elsewhere.commit("elsewhere")
    trace = tmp_path / "trace.log"
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    redirect = f'[url "{elsewhere.path}"]\n\tinsteadOf = {work.path}\n'
    (home / ".gitconfig").write_text(redirect)
    (home / ".config" / "git" / "config").write_text(redirect)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(elsewhere.path / ".git" / "objects"))
    monkeypatch.setenv("GIT_COMMON_DIR", str(elsewhere.path / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(elsewhere.path))
    monkeypatch.setenv("GIT_TRACE", str(trace))
    monkeypatch.setenv("GIT_TRACE2_EVENT", str(trace))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", f"url.{elsewhere.path}.insteadOf")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", str(work.path))
    first = work.head()
    work.write("a.md", "# A, second\n")
    second = work.commit("second")
    with closing(open_local(cache, work)) as checkout:
        assert checkout.head == second
        entries = {e.path: e for e in checkout.list_files()}
        assert checkout.read_blob(entries["a.md"].sha) == b"# A, second\n"
        assert checkout.is_ancestor(first)
        assert [(c.status, c.new.path) for c in checkout.diff(first)] == [("M", "a.md")]
        assert (checkout.folder / "objects").is_dir() and not (checkout.folder / "worktree").exists()
    assert not trace.exists()


def test_a_tree_entry_gitpython_would_refuse_is_listed_not_fatal(cache: RepoCache, work: WorkRepo) -> None:
    # `git~1` is git's own directory on Windows: GitPython's tree parser rejects the whole
    # tree, git fetches it; the file is listed (the reader then skips or reads it as any other).
    blob = git(work.path, "hash-object", "-w", "--stdin", input=b"odd\n")
    ok = git(work.path, "rev-parse", "HEAD:a.md")
    tree = git(work.path, "mktree", input=f"100644 blob {blob}\tgit~1\n100644 blob {ok}\ta.md\n".encode())
    commit = git(work.path, "commit-tree", tree, "-p", "HEAD", "-m", "odd name")
    git(work.path, "update-ref", "refs/heads/main", commit)
    with closing(open_local(cache, work)) as checkout:
        entries = {e.path: e for e in checkout.list_files()}
        assert sorted(entries) == ["a.md", "git~1"]
        assert checkout.read_blob(entries["a.md"].sha) == b"# A\n"


def test_a_diff_with_a_path_that_is_not_utf8_is_complete(cache: RepoCache, work: WorkRepo) -> None:
    # GitPython's Commit.diff() returns an empty diff here: an incremental sync would miss both.
    (work.path / os.fsdecode(b"caf\xe9.md")).write_text("latin-1 name\n")
    work.commit("odd name")
    with closing(open_local(cache, work)) as checkout:
        first = checkout.head
    (work.path / os.fsdecode(b"caf\xe9.md")).unlink()
    work.write("a.md", "# A changed\n")
    work.commit("remove it")
    with closing(open_local(cache, work)) as checkout:
        changes = sorted((c.status, (c.old or c.new).path) for c in checkout.diff(first))
    assert changes == [("D", os.fsdecode(b"caf\xe9.md")), ("M", "a.md")]


def test_a_fetch_that_hangs_is_killed_with_its_remote_helper(tmp_path: Path) -> None:
    # The server accepts and never answers. The timeout must kill git *and* git-remote-http,
    # which holds the connection: the server then sees it close.
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        cache = RepoCache(tmp_path / "cache", timeout_s=2)
        spec = RepoSpec(f"http://127.0.0.1:{port}/o/r.git")
        # In a daemon thread, so that a helper left alive (it keeps git's pipes open, and the
        # wait for them never ends) fails the test instead of hanging it.
        raised: list[BaseException] = []

        def open_it() -> None:
            try:
                cache.open("ns/src", check_repo(spec, allow_local=False))
            except BaseException as exc:  # noqa: BLE001  # handed to the test thread
                raised.append(exc)

        opening = threading.Thread(target=open_it, daemon=True)
        opening.start()
        opening.join(60)
        assert not opening.is_alive(), "the timed-out fetch never returned"
        assert isinstance(raised[0], RepositoryUnavailableError) and "timed out" in str(raised[0])
        server.settimeout(30)
        connection, _ = server.accept()  # already queued: git connected before the timeout
        with connection:
            connection.settimeout(30)
            while connection.recv(4096):  # the request; then end of stream once the helper is dead
                pass


def test_cache_folder_is_a_keyed_hash_of_url_ref_and_credentials(cache: RepoCache, work: WorkRepo) -> None:
    spec = RepoSpec(str(work.path))
    with closing(open_local(cache, work, source="../../etc")) as checkout:
        assert checkout.folder.parent == cache.root
        assert checkout.folder.name == cache.key(spec)
    assert cache.key(spec) != cache.key(RepoSpec(str(work.path), ref="other"))
    assert cache.key(spec) != cache.key(RepoSpec(str(work.path), credentials=Credentials(token=TOKEN)))
    assert TOKEN not in cache.key(RepoSpec(str(work.path), credentials=Credentials(token=TOKEN)))
    # Keyed by a random secret of the cache: a folder name does not let anyone test a guessed token.
    assert RepoCache(cache.root.parent / "other").key(spec) != cache.key(spec)
    cache.forget("../../etc", str(work.path))
    assert not (cache.root / cache.key(spec)).exists()


@pytest.fixture
def http_remote(tmp_path: Path, work: WorkRepo):
    root = tmp_path / "served"
    root.mkdir()
    git(root, "clone", "--bare", "--quiet", str(work.path), "org/private.git")
    with serve_git_http(root, "robot", TOKEN) as base:
        yield f"{base}/org/private.git"


def _all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


def test_https_token_works_and_is_never_stored_or_logged(
    cache: RepoCache, work: WorkRepo, http_remote: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    creds = Credentials(username="robot", token=TOKEN)
    with closing(
        cache.open("ns/src", check_repo(RepoSpec(http_remote, credentials=creds), allow_local=False))
    ) as checkout:
        assert checkout.head == work.head()
        config = (checkout.folder / "config").read_text()
        folder = checkout.folder
    assert TOKEN not in config and "robot" not in config and "credential" not in config
    assert TOKEN.encode() not in _all_bytes(cache.root)  # not in FETCH_HEAD, packs, logs...
    assert TOKEN not in caplog.text
    work.write("more.md", "more\n")
    work.commit("more")
    git(http_remote_path(http_remote, work), "fetch", "--quiet", str(work.path), "+main:main")
    with closing(
        cache.open("ns/src", check_repo(RepoSpec(http_remote, credentials=creds), allow_local=False))
    ) as checkout:
        assert checkout.head == work.head()  # incremental fetch, same clone
        assert checkout.folder == folder


def http_remote_path(url: str, work: WorkRepo) -> Path:
    """The served bare repository behind `url` (the fixture serves tmp/served)."""
    return work.path.parent / "served" / "org" / "private.git"


@pytest.mark.parametrize("creds", [Credentials(username="robot", token="wrong-" + TOKEN[::-1]), None])
def test_bad_or_missing_token_is_an_auth_error_without_secrets(
    cache: RepoCache, http_remote: str, creds: Credentials | None
) -> None:
    with pytest.raises(RepositoryAuthError) as caught:
        cache.open("ns/src", check_repo(RepoSpec(http_remote, credentials=creds), allow_local=False))
    assert "wrong-" not in str(caught.value) and TOKEN not in str(caught.value)
    assert "robot" not in str(caught.value)


def test_ssh_key_goes_to_a_private_temp_file_removed_afterwards(tmp_path: Path) -> None:
    location = parse_repo_url("git@github.com:org/repo.git", allow_local=False)
    creds = Credentials(
        ssh_private_key="-----BEGIN KEY-----\nabc\n-----END KEY-----", known_hosts="github.com ssh-ed25519 AAAA"
    )
    pinned = tmp_path / "pinned_known_hosts"
    with git_call(location, creds, pinned_known_hosts=pinned) as call:
        command = call.env["GIT_SSH_COMMAND"]
        key_file = Path(command.split(" -i ")[1].split()[0])
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
        assert key_file.read_text().endswith("-----END KEY-----\n")
        assert "IdentitiesOnly=yes" in command and "StrictHostKeyChecking=yes" in command
        assert "BatchMode=yes" in command and "abc" not in command
        assert call.env["GIT_TERMINAL_PROMPT"] == "0" and call.env["GIT_ALLOW_PROTOCOL"] == "ssh"
    assert not key_file.exists() and not key_file.parent.exists()
    with git_call(location, Credentials(ssh_private_key="k"), pinned_known_hosts=pinned) as call:
        # no known_hosts given: trust on first use (the CLI's default), pinned per source so later changes fail
        config = ssh_config(call.env["GIT_SSH_COMMAND"])
        assert config["stricthostkeychecking"] == "accept-new"
        assert config["userknownhostsfile"] == str(pinned)


def test_token_lives_only_in_the_subprocess_environment(tmp_path: Path) -> None:
    location = parse_repo_url("https://github.com/org/repo.git", allow_local=False)
    with git_call(location, Credentials(token=TOKEN), pinned_known_hosts=tmp_path / "kh") as call:
        assert call.env["KB_GIT_PASSWORD"] == TOKEN and call.env["KB_GIT_USERNAME"] == "x-access-token"
        assert all(TOKEN not in option for option in call.config)
        assert call.scrub(f"oops {TOKEN}") == "oops ***"
    assert "KB_GIT_PASSWORD" not in os.environ
    assert TOKEN not in repr(Credentials(token=TOKEN))


def test_the_token_is_given_only_to_the_repository_host(cache: RepoCache, work: WorkRepo, tmp_path: Path) -> None:
    # The repository's server redirects to another host, which asks for credentials.
    root = tmp_path / "elsewhere"
    root.mkdir()
    git(root, "clone", "--bare", "--quiet", str(work.path), "org/private.git")
    seen: list[str] = []
    with serve_git_http(root, "robot", TOKEN, seen=seen) as elsewhere, serve_redirect(elsewhere) as base:
        creds = Credentials(username="robot", token=TOKEN)
        with pytest.raises(RepositoryAuthError):
            cache.open("ns/src", check_repo(RepoSpec(f"{base}/org/private.git", credentials=creds), allow_local=False))
    assert seen, "git did not follow the redirect: the test proves nothing"
    assert seen == [""] * len(seen)  # asked, and never answered with any credential


def test_a_broken_clone_is_a_sync_error_not_a_crash(cache: RepoCache, work: WorkRepo) -> None:
    with closing(open_local(cache, work)) as checkout:
        first = checkout.head
        shutil.rmtree(checkout.folder / "objects")  # a corrupted cache, or a full disk
        with pytest.raises(RepositoryReadError, match="ls-tree"):
            checkout.list_files()
        with pytest.raises(RepositoryReadError):
            checkout.diff(first)
        with pytest.raises(RepositoryReadError):
            checkout.blob_sizes([first])
        with pytest.raises(RepositoryReadError):
            checkout.read_blob(first)


@pytest.mark.parametrize(
    "call",
    [
        {"command": "git status"},  # a shell string
        {"command": ["git", "status"], "shell": True},
        {"command": ["git", "status"], "universal_newlines": True},
        {"command": ["git", "status"], "preexec_fn": os.getpid},
    ],
    ids=["string", "shell", "text", "popen-option"],
)
def test_the_clean_git_executor_refuses_anything_but_an_argument_list(tmp_path: Path, call: dict) -> None:
    from kboperator.git.command import CleanGit

    clean = CleanGit(tmp_path, {"PATH": os.environ["PATH"]}, timeout_s=10)
    with pytest.raises(TypeError, match="argument lists with byte output only"):
        clean.execute(**call)
    assert clean.execute(["git", "--version"]).startswith("git version")  # the argv path itself runs
