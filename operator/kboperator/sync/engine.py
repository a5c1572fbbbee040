"""The sync engine: makes the service's documents for a source equal the repository's files.

Before anything is fetched, a sync that has a last synced commit asks the remote with `git
ls-remote` where the ref points: when it is still that commit (and the service shows no drift),
the sync ends there, with `SyncResult.fetched` False. A push costs one fetch; no push costs one
ls-remote. Sources of the same URL, ref and credentials share a clone (git.sharing): the head
ls-remote saw is passed on, and a clone that another source already fetched it into is read as is.

A *full reconcile* (first sync, force_full, or a last commit that is not in the new head's
history: force-push, other ref) compares the documents wanted at head with the service's
listing for the source: it PUTs what is missing or different (checksum or metadata other than
`commit`) and DELETEs what should not be there. An *incremental* sync diffs the last synced
commit against head with rename detection and applies exactly those changes; when a folder
became or stopped being a versioned copy in between (sync.versions: `v1.16-docs/` beside
`docs/`), it is a full reconcile instead, as the files the diff does not touch change version.

Mass-deletion guard: a full reconcile refuses (MassDeletionRefusedError) when head yields no
documents while the service still holds some for this source *and* the tree at head is not
empty: the repository has files, yet none became a document, which is what a glob typo, a
wrong ref or a size limit that skips everything look like. A tree with no files at all is the
repository's truth (everything was deleted) and is mirrored. Incremental syncs never trigger
the guard: every deletion they make is a change recorded in a commit.

Only the caller advances its last synced commit, and only when `SyncResult.ok`. After a spec
change that alters the document set (`SyncSpec.document_set_key()` differs), the caller passes
`force_full=True` (or no last commit): only a full reconcile removes the orphans.

Drift (drift.py): before an incremental sync, the source's counts and the collection epoch are
read from the service and compared with the caller's `Baseline` (what the last successful sync
left: `SyncResult.baseline`); when they disagree the sync becomes a full reconcile and
`SyncResult.drift` says why. A service too old to answer that endpoint is synced as before.

A document the service refuses for good (DocumentRejectedError: 409, 413, 422) is a *skip*,
listed with the service's code, not a failure: it does not hold the commit back, and the file
is tried again when it changes (it is in the next diff) and on every full reconcile. After a
413 the service's older copy, if any, is deleted: the file is not in the index, as for a file
over the size limit of the spec. After a 422 it stays (the cause may be the metadata, not the
file); after a 409 there is no copy of ours. Only failures that may pass (429, 5xx, network,
timeouts; other 4xx, which say the URL is not a v1 search service) hold the commit back.

When the service keeps failing (`give_up_after` documents in a row exhausted their retries),
the remaining documents are reported failed without being attempted.

Judged questions (sync.questions, sync.quality): a sync that fetched a head holding
`.kb/questions.yaml` asks them of the service once its writes are done, and its result carries
the figures (`SyncResult.quality`; a refused file is an error there, never a failed sync). A sync
that fetched nothing asks nothing: the figures of its commit stand (`judge` asks them on demand).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace

from kboperator.errors import (
    DocumentRejectedError,
    MassDeletionRefusedError,
    QuestionsError,
    ServiceRejectedError,
    ServiceUnavailableError,
    SyncError,
)
from kboperator.git.repo import Checkout, RepoCache
from kboperator.models import Baseline, FileIssue, Freshness, Quality, SyncReport, SyncResult, SyncSpec
from kboperator.searchclient import ListedDocument, SearchClient, SourceStats
from kboperator.sync.documents import Document, DocumentReader, same_metadata, valid_path
from kboperator.sync.drift import drift_reason
from kboperator.sync.prepared import PreparedSync
from kboperator.sync.progress import Action, DocumentDone, Outcome, Phase, Planned, Progress, ignore
from kboperator.sync.quality import evaluate, read_questions
from kboperator.sync.questions import QUESTIONS_PATH, QuestionSet

log = logging.getLogger(__name__)

URI_OWNED_BY_OTHER_SOURCE = "URI_OWNED_BY_OTHER_SOURCE"
OWNED_ELSEWHERE = (
    "409 URI_OWNED_BY_OTHER_SOURCE: another source already holds this document's URI; "
    "it stays skipped until that source lets go of it"
)


@dataclass
class _Plan:
    """What one sync will send, and the counts it already knows."""

    full: bool
    puts: dict[str, Document] = field(default_factory=dict)  # by URI
    deletes: dict[str, str] = field(default_factory=dict)  # URI -> path, for failure reports
    renamed_from: dict[str, str] = field(default_factory=dict)  # new URI -> old URI
    counted_deletes: set[str] = field(default_factory=set)  # URIs that really held a document
    unchanged: int = 0
    skipped: list[FileIssue] = field(default_factory=list)


@dataclass
class _Tally:
    """What the service answered, and a breaker that stops hammering a service that is down."""

    give_up_after: int
    added: int = 0
    modified: int = 0
    deleted: int = 0
    renamed: int = 0
    unchanged: int = 0
    failed: list[FileIssue] = field(default_factory=list)
    rejected: list[FileIssue] = field(default_factory=list)
    unavailable_in_a_row: int = 0

    @property
    def service_down(self) -> bool:
        # Each failure already went through the client's retries: a few in a row means an
        # outage, and waiting out every remaining document's backoff would only delay the retry.
        return self.unavailable_in_a_row >= self.give_up_after

    def record(self, path: str, action: str, exc: Exception | None) -> FileIssue | None:
        """Count a request's outcome; the failure it added to `failed`, None when it succeeded."""
        if exc is None:
            self.unavailable_in_a_row = 0
            return None
        if isinstance(exc, ServiceUnavailableError):
            self.unavailable_in_a_row += 1
        else:
            self.unavailable_in_a_row = 0
        return self.fail(FileIssue(path, f"not {action}: {exc}"))

    def reject(self, path: str, action: str, exc: DocumentRejectedError, note: str = "") -> FileIssue:
        """The service refused this document for good: a skip with its code, not a failure."""
        self.unavailable_in_a_row = 0  # it answered
        # This text reaches the source's status and events, which its team reads: for a URI another
        # source holds it is ours, never the service's, so no service version can name that source.
        why = OWNED_ELSEWHERE if exc.code == URI_OWNED_BY_OTHER_SOURCE else str(exc)
        issue = FileIssue(path, f"not {action}, refused by the search service: {why}{note}", exc.code)
        self.rejected.append(issue)
        return issue

    def skip(self, path: str, action: str) -> FileIssue:
        return self.fail(FileIssue(path, f"not {action}: the search service is unavailable, not attempted"))

    def fail(self, issue: FileIssue) -> FileIssue:
        self.failed.append(issue)
        return issue


class SyncEngine:
    """Syncs sources through one SearchClient and one RepoCache; safe to share across sources."""

    def __init__(self, client: SearchClient, git: RepoCache, *, concurrency: int = 4, give_up_after: int = 3) -> None:
        if concurrency < 1 or give_up_after < 1:
            raise ValueError("concurrency and give_up_after must be at least 1")
        self.client = client
        self.git = git
        self.concurrency = concurrency
        self.give_up_after = give_up_after
        self._told_no_stats = False
        self._told_no_status = False

    async def sync(
        self,
        prepared: PreparedSync,
        last_commit: str | None,
        *,
        force_full: bool = False,
        baseline: Baseline | None = None,
        progress: Progress = ignore,
    ) -> SyncResult:
        """Sync one source, prepared once by its caller (sync.prepared.prepare). Raises SyncError
        subclasses for whole-sync failures (see errors.py).

        `baseline`: what the last successful sync left (its result's `baseline`), for the drift check.
        `progress`: called with each step and each finished document (sync.progress).
        """
        started = time.monotonic()
        spec, path_filter = prepared.spec, prepared.filter
        remote: str | None = None  # the head ls-remote saw: a shared clone that holds it is not fetched again
        if last_commit and not force_full:
            remote = await asyncio.to_thread(self.git.remote_head, spec.source_id, prepared.repo)
            unchanged = await self._unchanged(spec, last_commit, remote, baseline or Baseline(), started)
            if unchanged is not None:
                return unchanged
        # Without a last commit (or when forced), the sync is a full reconcile: no history is needed.
        since = None if force_full else last_commit  # an incremental sync's starting commit
        # Drift is decided before the fetch, so that a partial clone fetches what a full reconcile reads.
        before = await self._stats(spec.source_id)
        drift = drift_reason(before, baseline or Baseline()) if since else None
        if drift:
            log.warning("source %s: drift detected, full reconcile: %s", spec.source_id, drift)
            since = None
        shallow = force_full or not last_commit
        progress(Phase(spec.source_id, "fetching"))
        checkout = await asyncio.to_thread(
            functools.partial(
                self.git.open, spec.source_id, prepared.repo, shallow=shallow,
                wanted=_with_questions(path_filter.matches), since=since, expected=remote,
            )
        )  # fmt: skip
        try:
            progress(Phase(spec.source_id, "reading"))
            questions = await asyncio.to_thread(read_questions, checkout)
            reader = DocumentReader(spec, checkout, path_filter, prepared.version, prepared.weights)
            if since and not await asyncio.to_thread(checkout.is_ancestor, since):
                log.info("source %s: commit %s is not in the history of %s; full reconcile",
                         spec.source_id, since, checkout.head)  # fmt: skip
                since = None
            moved = bool(since) and await asyncio.to_thread(reader.versions_moved_since, since or "")
            if moved:  # the files the diff does not touch may have another version now
                log.info("source %s: versioned folders changed since %s; full reconcile", spec.source_id, since)
                since = None
            if since:
                plan = await asyncio.to_thread(_incremental_plan, reader, checkout, since)
            else:
                listing = await self.client.list_documents(spec.source_id)
                plan = await asyncio.to_thread(_full_plan, reader, checkout, listing)
        finally:
            await asyncio.to_thread(checkout.close)
        total = len(plan.puts) + len(plan.deletes)
        progress(Planned(spec.source_id, plan.full, total, plan.unchanged, len(plan.skipped)))
        for issue in plan.skipped:
            progress(DocumentDone(spec.source_id, issue.path, "read", "skipped", issue.reason, issue.code))
        tally = await self._apply(plan, spec.source_id, progress)
        after = await self._stats(spec.source_id)
        documents = after.documents if after else await self.client.source_document_count(spec.source_id)
        result = SyncResult(
            commit=checkout.head, full=plan.full, added=tally.added, modified=tally.modified,
            deleted=tally.deleted, renamed=tally.renamed, unchanged=plan.unchanged + tally.unchanged,
            skipped=sorted(plan.skipped + tally.rejected, key=lambda issue: issue.path),
            failed=sorted(tally.failed, key=lambda issue: issue.path),
            documents=documents, duration_s=time.monotonic() - started,
            # The epoch read *before* the writes: if the collection was re-created meanwhile,
            # the next sync sees another epoch and reconciles fully.
            baseline=Baseline(epoch=before.epoch if before else None, documents=documents), drift=drift,
        )  # fmt: skip
        if questions is not None:
            result = replace(result, quality=await self._judge(spec.source_id, questions))
        log.info(
            "source %s synced to %s (%s): %d added, %d modified, %d deleted, %d renamed, %d unchanged, "
            "%d skipped (%d refused by the service), %d failed; %d documents in %.2fs",
            spec.source_id, result.commit[:12], "full" if result.full else "incremental", result.added,
            result.modified, result.deleted, result.renamed, result.unchanged, len(result.skipped),
            len(result.rejected), len(result.failed), result.documents, result.duration_s,
        )  # fmt: skip
        return result

    async def judge(self, prepared: PreparedSync, commit: str) -> Quality | None:
        """Ask the judged questions of `commit` (a synced head the cache holds: nothing is fetched
        then) of the service; None when that commit has no questions file."""
        checkout = await asyncio.to_thread(
            functools.partial(
                self.git.open, prepared.spec.source_id, prepared.repo,
                wanted=_with_questions(prepared.filter.matches), expected=commit,
            )
        )  # fmt: skip
        try:
            questions = await asyncio.to_thread(read_questions, checkout)
        finally:
            await asyncio.to_thread(checkout.close)
        return None if questions is None else await self._judge(prepared.spec.source_id, questions)

    async def _judge(self, source_id: str, questions: QuestionSet | QuestionsError) -> Quality:
        quality = await evaluate(self.client, source_id, questions)
        if quality.error is None:
            log.info(
                "source %s: %d judged questions, hit@1 %s, hit@5 %s, facts held %s", source_id, quality.questions,
                quality.hit_at_1, quality.hit_at_5, quality.facts_share,
            )  # fmt: skip
        else:
            log.warning("source %s: no quality figures: %s", source_id, quality.error)
        return quality

    async def _unchanged(
        self, spec: SyncSpec, last_commit: str, remote: str | None, baseline: Baseline, started: float
    ) -> SyncResult | None:
        """The result of a sync with nothing to do, when `git ls-remote` showed the ref (`remote`)
        still at `last_commit` and the service shows no drift; None when a real sync is needed."""
        if remote != last_commit:
            return None
        before = await self._stats(spec.source_id)
        if drift_reason(before, baseline):
            return None  # the sync that follows finds the same drift and says so
        documents = before.documents if before else await self.client.source_document_count(spec.source_id)
        log.info("source %s: %s still at %s, nothing fetched", spec.source_id, spec.repo.ref, last_commit[:12])
        return SyncResult(
            commit=last_commit, full=False, added=0, modified=0, deleted=0, renamed=0, unchanged=0, skipped=[],
            failed=[], documents=documents, duration_s=time.monotonic() - started,
            baseline=Baseline(epoch=before.epoch if before else baseline.epoch, documents=documents), fetched=False,
        )  # fmt: skip

    async def report(
        self,
        source_id: str,
        result: SyncResult | None,
        error: Exception | None,
        *,
        synced_at: str,
        next_sync_at: str | None = None,
        last_success_at: str | None = None,
        freshness: Freshness | None = None,
    ) -> bool:
        """Tell the search service how a sync ended (its sources page shows it); True when it took it.

        `last_success_at` and `freshness`: how fresh the source is (see models.SyncReport).
        Never raises: a report that fails is logged, and the next sync reports again.
        """
        report = SyncReport.of(
            result, error, synced_at=synced_at, next_sync_at=next_sync_at,
            last_success_at=last_success_at, freshness=freshness,
        )  # fmt: skip
        try:
            taken = await self.client.report_sync(source_id, report)
        except SyncError as exc:  # the sync's own outcome stands, whatever happens to its report
            log.warning("source %s: could not report the sync's outcome to the search service: %s", source_id, exc)
            return False
        if not taken and not self._told_no_status:
            self._told_no_status = True
            log.info("the search service at %s takes no sync status (an older version)", self.client.base_url)
        return taken

    async def drift(self, source_id: str, baseline: Baseline) -> str | None:
        """Why the service no longer holds what the last sync left (see drift.py); one GET, for the
        check a Kubernetes source makes between syncs. None: no drift, or the service cannot tell."""
        return drift_reason(await self._stats(source_id), baseline)

    async def _stats(self, source_id: str) -> SourceStats | None:
        stats = await self.client.source_stats(source_id)
        if stats is None and not self._told_no_stats:
            self._told_no_stats = True
            log.warning(
                "the search service at %s has no GET /api/v1/sources/{id} (an older version): drift is not "
                "detected until it is upgraded, only by the periodic full reconcile", self.client.base_url,
            )  # fmt: skip
        return stats

    async def _apply(self, plan: _Plan, source_id: str, progress: Progress) -> _Tally:
        tally = _Tally(give_up_after=self.give_up_after)
        renamed_old = set(plan.renamed_from.values())

        def done(path: str, action: Action, outcome: Outcome, issue: FileIssue | None = None) -> None:
            reason, code = (issue.reason, issue.code) if issue else (None, None)
            progress(DocumentDone(source_id, path, action, outcome, reason, code))

        async def put(doc: Document) -> None:
            outcome, issue = await ingest(doc)
            done(doc.path, "ingest", outcome, issue)

        async def ingest(doc: Document) -> tuple[Outcome, FileIssue | None]:
            if tally.service_down:
                return "failed", tally.skip(doc.path, "ingested")
            try:
                encoding = doc.encoding if doc.encoding != "utf-8" else None
                answer = await self.client.put_document(
                    doc.uri, doc.content or "", doc.metadata, content_encoding=encoding
                )
            except DocumentRejectedError as exc:
                if exc.status == 413:  # the file outgrew the service: its older version goes too
                    issue = tally.reject(doc.path, "ingested", exc)
                    failed = await drop_older(doc)
                    return ("failed", failed) if failed else ("skipped", issue)
                # 409: another source's URI, no copy of ours. 422: maybe the metadata; keep what is there.
                note = "" if exc.status == 409 else "; an earlier version stays"
                return "skipped", tally.reject(doc.path, "ingested", exc, note)
            except (ServiceRejectedError, ServiceUnavailableError) as exc:
                return "failed", tally.record(doc.path, "ingested", exc)
            tally.record(doc.path, "ingested", None)
            if answer.checksum != doc.checksum:  # the service stored something else: not a success
                mismatch = f"checksum mismatch: sent {doc.checksum}, the service holds {answer.checksum}"
                return "failed", tally.fail(FileIssue(doc.path, mismatch))
            if doc.uri in plan.renamed_from:
                tally.renamed += 1
                return "renamed", None
            if answer.status == "created":
                tally.added += 1
                return "added", None
            if answer.status == "updated":
                tally.modified += 1
                return "modified", None
            tally.unchanged += 1
            return "unchanged", None

        async def drop_older(doc: Document) -> FileIssue | None:
            try:
                chunks = await self.client.delete_document(doc.uri, source_id)
            except (ServiceRejectedError, ServiceUnavailableError) as exc:
                return tally.record(doc.path, "removed", exc)
            if chunks:
                tally.deleted += 1
            return None

        async def delete(uri: str, path: str) -> None:
            outcome, issue = await remove(uri, path)
            done(path, "delete", outcome, issue)

        async def remove(uri: str, path: str) -> tuple[Outcome, FileIssue | None]:
            if tally.service_down:
                return "failed", tally.skip(path, "deleted")
            try:
                # Only our own copy: a document another source owns is not ours to remove.
                await self.client.delete_document(uri, source_id)
            except DocumentRejectedError as exc:  # a URI the service cannot hold: nothing to delete
                return "skipped", tally.reject(path, "deleted", exc)
            except (ServiceRejectedError, ServiceUnavailableError) as exc:
                return "failed", tally.record(path, "deleted", exc)
            tally.record(path, "deleted", None)
            if uri in plan.counted_deletes and uri not in renamed_old:
                tally.deleted += 1
                return "deleted", None
            return "absent", None

        # New documents first, then removals: a rename never leaves a window with neither URI.
        await _bounded([functools.partial(put, doc) for doc in plan.puts.values()], self.concurrency)
        await _bounded([functools.partial(delete, uri, path) for uri, path in plan.deletes.items()], self.concurrency)
        return tally


def _with_questions(wanted: Callable[[str], bool]) -> Callable[[str], bool]:
    """The paths a partial clone fetches: the documents', and the judged questions."""
    return lambda path: path == QUESTIONS_PATH or wanted(path)


async def _bounded(jobs: Iterable[Callable[[], Awaitable[None]]], concurrency: int) -> None:
    """Run jobs with at most `concurrency` at once; the first unexpected error cancels the rest."""
    queue = iter(jobs)

    async def worker() -> None:
        for job in queue:  # one shared iterator: each job is taken by exactly one worker
            await job()

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _full_plan(reader: DocumentReader, checkout: Checkout, listing: dict[str, ListedDocument]) -> _Plan:
    """Desired documents at head against the service's listing (blocking)."""
    plan = _Plan(full=True)
    entries = checkout.list_files()
    reader.know_tree(entries)
    wanted: set[str] = set()
    for entry in entries:
        if not reader.matches(entry):
            continue
        outcome = reader.read(entry)
        if isinstance(outcome, FileIssue):
            plan.skipped.append(outcome)
            continue
        wanted.add(outcome.uri)
        listed = listing.get(outcome.uri)
        if listed and listed.checksum == outcome.checksum and same_metadata(listed.metadata, outcome.metadata):
            plan.unchanged += 1
        else:
            plan.puts[outcome.uri] = outcome
    extra = {uri: doc for uri, doc in listing.items() if uri not in wanted}
    if not wanted and extra and entries:
        raise MassDeletionRefusedError(
            f"refusing to delete all {len(extra)} documents of source {reader.spec.source_id!r}: "
            f"commit {checkout.head[:12]} of {reader.spec.repo.ref!r} has {len(entries)} files but none "
            f"became a document (include={list(reader.filter.include)}, exclude={list(reader.filter.exclude)}, "
            f"{len(plan.skipped)} skipped). Fix the spec or ref; delete the source to remove its documents."
        )
    for uri, doc in extra.items():
        path = doc.metadata.get("path")
        plan.deletes[uri] = path if isinstance(path, str) else uri
        plan.counted_deletes.add(uri)
    return plan


def _incremental_plan(reader: DocumentReader, checkout: Checkout, last_commit: str) -> _Plan:
    """The diff from the last synced commit to head, as puts and deletes (blocking)."""
    plan = _Plan(full=False)
    for change in checkout.diff(last_commit):
        new_doc: Document | None = None
        if change.new is not None and reader.matches(change.new):
            outcome = reader.read(change.new)
            if isinstance(outcome, FileIssue):
                plan.skipped.append(outcome)
            else:
                new_doc = plan.puts[outcome.uri] = outcome
        old = change.old
        if old is None or not reader.matches(old) or not valid_path(old.path):
            continue
        old_uri = reader.uri(old.path)
        if new_doc is not None and new_doc.uri == old_uri:
            continue  # modified in place: the PUT replaces it
        # Always delete (idempotent), but count it only if the old file really was a document.
        plan.deletes[old_uri] = old.path
        was_document = isinstance(reader.read(old, keep_content=False), Document)
        if was_document:
            plan.counted_deletes.add(old_uri)
            if new_doc is not None and change.status == "R":
                plan.renamed_from[new_doc.uri] = old_uri
    for uri in plan.puts:
        plan.deletes.pop(uri, None)  # a path deleted here and re-added elsewhere in the diff
    return plan
