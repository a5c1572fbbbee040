"""`knowledge-sync`: the operator's sync engine without Kubernetes, for CI and cron.

Exit status: 0 the service now matches the repository, except for the files it lists as skipped
(including those the service refused for good: too large, another source's URI, invalid); 1
some documents failed (listed), or a transient problem (repository or service unreachable)
stopped the sync; 2 a usage or configuration error (invalid spec, refused credentials, a refused
mass deletion); 3 the sync converged but the judged questions (.kb/questions.yaml) scored under
--eval-min-hit5, or gave no figure to compare. With --state, a sync that converged advances the
state's commit, skips or not, whatever its questions scored.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from kboperator.errors import (
    InvalidSpecError,
    MassDeletionRefusedError,
    RepositoryAuthError,
    ServiceAuthError,
    ServiceRejectedError,
    SyncError,
)
from kboperator.git.repo import RepoCache
from kboperator.models import (
    DEFAULT_MAX_FILE_SIZE,
    DEFAULT_PATHS,
    DEFAULT_REF,
    Baseline,
    Credentials,
    Freshness,
    Quality,
    RepoSpec,
    SyncResult,
    SyncSpec,
)
from kboperator.originweb import current_branch, origin_url, web_url_of_remote
from kboperator.repourl import parse_repo_url
from kboperator.schedule import format_time, utcnow
from kboperator.searchclient import SearchClient
from kboperator.statefile import read_state, write_state
from kboperator.sync.docuri import check_web_url
from kboperator.sync.engine import SyncEngine
from kboperator.sync.prepared import prepare
from kboperator.sync.questions import QUESTIONS_PATH
from kboperator.sync.reporting import ServiceProgress, ThrottledProgress, fan_out
from kboperator.syncview import NORMAL, PROGRESS_INTERVAL_S, QUIET, VERBOSE, LogHandler, SyncView
from kboperator.version import package_version

log = logging.getLogger("kboperator.cli")

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_QUALITY = 0, 1, 2, 3
# Errors no retry can fix: someone has to change the command line, a Secret or the repository.
_CONFIG_ERRORS = (
    InvalidSpecError,
    RepositoryAuthError,
    ServiceAuthError,
    ServiceRejectedError,
    MassDeletionRefusedError,
)


class _ConfigError(Exception):
    """A problem with the command line or its environment: exit 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="knowledge-sync",
        description="Make a knowledge-base source mirror a git repository exactly.",
        epilog="Exit status: 0 converged, 1 some documents failed or a transient error, 2 usage or config error, "
        "3 the judged questions scored under --eval-min-hit5. "
        "When --repo is the CI job's own checkout, the links' base defaults to "
        "$GITHUB_SERVER_URL/$GITHUB_REPOSITORY (GitHub, Gitea and Forgejo Actions), $CI_PROJECT_URL (GitLab CI) "
        "or $BITBUCKET_GIT_HTTP_ORIGIN (Bitbucket Pipelines); with --ref HEAD, the links' ref defaults to "
        "$GITHUB_REF_NAME, $CI_COMMIT_REF_NAME or $BITBUCKET_BRANCH.",
    )
    add = parser.add_argument
    add("--repo", required=True, metavar="URL_OR_PATH", help="https/ssh URL, file:// URL or local path")
    add("--ref", default=DEFAULT_REF, help=f"branch or tag (default: {DEFAULT_REF})")
    add("--source-id", required=True, metavar="ID", help="sourceIdentifier of the documents, e.g. team/docs")
    add("--service", required=True, metavar="URL", help="search service base URL")
    add("--token-env", metavar="VAR", help="environment variable holding the service's API token")
    add("--include", action="extend", nargs="+", metavar="GLOB",
        help=f"include globs (default: {' '.join(DEFAULT_PATHS)})")  # fmt: skip
    add("--exclude", action="extend", nargs="+", default=[], metavar="GLOB", help="exclude globs; exclude wins")
    add("--max-file-size", type=_positive_int, default=DEFAULT_MAX_FILE_SIZE, metavar="BYTES",
        help="skip larger files (default 1 MiB)")  # fmt: skip
    add("--metadata", action="extend", nargs="+", default=[], metavar="KEY=VALUE", help="metadata on every document")
    add(
        "--web-url",
        metavar="URL",
        help="the repository's web page, e.g. https://github.com/org/repo: the links' base for a local "
        "checkout (default: from the CI's variables, see below, else from the clone's origin remote)",
    )
    add(
        "--link-ref",
        metavar="NAME",
        help="branch or tag the links name when --ref is not one, e.g. HEAD (default: from the CI's variables)",
    )
    add(
        "--version-pattern",
        metavar="REGEX",
        help="for docs kept per version: a regular expression (RE2 syntax) searched in each path whose group named "
        "'version' becomes the document's version, e.g. 'docs/(?P<version>[^/]+)/' (default: read from the tree: "
        "2.21/, v1.4/, version-3.1/, release-1.2/ folders, and v1.16-docs/ beside docs/)",
    )
    add(
        "--path-weight",
        action="append",
        default=[],
        metavar="GLOB=WEIGHT",
        help="rank the documents a glob matches by this weight, e.g. 'content/blog/**=0.7' (repeatable; the "
        "longest matching glob wins; default: the service's own weights for blogs, proposals, changelogs...)",
    )
    add("--state", type=Path, metavar="FILE", help="keeps the last synced commit; without it, a full reconcile")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print one JSON object with the result")
    output.add_argument(
        "--json-lines",
        action="store_true",
        help="print one JSON object per line: each step and each document as it is done, then a summary",
    )
    talk = parser.add_mutually_exclusive_group()
    talk.add_argument(
        "-q", "--quiet", action="store_true", help="no progress and no log lines below warnings; still the result"
    )
    talk.add_argument("-v", "--verbose", action="store_true", help="also each document's outcome, and debug logs")
    extra = parser.add_argument_group("extras")
    extra.add_argument("--cache-dir", type=Path, help="where cached clones live (default: ~/.cache/knowledge-sync)")
    extra.add_argument("--git-token-env", metavar="VAR", help="environment variable holding an HTTPS token for git")
    extra.add_argument("--git-username", help="user name sent with --git-token-env (default: x-access-token)")
    extra.add_argument("--ssh-key-file", type=Path, help="SSH private key for git")
    extra.add_argument("--known-hosts-file", type=Path, help="known_hosts to check the SSH host key against")
    extra.add_argument("--full", action="store_true", help="full reconcile even when --state has a commit")
    extra.add_argument(
        "--partial-clone",
        action="store_true",
        help="fetch commits and trees, then only the selected files' blobs (--filter=blob:none): for monorepos",
    )
    extra.add_argument(
        "--progress-interval",
        type=float,
        default=PROGRESS_INTERVAL_S,
        metavar="SECONDS",
        help="when stderr is not a terminal, a progress line at most this often "
        f"(default {PROGRESS_INTERVAL_S:g}; on a terminal, a progress bar)",
    )
    judged = parser.add_argument_group("judged questions (.kb/questions.yaml)")
    judged.add_argument(
        "--eval",
        action="store_true",
        help="after the sync, print each judged question's hit@1, hit@5 and facts (asked again when the "
        "ref did not move); without it, a sync that fetched a head with the file prints the figures alone",
    )
    judged.add_argument(
        "--eval-min-hit5",
        type=_share,
        metavar="SHARE",
        help="exit 3 when hit@5 is under SHARE (0 to 1), or when there is no figure; implies --eval",
    )
    extra.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    verbosity = QUIET if args.quiet else VERBOSE if args.verbose else NORMAL
    view = SyncView(
        out=sys.stdout,
        err=sys.stderr,
        verbosity=verbosity,
        json_lines=args.json_lines,
        interval_s=args.progress_interval,
        repo=f"{_repo_label(args.repo)} ({args.ref})",
    )
    handler = LogHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    package = logging.getLogger("kboperator")
    package.addHandler(handler)
    previous_level = package.level
    package.setLevel({QUIET: logging.WARNING, NORMAL: logging.INFO, VERBOSE: logging.DEBUG}[verbosity])
    try:
        return asyncio.run(_run(args, view))
    finally:
        package.removeHandler(handler)
        package.setLevel(previous_level)


async def _run(args: argparse.Namespace, view: SyncView) -> int:
    evaluating = args.eval or args.eval_min_hit5 is not None
    try:
        spec = _spec(args)
        token = _env(args.token_env, "--token-env") if args.token_env else None
        view.say(
            f"knowledge-sync: syncing {_repo_label(args.repo)} ({args.ref}) into {args.service} "
            f"as {spec.source_id}: {_how(args)}"
        )
        last_commit, baseline = (None, Baseline())
        if args.state and args.state.exists():
            last_commit, baseline = read_state(args.state, spec, args.service)
        cache = RepoCache(args.cache_dir or _default_cache(), partial=args.partial_clone)
        if args.state:
            # Before syncing: a run that fails, or is killed, after changing part of the service
            # leaves a full reconcile owed (see statefile), also if it replaces a state written
            # for another spec or service, whose commit no longer describes the service.
            _save_state(args, spec, last_commit, full_owed=True)
        async with SearchClient(args.service, token) as client:
            engine = SyncEngine(client, cache)
            started = utcnow()
            # The service's sources page shows the run as it goes: throttled, never a request per document.
            reporter = ThrottledProgress(spec.source_id, [ServiceProgress(client)], started_at=started)
            try:
                # Prepared once, here: an invalid spec is reported to the service like any failed sync.
                prepared = prepare(spec, forbidden=[cache.root])
                result = await engine.sync(
                    prepared, last_commit, force_full=args.full, baseline=baseline, progress=fan_out(view, reporter)
                )
            except SyncError as exc:
                await reporter.close()
                await engine.report(spec.source_id, None, exc, synced_at=format_time(utcnow()))
                raise
            await reporter.close()
            now = utcnow()
            if evaluating and result.quality is None and not result.fetched:  # the ref did not move
                result = replace(result, quality=await engine.judge(prepared, result.commit))
            await engine.report(
                spec.source_id, result, None, synced_at=format_time(now), **_freshness(result, started, now)
            )
        if result.ok and args.state:
            _save_state(args, spec, result.commit, baseline=result.baseline)
    except (_ConfigError, *_CONFIG_ERRORS) as exc:
        return _fail(args, view, exc, EXIT_CONFIG)
    except SyncError as exc:
        return _fail(args, view, exc, EXIT_FAILED)
    view.result(result, as_json=args.json, table=evaluating)
    if not result.ok:
        return EXIT_FAILED
    return _judged(args, view, result.quality) if evaluating else EXIT_OK


def _judged(args: argparse.Namespace, view: SyncView, quality: Quality | None) -> int:
    """EXIT_QUALITY when --eval-min-hit5 is not met (a missing figure does not meet it)."""
    if quality is None:
        view.say(f"knowledge-sync: the synced commit has no {QUESTIONS_PATH}", level=QUIET)
    threshold = args.eval_min_hit5
    if threshold is None:
        return EXIT_OK
    hit5 = quality.hit_at_5 if quality is not None else None
    if hit5 is None or hit5 < threshold:
        print(f"knowledge-sync: hit@5 is {'-' if hit5 is None else f'{hit5:.2f}'}, under --eval-min-hit5 "
              f"{threshold:g}", file=sys.stderr)  # fmt: skip
        return EXIT_QUALITY
    return EXIT_OK


def _repo_label(url: str) -> str:
    """The repository as messages show it: never a URL as given, which may carry a token."""
    try:
        return parse_repo_url(url, allow_local=True).display_url
    except InvalidSpecError:
        return "the repository"  # the engine says what is wrong with it


def _how(args: argparse.Namespace) -> str:
    """Which kind of sync the state (or its absence) asks for, before the state is read."""
    if args.state is None:
        return "a full reconcile (without --state every run is one)"
    if not args.state.exists():
        return f"first sync, a full reconcile (no state file at {args.state} yet)"
    if args.full:
        return "a full reconcile (--full)"
    return f"using the state in {args.state}"


def _freshness(result: SyncResult, started: datetime.datetime, now: datetime.datetime) -> dict[str, Any]:
    """A run has no memory: the commit it fetched counts as seen when the run started (a CI job
    starts on its push). A run that found nothing new says nothing about the lag."""
    if not result.ok:
        return {}
    ended = format_time(now)
    if not result.fetched:
        return {"last_success_at": ended}
    lag = (now - started).total_seconds()
    return {"last_success_at": ended, "freshness": Freshness(result.commit, format_time(started), ended, lag)}


def _spec(args: argparse.Namespace) -> SyncSpec:
    metadata = {}
    for item in args.metadata:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _ConfigError(f"--metadata {item!r} must look like KEY=VALUE")
        metadata[key] = value
    path_weights = {}
    for item in args.path_weight:
        glob, sep, weight = item.rpartition("=")
        try:
            path_weights[glob] = float(weight)
        except ValueError:
            sep = ""
        if not sep or not glob:
            raise _ConfigError(f"--path-weight {item!r} must look like GLOB=WEIGHT, e.g. 'content/blog/**=0.7'")
    credentials = None
    if args.git_token_env or args.ssh_key_file:
        try:
            credentials = Credentials(
                username=args.git_username,
                token=_env(args.git_token_env, "--git-token-env") if args.git_token_env else None,
                ssh_private_key=args.ssh_key_file.read_text() if args.ssh_key_file else None,
                known_hosts=args.known_hosts_file.read_text() if args.known_hosts_file else None,
            )
        except OSError as exc:
            raise _ConfigError(f"cannot read a credentials file: {exc}") from None
    web_url, link_ref = _links(args)
    return SyncSpec(
        source_id=args.source_id,
        web_url=web_url,
        link_ref=link_ref,
        repo=RepoSpec(url=args.repo, ref=args.ref, credentials=credentials),
        include=tuple(args.include or DEFAULT_PATHS),
        exclude=tuple(args.exclude),
        max_file_size=args.max_file_size,
        metadata=metadata,
        allow_local=True,  # the CLI runs as its user, on that user's files
        version_pattern=args.version_pattern,
        path_weights=path_weights,
    )


# Where CI systems say which checkout a job has (its folder), which repository it is (the web
# address, in one or two variables) and which branch.
_CI_CHECKOUTS = (
    ("GITHUB_WORKSPACE", ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY")),  # GitHub, Gitea and Forgejo Actions
    ("CI_PROJECT_DIR", ("CI_PROJECT_URL",)),  # GitLab CI
    ("BITBUCKET_CLONE_DIR", ("BITBUCKET_GIT_HTTP_ORIGIN",)),  # Bitbucket Pipelines
)
_CI_BRANCHES = ("GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BITBUCKET_BRANCH")


def _links(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The links' base and ref: the options, else the CI's variables when --repo is the job's checkout."""
    try:
        location = parse_repo_url(args.repo, allow_local=True)
    except InvalidSpecError:
        location = None  # the engine reports the bad URL
    web_url = args.web_url
    local = Path(location.path) if location is not None and location.kind == "local" else None
    if web_url is None and local is not None:
        web_url = _ci_web_url(local) or _origin_web_url(local)
    if web_url is not None:
        try:
            web_url = check_web_url(web_url)
        except ValueError as exc:
            raise _ConfigError(f"--web-url: {exc}") from None
    link_ref = args.link_ref
    if link_ref is None and web_url is not None and args.ref == "HEAD":
        link_ref = next((os.environ[name] for name in _CI_BRANCHES if os.environ.get(name)), None)
        if link_ref is None and local is not None:
            link_ref = current_branch(local)
    return web_url, link_ref


def _origin_web_url(clone: Path) -> str | None:
    """The web page of a local clone's origin remote, so that its links open for everyone."""
    remote = origin_url(clone)
    web_url = web_url_of_remote(remote) if remote else None
    if web_url:
        log.info("links point at %s (the clone's origin remote; --web-url sets another)", web_url)
    return web_url


def _ci_web_url(checkout: Path) -> str | None:
    """The CI's web address of `checkout`, if it is the folder the CI checked out (not another repository)."""
    for folder, names in _CI_CHECKOUTS:
        workspace = os.environ.get(folder)
        values = [os.environ.get(name, "").strip("/") for name in names]
        if workspace and all(values) and Path(workspace).resolve() == checkout.resolve():
            return "/".join(values)
    return None


def _save_state(
    args: argparse.Namespace,
    spec: SyncSpec,
    commit: str | None,
    *,
    full_owed: bool = False,
    baseline: Baseline = Baseline(),
) -> None:
    try:
        write_state(args.state, spec, args.service, commit, full_owed=full_owed, baseline=baseline)
    except OSError as exc:
        raise _ConfigError(f"--state: cannot write {args.state}: {exc}") from None


def _env(name: str, option: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise _ConfigError(f"{option}: environment variable {name} is not set or empty")
    return value


def _default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "knowledge-sync"


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be a share between 0 and 1, e.g. 0.8")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be a positive number of bytes")
    return value


def _fail(args: argparse.Namespace, view: SyncView, exc: Exception, code: int) -> int:
    view.close()
    print(f"knowledge-sync: {exc}", file=sys.stderr)
    view.error({"error": {"type": type(exc).__name__.lstrip("_"), "message": str(exc)}}, as_json=args.json)
    return code


if __name__ == "__main__":
    sys.exit(main())
