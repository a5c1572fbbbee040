"""The sync engine: makes the service's documents for a source equal the repository's files.

A *full reconcile* (first sync, force_full, or a last commit that is not in the new head's
history: force-push, other ref) compares the documents wanted at head with the service's
listing for the source: it PUTs what is missing or different (checksum or metadata other than
`commit`) and DELETEs what should not be there. An *incremental* sync diffs the last synced
commit against head with rename detection and applies exactly those changes.

Mass-deletion guard: a full reconcile refuses (MassDeletionRefusedError) when head yields no
documents while the service still holds some for this source *and* the tree at head is not
empty: the repository has files, yet none became a document, which is what a glob typo, a
wrong ref or a size limit that skips everything look like. A tree with no files at all is the
repository's truth (everything was deleted) and is mirrored. Incremental syncs never trigger
the guard: every deletion they make is a change recorded in a commit.

Only the caller advances its last synced commit, and only when `SyncResult.ok`. After a spec
change that alters the document set (`SyncSpec.document_set_key()` differs), the caller passes
`force_full=True` (or no last commit): only a full reconcile removes the orphans.

When the service keeps failing (`give_up_after` documents in a row exhausted their retries),
the remaining documents are reported failed without being attempted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from kboperator.client import ListedDocument, SearchClient
from kboperator.documents import Document, DocumentReader, same_metadata, valid_path, validate_spec
from kboperator.errors import MassDeletionRefusedError, ServiceRejectedError, ServiceUnavailableError
from kboperator.gitrepo import Checkout, RepoCache
from kboperator.models import FileIssue, SyncResult, SyncSpec

log = logging.getLogger(__name__)


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
    unavailable_in_a_row: int = 0

    @property
    def service_down(self) -> bool:
        # Each failure already went through the client's retries: a few in a row means an
        # outage, and waiting out every remaining document's backoff would only delay the retry.
        return self.unavailable_in_a_row >= self.give_up_after

    def record(self, path: str, action: str, exc: Exception | None) -> bool:
        """Count a request's outcome; False when it failed (and was added to `failed`)."""
        if exc is None:
            self.unavailable_in_a_row = 0
            return True
        if isinstance(exc, ServiceUnavailableError):
            self.unavailable_in_a_row += 1
        else:
            self.unavailable_in_a_row = 0
        self.failed.append(FileIssue(path, f"not {action}: {exc}"))
        return False

    def skip(self, path: str, action: str) -> None:
        self.failed.append(FileIssue(path, f"not {action}: the search service is unavailable, not attempted"))


class SyncEngine:
    """Syncs sources through one SearchClient and one RepoCache; safe to share across sources."""

    def __init__(self, client: SearchClient, git: RepoCache, *, concurrency: int = 4, give_up_after: int = 3) -> None:
        if concurrency < 1 or give_up_after < 1:
            raise ValueError("concurrency and give_up_after must be at least 1")
        self.client = client
        self.git = git
        self.concurrency = concurrency
        self.give_up_after = give_up_after

    async def sync(self, spec: SyncSpec, last_commit: str | None, *, force_full: bool = False) -> SyncResult:
        """Sync one source. Raises SyncError subclasses for whole-sync failures (see errors.py)."""
        started = time.monotonic()
        path_filter = validate_spec(spec)
        checkout = await asyncio.to_thread(self.git.open, spec.source_id, spec.repo, allow_local=spec.allow_local)
        try:
            reader = DocumentReader(spec, checkout, path_filter)
            incremental = bool(last_commit) and not force_full
            if incremental:
                incremental = await asyncio.to_thread(checkout.is_ancestor, last_commit)
                if not incremental:
                    log.info("source %s: commit %s is not in the history of %s; full reconcile",
                             spec.source_id, last_commit, checkout.head)  # fmt: skip
            if incremental:
                plan = await asyncio.to_thread(_incremental_plan, reader, checkout, last_commit)
            else:
                listing = await self.client.list_documents(spec.source_id)
                plan = await asyncio.to_thread(_full_plan, reader, checkout, listing)
        finally:
            await asyncio.to_thread(checkout.close)
        tally = await self._apply(plan, spec.source_id)
        documents = await self.client.source_document_count(spec.source_id)
        result = SyncResult(
            commit=checkout.head, full=plan.full, added=tally.added, modified=tally.modified,
            deleted=tally.deleted, renamed=tally.renamed, unchanged=plan.unchanged + tally.unchanged,
            skipped=sorted(plan.skipped, key=lambda issue: issue.path),
            failed=sorted(tally.failed, key=lambda issue: issue.path),
            documents=documents, duration_s=time.monotonic() - started,
        )  # fmt: skip
        log.info(
            "source %s synced to %s (%s): +%d ~%d -%d >%d =%d, %d skipped, %d failed, %d documents in %.2fs",
            spec.source_id, result.commit[:12], "full" if result.full else "incremental", result.added,
            result.modified, result.deleted, result.renamed, result.unchanged, len(result.skipped),
            len(result.failed), result.documents, result.duration_s,
        )  # fmt: skip
        return result

    async def _apply(self, plan: _Plan, source_id: str) -> _Tally:
        tally = _Tally(give_up_after=self.give_up_after)
        renamed_old = set(plan.renamed_from.values())

        async def put(doc: Document) -> None:
            if tally.service_down:
                return tally.skip(doc.path, "ingested")
            try:
                answer = await self.client.put_document(doc.uri, doc.content or "", doc.metadata)
            except (ServiceRejectedError, ServiceUnavailableError) as exc:
                tally.record(doc.path, "ingested", exc)
                return
            tally.record(doc.path, "ingested", None)
            if answer.checksum != doc.checksum:  # the service stored something else: not a success
                mismatch = f"checksum mismatch: sent {doc.checksum}, the service holds {answer.checksum}"
                tally.failed.append(FileIssue(doc.path, mismatch))
            elif doc.uri in plan.renamed_from:
                tally.renamed += 1
            elif answer.status == "created":
                tally.added += 1
            elif answer.status == "updated":
                tally.modified += 1
            else:
                tally.unchanged += 1

        async def delete(uri: str, path: str) -> None:
            if tally.service_down:
                return tally.skip(path, "deleted")
            try:
                # Only our own copy: a document another source owns is not ours to remove.
                await self.client.delete_document(uri, source_id)
            except (ServiceRejectedError, ServiceUnavailableError) as exc:
                tally.record(path, "deleted", exc)
                return
            tally.record(path, "deleted", None)
            if uri in plan.counted_deletes and uri not in renamed_old:
                tally.deleted += 1

        # New documents first, then removals: a rename never leaves a window with neither URI.
        await _bounded([lambda d=doc: put(d) for doc in plan.puts.values()], self.concurrency)
        await _bounded([lambda u=uri, p=path: delete(u, p) for uri, path in plan.deletes.items()], self.concurrency)
        return tally


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
