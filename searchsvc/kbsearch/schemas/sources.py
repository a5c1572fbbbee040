"""Sources: a sync's status report (PUT /api/v1/sources/{sourceIdentifier}/status) and the sources listed."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, AwareDatetime, Field, StrictStr, model_validator

from kbsearch.commands import ProgressReport, SyncReport
from kbsearch.models import FailedQuestion, FileIssue, Freshness, JudgedQuality, SyncStatus, rfc3339
from kbsearch.schemas.fields import Body, Count, one_line, text_lines

# A sync status report: bounded so that one source's failures cannot bloat the store or a page.
MAX_REPORTED_FILES = 100
MAX_FILE_PATH = 1024
MAX_ISSUE_REASON = 1000
MAX_SYNC_MESSAGE = 2000
MAX_COMMIT = 128
ISSUE_CODE = r"^[A-Za-z0-9_.\-]{1,64}$"
# The judged questions' block: the first failed questions, each bounded as the operator bounds them.
MAX_REPORTED_QUESTIONS = 20
MAX_QUESTION = 500
MAX_EXPECTED_PAGES = 10
MAX_FACT = 200
MAX_QUESTIONS = 200


class FileIssueBody(Body):
    """One file a sync skipped or failed: its path in the repository, why, and the service's code if any."""

    path: Annotated[StrictStr, Field(min_length=1, max_length=MAX_FILE_PATH), AfterValidator(one_line)]
    reason: Annotated[StrictStr, Field(max_length=MAX_ISSUE_REASON), AfterValidator(text_lines)]
    code: Annotated[StrictStr, Field(pattern=ISSUE_CODE)] | None = None

    def to_command(self) -> FileIssue:
        return FileIssue(path=self.path, reason=self.reason, code=self.code)


class FreshnessBody(Body):
    """How fresh the source's index is: the newest commit seen on the remote, when it was first
    seen (a webhook's push, else the sync's start), when it became searchable, and the lag between."""

    remote_commit: Annotated[StrictStr, Field(min_length=1, max_length=MAX_COMMIT), AfterValidator(one_line)]
    seen_at: AwareDatetime
    searchable_at: AwareDatetime
    lag_seconds: Annotated[float, Field(ge=0, le=10**9, allow_inf_nan=False)]

    def to_command(self) -> Freshness:
        return Freshness(
            remote_commit=self.remote_commit,
            seen_at=rfc3339(self.seen_at),
            searchable_at=rfc3339(self.searchable_at),
            lag_seconds=self.lag_seconds,
        )


Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class FailedQuestionBody(Body):
    """A judged question the index did not answer: `rank` of its expected page (1-5; None: not in the
    top 5), and the facts its answer lacks."""

    question: Annotated[StrictStr, Field(min_length=1, max_length=MAX_QUESTION), AfterValidator(one_line)]
    expected: Annotated[
        list[Annotated[StrictStr, Field(min_length=1, max_length=MAX_FILE_PATH), AfterValidator(one_line)]],
        Field(max_length=MAX_EXPECTED_PAGES),
    ] = Field(default_factory=list)
    rank: Annotated[int, Field(ge=1, le=5)] | None = None
    missing_facts: Annotated[
        list[Annotated[StrictStr, Field(min_length=1, max_length=MAX_FACT), AfterValidator(one_line)]],
        Field(max_length=MAX_EXPECTED_PAGES),
    ] = Field(default_factory=list)


class QualityBody(Body):
    """The judged questions of the synced commit (.kb/questions.yaml), asked after the sync: hit@1 and
    hit@5 (an expected page first, or in the top 5), the share of answers that hold their facts (of
    `withFacts` questions), the first failed questions. `error`: why there are no figures."""

    questions: Annotated[int, Field(ge=0, le=MAX_QUESTIONS)]
    hit_at_1: Share | None = None
    hit_at_5: Share | None = None
    with_facts: Annotated[int, Field(ge=0, le=MAX_QUESTIONS)] = 0
    facts_share: Share | None = None
    failed: Annotated[int, Field(ge=0, le=MAX_QUESTIONS)] | None = None
    failed_questions: Annotated[list[FailedQuestionBody], Field(max_length=MAX_REPORTED_QUESTIONS)] = Field(
        default_factory=list
    )
    error: Annotated[StrictStr, Field(max_length=MAX_SYNC_MESSAGE), AfterValidator(text_lines)] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> QualityBody:
        if self.failed is None:
            self.failed = len(self.failed_questions)
        if self.failed < len(self.failed_questions) or self.failed > self.questions:
            raise ValueError("quality.failed is the full count: at least the questions listed, at most all")
        if self.with_facts > self.questions:
            raise ValueError("quality.withFacts counts questions: at most quality.questions")
        return self

    def to_command(self) -> JudgedQuality:
        failed = [
            FailedQuestion(question=q.question, expected=q.expected, rank=q.rank, missing_facts=q.missing_facts)
            for q in self.failed_questions
        ]
        return JudgedQuality(
            questions=self.questions, hit_at_1=self.hit_at_1, hit_at_5=self.hit_at_5, with_facts=self.with_facts,
            facts_share=self.facts_share, failed=self.failed or 0, failed_questions=failed, error=self.error,
        )  # fmt: skip


class FailedQuestionInfo(Body):
    question: str
    expected: list[str]
    rank: int | None
    missing_facts: list[str]


class QualityInfo(Body):
    questions: int
    hit_at_1: float | None
    hit_at_5: float | None
    with_facts: int
    facts_share: float | None
    failed: int
    failed_questions: list[FailedQuestionInfo]
    error: str | None = None


class FreshnessInfo(Body):
    remote_commit: str
    seen_at: str
    searchable_at: str
    lag_seconds: float


class SyncProgressBody(Body):
    """How far a running sync is: its stage, documents done of `total` (known from stage syncing on)."""

    stage: Literal["fetching", "reading", "syncing"]
    done: Count = 0
    total: Count | None = None
    started_at: AwareDatetime

    @model_validator(mode="after")
    def _within_total(self) -> SyncProgressBody:
        if self.total is not None and self.done > self.total:
            raise ValueError(f"progress.done is {self.done} but progress.total is {self.total}")
        return self


class SyncProgressInfo(Body):
    stage: str
    done: int
    total: int | None
    started_at: str
    reported_at: str  # this service's clock when the report came: an old one means the syncer stopped reporting


class SyncStatusRequest(Body):
    """PUT /api/v1/sources/{sourceIdentifier}/status: the outcome of one sync, as its syncer saw it,
    or (with `progress` alone) how far the sync running now is.

    `failed` and `skipped` are the full counts and default to the length of their lists; the
    lists hold at most MAX_REPORTED_FILES entries each (send the first ones and the full count).
    An outcome (`phase` and `syncedAt`) ends the sync: its progress is no longer shown.
    """

    commit: Annotated[StrictStr, Field(min_length=1, max_length=MAX_COMMIT), AfterValidator(one_line)] | None = None
    phase: Literal["ok", "partial", "error"] | None = None
    documents: Count = 0
    failed: Count | None = None
    skipped: Count | None = None
    added: Count = 0
    modified: Count = 0
    deleted: Count = 0
    unchanged: Count = 0
    failed_files: Annotated[list[FileIssueBody], Field(max_length=MAX_REPORTED_FILES)] = Field(default_factory=list)
    skipped_files: Annotated[list[FileIssueBody], Field(max_length=MAX_REPORTED_FILES)] = Field(default_factory=list)
    synced_at: AwareDatetime | None = None
    next_sync_at: AwareDatetime | None = None
    message: Annotated[StrictStr, Field(max_length=MAX_SYNC_MESSAGE), AfterValidator(text_lines)] | None = None
    # Freshness, sent with every report (a failed one too): the service keeps only the latest.
    last_success_at: AwareDatetime | None = None
    freshness: FreshnessBody | None = None
    progress: SyncProgressBody | None = None
    # The judged questions of `commit`, when its syncer asked them; without it, a report of the same
    # commit keeps the quality stored (a sync that fetched nothing asks nothing).
    quality: QualityBody | None = None

    @model_validator(mode="after")
    def _consistent(self) -> SyncStatusRequest:
        if self.progress is not None:
            others = sorted(self.model_fields_set - {"progress"})
            if others:
                raise ValueError(f"a progress report carries progress alone, not {', '.join(others)}")
            return self
        if self.phase is None or self.synced_at is None:
            raise ValueError("a report needs phase and syncedAt (the sync's outcome), or progress alone")
        for count, files in (("failed", self.failed_files), ("skipped", self.skipped_files)):
            total, listed = getattr(self, count), len(files)
            if total is None:
                setattr(self, count, listed)
            elif total < listed:
                raise ValueError(f"{count} is {total} but {count}Files lists {listed} files; {count} is the full count")
        if self.phase == "ok" and self.failed:
            raise ValueError(f"phase is ok but {self.failed} files failed; report phase partial")
        return self

    def to_command(self, source_identifier: str) -> SyncReport:
        """The one way a status body becomes a report (times as RFC 3339, UTC; counts filled in)."""
        if self.progress is not None:
            p = self.progress
            progress = ProgressReport(stage=p.stage, done=p.done, total=p.total, started_at=p.started_at)
            return SyncReport(source_identifier=source_identifier, progress=progress)
        assert self.phase is not None and self.synced_at is not None  # _consistent checks it
        status = SyncStatus(
            source_identifier=source_identifier,
            commit=self.commit,
            phase=self.phase,
            documents=self.documents,
            failed=self.failed or 0,
            skipped=self.skipped or 0,
            failed_files=[i.to_command() for i in self.failed_files],
            skipped_files=[i.to_command() for i in self.skipped_files],
            synced_at=rfc3339(self.synced_at),
            next_sync_at=_time(self.next_sync_at),
            message=self.message,
            added=self.added,
            modified=self.modified,
            deleted=self.deleted,
            unchanged=self.unchanged,
            last_success_at=_time(self.last_success_at),
            freshness=self.freshness.to_command() if self.freshness else None,
            quality=self.quality.to_command() if self.quality else None,
        )
        return SyncReport(source_identifier=source_identifier, status=status, synced_at=self.synced_at)


def _time(value: datetime | None) -> str | None:
    return rfc3339(value) if value is not None else None


class FileIssueInfo(Body):
    path: str
    reason: str
    code: str | None


class SyncStatusInfo(Body):
    """A source's last reported sync (camelCase, like the rest of the API)."""

    commit: str | None
    phase: Literal["ok", "partial", "error"]
    documents: int
    failed: int
    skipped: int
    added: int
    modified: int
    deleted: int
    unchanged: int
    failed_files: list[FileIssueInfo]
    skipped_files: list[FileIssueInfo]
    synced_at: str
    next_sync_at: str | None
    message: str | None
    last_success_at: str | None = None
    freshness: FreshnessInfo | None = None
    quality: QualityInfo | None = None  # the judged questions of `commit`, if its syncer asked them


class SyncStatusResponse(Body):
    source_identifier: str
    stored: bool  # false: a report with a later syncedAt is already stored, and stays
    sync: SyncStatusInfo | None  # None only after a progress report of a source that never finished a sync
    progress: SyncProgressInfo | None = None


class VersionInfo(Body):
    version: str
    chunks: int


class SourceMatchInfo(Body):
    """Why a source fits GET /api/v1/sources?query=: the query's words in its name, its best chunk for it."""

    score: float
    name_tokens: list[str]
    relevance: float
    hits: int
    best_title: str | None
    best_uri: str | None
    version: str | None  # a version the query names that this source holds


class SourceInfo(Body):
    source_identifier: str
    documents: int
    chunks: int
    last_ingested_at: str | None
    sync: SyncStatusInfo | None = None
    progress: SyncProgressInfo | None = None  # the sync running now, if its syncer reports progress
    last_synced_at: str | None = None  # when its syncer last reported a finished sync (sync.syncedAt)
    versions: list[VersionInfo] = Field(default_factory=list)  # documentation versions present, newest first
    unversioned_chunks: int = 0  # chunks of the current copy (no version)
    quality: float | None = None  # hit@5 of the source's judged questions (sync.quality), when measured
    match: SourceMatchInfo | None = None  # only with ?query=


class SourceList(Body):
    sources: list[SourceInfo]


class SourceStatusInfo(Body):
    """One source's counts: what the operator compares with what it synced (drift)."""

    source_identifier: str
    documents: int
    chunks: int
    incomplete_documents: int
    last_ingested_at: str | None
    collection_epoch: str
    sync: SyncStatusInfo | None = None
    progress: SyncProgressInfo | None = None
