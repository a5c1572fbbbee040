"""The KnowledgeSource's spec and status as typed models: crds/knowledgesources.yaml in Python.

Attribute names are snake_case, the API's keys camelCase (`alias_generator=to_camel`).
tests/operator/kube/test_crd.py holds every model here against the CRD schema, in both directions.
The spec model checks types and the CRD's defaults; the rules git and the sync engine share
(URL, ref, globs, metadata, schedule) are checked by source.parse_source on the typed values.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, StrictInt, ValidationError
from pydantic.alias_generators import to_camel

from kboperator.errors import InvalidSpecError
from kboperator.models import DEFAULT_MAX_FILE_SIZE, DEFAULT_PATHS, DEFAULT_REF
from kboperator.schedule import format_time, parse_time

DEFAULT_SCHEDULE = "@every 1h"


class Phase(enum.StrEnum):
    """Where a source is in its lifecycle (status.phase)."""

    PENDING = "Pending"
    SYNCING = "Syncing"
    SYNCED = "Synced"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


def _time(value: Any) -> datetime.datetime | None:
    # To the second, as written (format_time); an unreadable value reads as absent, as parse_time does.
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC).replace(microsecond=0)
    return parse_time(value) if isinstance(value, str) else None


def _written(value: datetime.datetime | None) -> str | None:
    return None if value is None else format_time(value)


#: An RFC 3339 time in status, to the second with a Z, as Kubernetes writes times.
Time = Annotated[datetime.datetime | None, BeforeValidator(_time), PlainSerializer(_written)]


class _Camel(BaseModel):
    # validate_assignment: a time assigned by the writer is cut to the second, as it reads back.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, validate_assignment=True)

    def patch(self) -> dict[str, Any]:
        """The fields set on this object, as API JSON: a None removes the field in a merge patch."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class Freshness(_Camel):
    """status.freshness: how fresh the index is, as measured by the operator."""

    remote_commit: str | None = None
    remote_commit_seen_time: Time = None
    lag_seconds: float | None = None
    bound_seconds: int | None = None


class LastSync(_Camel):
    """status.lastSync: the counts of one sync attempt, and its duration."""

    commit: str | None = None
    full: bool | None = None
    added: int | None = None
    modified: int | None = None
    deleted: int | None = None
    renamed: int | None = None
    unchanged: int | None = None
    skipped: int | None = None
    failed: int | None = None
    duration_seconds: float | None = None
    drift: str | None = None


class JudgedQuality(_Camel):
    """status.quality: the judged questions (.kb/questions.yaml) of the last commit synced, asked after its sync."""

    commit: str | None = None
    measured_time: Time = None
    questions: int | None = None
    hit_at_1: float | None = None
    hit_at_5: float | None = None
    facts_share: float | None = None
    failed: int | None = None
    #: The first failed questions' texts (status stays small: the service's sources page lists more).
    failed_questions: list[str] | None = None
    error: str | None = None


class SyncProgress(_Camel):
    """status.progress: how far the running sync is; absent when none runs."""

    done: int | None = None
    total: int | None = None
    started_at: Time = None
    #: What `kubectl get` shows: `25/126`, or `fetching`/`reading` before the work is known.
    summary: str | None = None


class Condition(_Camel):
    """One of status.conditions, shaped by the Kubernetes API conventions (the CRD requires all but
    `observedGeneration`, so the API server never hands back one without them)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    last_transition_time: Time
    observed_generation: int | None = None


class KnowledgeSourceStatus(_Camel):
    """status: what the operator observed and did; `kopf` and any other key are kept as they are.

    Every field is optional: a status is built up step by step, and one written by an older
    version may lack a field. None means absent; setting a field to None removes it (`patch`).
    """

    model_config = ConfigDict(extra="allow")

    phase: Phase | None = None
    observed_generation: int | None = None
    last_synced_commit: str | None = None
    short_commit: str | None = None
    spec_hash: str | None = None
    last_sync_time: Time = None
    last_successful_sync_time: Time = None
    last_full_sync_time: Time = None
    next_sync_time: Time = None
    consecutive_failures: int | None = None
    last_handled_sync_request: str | None = None
    webhook_path: str | None = None
    freshness: Freshness | None = None
    progress: SyncProgress | None = None
    quality: JudgedQuality | None = None
    document_count: int | None = None
    expected_document_count: int | None = None
    collection_epoch: str | None = None
    last_sync: LastSync | None = None
    skipped_files: list[dict[str, str]] | None = None
    skipped_files_omitted: int | None = None
    failed_files: list[dict[str, str]] | None = None
    conditions: list[Condition] | None = None

    def condition(self, type_: str) -> Condition | None:
        """The condition of this type, if any."""
        return next((c for c in self.conditions or () if c.type == type_), None)

    def dump(self) -> dict[str, Any]:
        """The whole status as API JSON, absent fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class SecretRef(_Camel):
    """A Secret in the source's own namespace."""

    name: str


class SearchSecretRef(SecretRef):
    """spec.searchService.secretRef; `key` is deprecated and may only be `token`."""

    key: str | None = None


class RepositorySpec(_Camel):
    """spec.repository: where the documents come from."""

    url: str = Field(min_length=1)
    ref: str = DEFAULT_REF
    secret_ref: SecretRef | None = None


class SearchServiceSpec(_Camel):
    """spec.searchService: this source's own search service, instead of the operator's default."""

    url: str | None = None
    secret_ref: SearchSecretRef | None = None


class WebhookSpec(_Camel):
    """spec.webhook: push webhooks from the git host."""

    secret_ref: SecretRef | None = None


class KnowledgeSourceSpec(_Camel):
    """spec, with the CRD's defaults. `parse` turns a refusal into an InvalidSpecError."""

    repository: RepositorySpec
    paths: list[str] = Field(default_factory=lambda: list(DEFAULT_PATHS))
    exclude: list[str] = Field(default_factory=list)
    max_file_size_bytes: StrictInt = Field(default=DEFAULT_MAX_FILE_SIZE, ge=1)
    version_pattern: str | None = None
    path_weights: dict[str, float] = Field(default_factory=dict)
    schedule: str = DEFAULT_SCHEDULE
    suspend: bool = False
    metadata: dict[str, str] = Field(default_factory=dict)
    deletion_policy: Literal["Delete", "Retain"] = "Delete"
    search_service: SearchServiceSpec | None = None
    webhook: WebhookSpec | None = None
    freshness_bound_seconds: int | None = None
    #: What drift found between syncs leads to (kube/statemachine.py): a re-sync, a condition only, or no check.
    drift_policy: Literal["Auto", "Manual", "Ignore"] = "Auto"

    @classmethod
    def parse(cls, spec: Mapping[str, Any]) -> KnowledgeSourceSpec:
        """The typed spec; an empty value (null, "", [], {}) is an absent one and takes the default."""
        try:
            return cls.model_validate(_present(spec))
        except ValidationError as exc:
            raise InvalidSpecError(_refusal(exc.errors()[0])) from None


def _present(node: Mapping[str, Any]) -> dict[str, Any]:
    # metadata's values are the user's: an empty one is kept.
    kept = {}
    for key, value in node.items():
        if isinstance(value, Mapping) and key != "metadata":
            value = _present(value)
        if value is not None and not (isinstance(value, str | list | dict) and not value):
            kept[key] = value
    return kept


def _refusal(error: Mapping[str, Any]) -> str:
    # Never the input of a URL field: it may hold a credential.
    where, value = tuple(error["loc"]), error.get("input")
    if where[:1] == ("repository",) and where[1:2] in ((), ("url",)):
        return "spec.repository.url is required"
    if where == ("maxFileSizeBytes",):
        return f"spec.maxFileSizeBytes must be a positive integer, not {value!r}"
    if where == ("deletionPolicy",):
        return f"spec.deletionPolicy must be Delete or Retain, not {value!r}"
    if where == ("driftPolicy",):
        return f"spec.driftPolicy must be Auto, Manual or Ignore, not {value!r}"
    return f"spec.{'.'.join(map(str, where))}: {error['msg']}"
