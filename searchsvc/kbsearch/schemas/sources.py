"""Sources: a sync's status report (PUT /api/v1/sources/{sourceIdentifier}/status) and the sources listed."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, AwareDatetime, Field, StrictStr, model_validator

from kbsearch.schemas.fields import Body, Count, one_line, rfc3339, text_lines

# A sync status report: bounded so that one source's failures cannot bloat the store or a page.
MAX_REPORTED_FILES = 100
MAX_FILE_PATH = 1024
MAX_ISSUE_REASON = 1000
MAX_SYNC_MESSAGE = 2000
MAX_COMMIT = 128
ISSUE_CODE = r"^[A-Za-z0-9_.\-]{1,64}$"


class FileIssueBody(Body):
    """One file a sync skipped or failed: its path in the repository, why, and the service's code if any."""

    path: Annotated[StrictStr, Field(min_length=1, max_length=MAX_FILE_PATH), AfterValidator(one_line)]
    reason: Annotated[StrictStr, Field(max_length=MAX_ISSUE_REASON), AfterValidator(text_lines)]
    code: Annotated[StrictStr, Field(pattern=ISSUE_CODE)] | None = None


class FreshnessBody(Body):
    """How fresh the source's index is: the newest commit seen on the remote, when it was first
    seen (a webhook's push, else the sync's start), when it became searchable, and the lag between."""

    remoteCommit: Annotated[StrictStr, Field(min_length=1, max_length=MAX_COMMIT), AfterValidator(one_line)]
    seenAt: AwareDatetime
    searchableAt: AwareDatetime
    lagSeconds: Annotated[float, Field(ge=0, le=10**9, allow_inf_nan=False)]

    @property
    def seen_at(self) -> str:
        return rfc3339(self.seenAt)

    @property
    def searchable_at(self) -> str:
        return rfc3339(self.searchableAt)


class FreshnessInfo(Body):
    remoteCommit: str
    seenAt: str
    searchableAt: str
    lagSeconds: float


class SyncStatusRequest(Body):
    """PUT /api/v1/sources/{sourceIdentifier}/status: the outcome of one sync, as its syncer saw it.

    `failed` and `skipped` are the full counts and default to the length of their lists; the
    lists hold at most MAX_REPORTED_FILES entries each (send the first ones and the full count).
    """

    commit: Annotated[StrictStr, Field(min_length=1, max_length=MAX_COMMIT), AfterValidator(one_line)] | None = None
    phase: Literal["ok", "partial", "error"]
    documents: Count = 0
    failed: Count | None = None
    skipped: Count | None = None
    added: Count = 0
    modified: Count = 0
    deleted: Count = 0
    unchanged: Count = 0
    failedFiles: Annotated[list[FileIssueBody], Field(max_length=MAX_REPORTED_FILES)] = Field(default_factory=list)
    skippedFiles: Annotated[list[FileIssueBody], Field(max_length=MAX_REPORTED_FILES)] = Field(default_factory=list)
    syncedAt: AwareDatetime
    nextSyncAt: AwareDatetime | None = None
    message: Annotated[StrictStr, Field(max_length=MAX_SYNC_MESSAGE), AfterValidator(text_lines)] | None = None
    # Freshness, sent with every report (a failed one too): the service keeps only the latest.
    lastSuccessAt: AwareDatetime | None = None
    freshness: FreshnessBody | None = None

    @model_validator(mode="after")
    def _consistent(self) -> SyncStatusRequest:
        for count, files in (("failed", "failedFiles"), ("skipped", "skippedFiles")):
            listed = len(getattr(self, files))
            total = getattr(self, count)
            if total is None:
                setattr(self, count, listed)
            elif total < listed:
                raise ValueError(f"{count} is {total} but {files} lists {listed} files; {count} is the full count")
        if self.phase == "ok" and self.failed:
            raise ValueError(f"phase is ok but {self.failed} files failed; report phase partial")
        return self

    @property
    def synced_at(self) -> str:
        return rfc3339(self.syncedAt)

    @property
    def next_sync_at(self) -> str | None:
        return rfc3339(self.nextSyncAt) if self.nextSyncAt is not None else None

    @property
    def last_success_at(self) -> str | None:
        return rfc3339(self.lastSuccessAt) if self.lastSuccessAt is not None else None


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
    failedFiles: list[FileIssueInfo]
    skippedFiles: list[FileIssueInfo]
    syncedAt: str
    nextSyncAt: str | None
    message: str | None
    lastSuccessAt: str | None = None
    freshness: FreshnessInfo | None = None


class SyncStatusResponse(Body):
    sourceIdentifier: str
    stored: bool  # false: a report with a later syncedAt is already stored, and stays
    sync: SyncStatusInfo


class SourceInfo(Body):
    sourceIdentifier: str
    documents: int
    chunks: int
    lastIngestedAt: str | None
    sync: SyncStatusInfo | None = None


class SourceList(Body):
    sources: list[SourceInfo]


class SourceStatusInfo(Body):
    """One source's counts: what the operator compares with what it synced (drift)."""

    sourceIdentifier: str
    documents: int
    chunks: int
    incompleteDocuments: int
    lastIngestedAt: str | None
    collectionEpoch: str
    sync: SyncStatusInfo | None = None
