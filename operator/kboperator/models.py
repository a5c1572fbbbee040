"""Plain data passed between the sync engine, the CLI and the kopf handlers."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

#: The KnowledgeSource CRD's defaults (crds/knowledgesources.yaml) that the CLI shares: kube/resource.py
#: and `knowledge-sync` both read them here, and tests/operator/kube/test_crd.py holds them to the CRD.
DEFAULT_REF = "main"
DEFAULT_PATHS = ("**/*.md",)
DEFAULT_MAX_FILE_SIZE = 1_048_576


@dataclass(frozen=True)
class Credentials:
    """How to authenticate to a repository: an HTTPS token, or an SSH key.

    The repr never shows secret values, so a Credentials object may appear in logs and
    exception messages without leaking anything.
    """

    username: str | None = None
    token: str | None = None
    ssh_private_key: str | None = None
    known_hosts: str | None = None

    def __repr__(self) -> str:
        def shown(value: str | None) -> str:
            return "None" if value is None else "'***'"

        return (
            f"Credentials(username={self.username!r}, token={shown(self.token)}, "
            f"ssh_private_key={shown(self.ssh_private_key)}, known_hosts={shown(self.known_hosts)})"
        )

    __str__ = __repr__


@dataclass(frozen=True)
class RepoSpec:
    """Where the documents come from: a URL (https, ssh, local path or file://) and a ref."""

    url: str
    ref: str = DEFAULT_REF
    credentials: Credentials | None = None


@dataclass(frozen=True)
class SyncSpec:
    """Everything that decides which documents a source holds."""

    source_id: str
    repo: RepoSpec
    include: tuple[str, ...] = DEFAULT_PATHS
    exclude: tuple[str, ...] = ()
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    metadata: Mapping[str, str] = field(default_factory=dict)
    # Local paths and file:// URLs read the operator's own filesystem: off unless configured.
    allow_local: bool = False
    # The repository's web page (sync.docuri.check_web_url): the documents' links start there.
    web_url: str | None = None
    # The branch or tag the links name, when `repo.ref` is not one (a CI checkout's detached HEAD).
    link_ref: str | None = None
    # A regular expression searched in each path; its `version` group becomes the document's
    # `version` metadata (sync.documents.version_of). None: read from the tree (sync.versions, and
    # the service's own detection of folders named as a version).
    version_pattern: str | None = None
    # (glob, weight) pairs: a matching document's `rankWeight` metadata, which the service's ranking
    # multiplies its pages' scores by (sync.documents.PathWeights); the longest matching glob wins.
    path_weights: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Accept lists and dicts from callers, but keep the object immutable and hashable-ish.
        object.__setattr__(self, "include", tuple(self.include))
        object.__setattr__(self, "exclude", tuple(self.exclude))
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))
        object.__setattr__(self, "path_weights", MappingProxyType(dict(self.path_weights)))

    def document_set_key(self) -> str:
        """A digest of the fields that change the document set; a new value needs a full reconcile."""
        shape = {
            "url": self.repo.url,
            "ref": self.repo.ref,
            "include": list(self.include),
            "exclude": list(self.exclude),
            "maxFileSize": self.max_file_size,
            "metadata": dict(sorted(self.metadata.items())),
        }
        if self.web_url is not None:  # only when set: the states written before it stay valid
            shape["webUrl"] = self.web_url
        if self.link_ref is not None:
            shape["linkRef"] = self.link_ref
        if self.version_pattern is not None:
            shape["versionPattern"] = self.version_pattern
        else:  # versions read from sibling folders (sync.versions): each source reconciles fully once
            shape["versions"] = "siblings"
        if self.path_weights:  # a new weight must reach every document it matches
            shape["pathWeights"] = dict(sorted(self.path_weights.items()))
        return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class FileIssue:
    """One file that was skipped or failed, and why; `code` is the service's, when it refused it."""

    path: str
    reason: str
    code: str | None = None

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason} | ({"code": self.code} if self.code else {})


#: The failed questions a quality report lists (the service takes at most as many).
REPORTED_QUESTIONS = 20
_REPORTED_QUESTION = 500
_REPORTED_FACT = 200
_REPORTED_EXPECTED = 10


@dataclass(frozen=True)
class QuestionOutcome:
    """One judged question (.kb/questions.yaml) asked of the index after a sync.

    `rank`: where the first expected page came in the source's search (1 to 5), None when not in
    the top 5. `missing_facts`: the question's facts its answer does not hold (case-insensitive).
    """

    question: str
    expected: tuple[str, ...]
    rank: int | None
    facts: tuple[str, ...] = ()
    missing_facts: tuple[str, ...] = ()

    @property
    def hit_at_1(self) -> bool:
        return self.rank == 1

    @property
    def hit_at_5(self) -> bool:
        return self.rank is not None

    @property
    def holds_facts(self) -> bool | None:
        """Whether the answer holds every fact; None for a question without facts."""
        return None if not self.facts else not self.missing_facts

    @property
    def failed(self) -> bool:
        return not self.hit_at_5 or self.holds_facts is False

    def to_json(self) -> dict[str, Any]:
        return {
            "question": _one_line(self.question)[:_REPORTED_QUESTION],
            "expected": [_PATH_CONTROL.sub(" ", p)[:_REPORTED_PATH] for p in self.expected[:_REPORTED_EXPECTED]],
            "rank": self.rank,
            "missingFacts": [_one_line(f)[:_REPORTED_FACT] for f in self.missing_facts[:_REPORTED_EXPECTED]],
        }


@dataclass(frozen=True)
class Quality:
    """How well the index answers a source's judged questions, measured after a sync.

    `error`: why there are no figures (the questions file was refused, or the search service
    stopped answering while they were asked); the figures are None then, and for no questions.
    """

    outcomes: tuple[QuestionOutcome, ...] = ()
    error: str | None = None

    @property
    def questions(self) -> int:
        return len(self.outcomes)

    @property
    def hit_at_1(self) -> float | None:
        return _share([o.hit_at_1 for o in self.outcomes])

    @property
    def hit_at_5(self) -> float | None:
        return _share([o.hit_at_5 for o in self.outcomes])

    @property
    def with_facts(self) -> int:
        return sum(1 for o in self.outcomes if o.facts)

    @property
    def facts_share(self) -> float | None:
        """The share of the questions with facts whose answer holds them all."""
        return _share([held for o in self.outcomes if (held := o.holds_facts) is not None])

    @property
    def failed(self) -> list[QuestionOutcome]:
        return [o for o in self.outcomes if o.failed]

    def to_json(self) -> dict[str, Any]:
        """The `quality` block of a sync report (and of `knowledge-sync --json`)."""
        failed = self.failed
        body: dict[str, Any] = {
            "questions": self.questions,
            "hitAt1": self.hit_at_1,
            "hitAt5": self.hit_at_5,
            "withFacts": self.with_facts,
            "factsShare": self.facts_share,
            "failed": len(failed),
            "failedQuestions": [o.to_json() for o in failed[:REPORTED_QUESTIONS]],
        }
        if self.error:
            body["error"] = _CONTROL.sub(" ", self.error)[:_REPORTED_MESSAGE]
        return body


def _one_line(text: str) -> str:
    return " ".join(_PATH_CONTROL.sub(" ", text).split())


def _share(flags: list[bool]) -> float | None:
    return round(sum(flags) / len(flags), 4) if flags else None


@dataclass(frozen=True)
class Baseline:
    """What the last successful sync left in the service; the drift check compares against it.

    None means unknown (never synced, or synced by a version that did not record it): not checked.
    """

    epoch: str | None = None  # the collection's id: it changes when the collection is re-created
    documents: int | None = None  # the source's document count right after that sync


@dataclass(frozen=True)
class SyncResult:
    """What one sync did. `commit` is the head that was synced.

    `unchanged` counts documents found equal (full reconcile) or answered `unchanged` by the
    service; `skipped` lists every skipped file on a full reconcile, and the changed ones on an
    incremental sync: files the reader refused (binary, too large, ...) and files the service
    refused for good (with its `code`); `documents` is read back from the service after the
    sync. `baseline` is what the next sync's drift check compares against, `drift` why this
    sync was a full reconcile instead of an incremental one (None: it was not for drift).
    """

    commit: str
    full: bool
    added: int
    modified: int
    deleted: int
    renamed: int
    unchanged: int
    skipped: list[FileIssue]
    failed: list[FileIssue]
    documents: int
    duration_s: float
    baseline: Baseline = Baseline()
    drift: str | None = None
    #: False when `git ls-remote` found the ref still at the last synced commit: nothing was fetched.
    fetched: bool = True
    #: The judged questions asked after the sync (.kb/questions.yaml); None when none were asked.
    quality: Quality | None = None

    @property
    def ok(self) -> bool:
        """True when no document failed for a transient reason: only then may last_commit advance.

        Skips do not count: a file the service refused for good is retried when it changes.
        """
        return not self.failed

    @property
    def rejected(self) -> list[FileIssue]:
        """The skips the search service decided (they carry its error code)."""
        return [issue for issue in self.skipped if issue.code]

    def to_json(self) -> dict[str, Any]:
        """The `knowledge-sync --json` object; `full`, `drift` and `durationSeconds` are extras."""
        return {
            "commit": self.commit,
            "added": self.added,
            "modified": self.modified,
            "deleted": self.deleted,
            "renamed": self.renamed,
            "unchanged": self.unchanged,
            "skipped": [issue.to_json() for issue in self.skipped],
            "failed": [issue.to_json() for issue in self.failed],
            "documents": self.documents,
            "full": self.full,
            "drift": self.drift,
            "fetched": self.fetched,
            "durationSeconds": round(self.duration_s, 3),
        } | ({"quality": self.quality.to_json()} if self.quality is not None else {})


#: What the search service takes in one status report (PUT /api/v1/sources/{id}/status).
REPORTED_FILES = 100
_REPORTED_PATH = 1024
_REPORTED_REASON = 1000
_REPORTED_MESSAGE = 2000
_CODE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # newlines and tabs are fine in a reason
_PATH_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class Freshness:
    """How fresh the index is: the newest commit seen on the remote, when it was first seen (a
    webhook's push, else the sync's start), when it became searchable, and the lag between."""

    commit: str
    seen_at: str  # RFC 3339
    searchable_at: str  # RFC 3339
    lag_s: float


@dataclass(frozen=True)
class SyncReport:
    """One sync's outcome as the search service keeps it: phase ok, partial (files failed) or error.

    `result` is None when the whole sync failed (phase error, `message` says why).
    `last_success_at` and `freshness` travel with every report, a failed one too: the service keeps
    only the latest report, and its sources page shows how fresh the source still is.
    """

    phase: str  # "ok" | "partial" | "error"
    synced_at: str  # RFC 3339
    result: SyncResult | None = None
    next_sync_at: str | None = None
    message: str | None = None
    last_success_at: str | None = None  # RFC 3339: when the last successful sync ended
    freshness: Freshness | None = None

    @classmethod
    def of(
        cls,
        result: SyncResult | None,
        error: Exception | None,
        *,
        synced_at: str,
        next_sync_at: str | None,
        last_success_at: str | None = None,
        freshness: Freshness | None = None,
    ) -> SyncReport:
        if result is None:
            text = str(error) if error is not None and str(error) else type(error).__name__
            return cls("error", synced_at, None, next_sync_at, text, last_success_at, freshness)
        phase = "ok" if result.ok else "partial"
        return cls(phase, synced_at, result, next_sync_at, None, last_success_at, freshness)

    def to_json(self) -> dict[str, Any]:
        """The request body, within the service's bounds: lists cut to REPORTED_FILES, texts shortened."""
        body: dict[str, Any] = {"phase": self.phase, "syncedAt": self.synced_at, "nextSyncAt": self.next_sync_at}
        if self.message:
            body["message"] = _CONTROL.sub(" ", self.message)[:_REPORTED_MESSAGE]
        if self.last_success_at:
            body["lastSuccessAt"] = self.last_success_at
        if self.freshness is not None:
            body["freshness"] = {
                "remoteCommit": self.freshness.commit,
                "seenAt": self.freshness.seen_at,
                "searchableAt": self.freshness.searchable_at,
                "lagSeconds": round(max(0.0, self.freshness.lag_s), 3),
            }
        result = self.result
        if result is not None:
            body |= {
                "commit": result.commit,
                "documents": result.documents,
                "added": result.added,
                "modified": result.modified + result.renamed,
                "deleted": result.deleted,
                "unchanged": result.unchanged,
                "failed": len(result.failed),
                "skipped": len(result.skipped),
                "failedFiles": [_reported(issue) for issue in result.failed[:REPORTED_FILES]],
                "skippedFiles": [_reported(issue) for issue in result.skipped[:REPORTED_FILES]],
            }
            if result.quality is not None:  # only when asked: a report without it keeps the stored one
                body["quality"] = result.quality.to_json()
        return body


def _reported(issue: FileIssue) -> dict[str, str]:
    # A git path may hold any byte but NUL; the service takes printable text, so escape the rest.
    path = _PATH_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", issue.path)[:_REPORTED_PATH]
    reason = _CONTROL.sub(" ", issue.reason)[:_REPORTED_REASON]
    code = {"code": issue.code} if issue.code and _CODE.match(issue.code) else {}
    return {"path": path, "reason": reason} | code
