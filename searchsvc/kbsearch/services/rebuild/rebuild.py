"""Background rebuilds: a shadow collection built from the stored bodies, checked, then swapped in.

When the configured embedder, keyword encoder or chunker differs from what the collection was
built with (or a writer asks, POST /api/v1/reindex), the service goes on serving the collection as
it is, with the embedder that built it, and builds a shadow collection beside it (the store decides
where: store/base.py) from each document's stored text:

1. copy: every live document, in the store's id order, is written to the shadow through a document
   service of its own (chunked and embedded with the configured settings), holding that document's
   lock so a write to it waits; a pause after each keeps searches and writes first;
2. writes that arrive meanwhile are mirrored (the Serving's write hook, services/serving.py): after each live
   write the shadow copies what the live collection now holds; a failed copy is retried before the
   swap;
3. check: services/rebuild/selfcheck.py (a paired test over 100 queries from every source); a shadow
   worse beyond the margin, with confidence, is kept (and kept in step) but not swapped in, unless a
   writer forces it;
4. swap: with writes and searches held back for the moment, the last retries, the sync statuses,
   then the store's atomic swap (pointer file on Edge, alias on a Qdrant server), and one
   `Serving.replace` puts the configured embedder in every service's hands. The old collection is
   deleted by the store.

Resumable: the shadow is a real collection, so after a kill -9 the next start opens it again and the
copy skips every document already there with the same checksum (an "unchanged" write, no embedding).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from kbsearch.aio.runtime import in_thread, store_call
from kbsearch.commands import DocumentWrite
from kbsearch.convert.formats import MARKDOWN
from kbsearch.errors import ConflictError
from kbsearch.metrics import Metrics
from kbsearch.models import INCOMPLETE, CollectionSignature, DocumentChunk, DocumentRecord
from kbsearch.services.access.scope import Caller, SourceScope
from kbsearch.services.documents.reads import join_chunks
from kbsearch.services.documents.repair import repair
from kbsearch.services.documents.service import DocumentService, now
from kbsearch.services.rebuild.selfcheck import DEPTH, CheckResult, build_check_set, self_check
from kbsearch.services.search.insights import InsightsService
from kbsearch.services.search.service import SearchService
from kbsearch.services.serving import Serving, Target
from kbsearch.settings import RebuildSettings
from kbsearch.store import signature as sg
from kbsearch.store.base import VectorStore

__all__ = ["RebuildService", "rebuild_reason"]

log = logging.getLogger(__name__)

RebuildState = Literal["idle", "building", "checking", "refused", "swapping", "failed"]
# The rebuild writes and reads every source, as the service itself.
REBUILDER = Caller("rebuild", True, SourceScope.everything())
PAGE = 128  # live records read per listing call


def rebuild_reason(
    stored: CollectionSignature | None,
    wanted: CollectionSignature,
    stored_chunker: str | None,
    chunker: str,
) -> str | None:
    """Why the collection must be rebuilt for the configured settings, or None."""
    if stored is None:
        return None
    if not sg.compatible(stored, wanted):
        built, configured = sg.describe(stored), sg.describe(wanted)
        return f"the collection was built with [{built}]; the service is configured with [{configured}]"
    if stored_chunker is not None and stored_chunker != chunker:
        return f"the collection was chunked with [{stored_chunker}]; the service is configured with [{chunker}]"
    return None


@dataclass(slots=True)
class _Progress:
    total: int = 0
    done: int = 0
    copied: int = 0  # done in this run (the rest were already in the shadow: a resumed rebuild)
    started: float = field(default_factory=time.monotonic)
    copy_s: float | None = None  # how long the copy took, once done
    check_s: float | None = None

    def rate(self) -> float | None:
        elapsed = (self.copy_s if self.copy_s is not None else time.monotonic() - self.started) or 0.0
        return round(self.done / elapsed, 2) if elapsed > 0 and self.done else None

    def eta_s(self) -> float | None:
        rate = self.rate()
        return round(max(self.total - self.done, 0) / rate, 1) if rate else None


class RebuildService:
    """Builds, checks and swaps in a rebuilt collection; the live DocumentService mirrors into it."""

    def __init__(
        self,
        *,
        serving: Serving,
        documents: DocumentService,
        search: SearchService,
        insights: InsightsService | None,
        metrics: Metrics,
        target: Target,
        shadow_documents: Callable[[VectorStore], DocumentService],
        shadow_search: Callable[[VectorStore], SearchService],
        settings: RebuildSettings,
    ) -> None:
        self.serving = serving  # the live collection's; its swap is one `replace`, its write hook our mirror
        self.documents = documents
        self.search = search
        self.insights = insights
        self.metrics = metrics
        self.target = target
        # The services over a shadow collection, made by kbsearch.factory: a writer and a search.
        self.shadow_documents = shadow_documents
        self.shadow_search = shadow_search
        self.settings = settings

        self.state: RebuildState = "idle"
        self.reason: str | None = None
        self.message: str | None = None
        self.started_at: str | None = None
        self.finished_at: str | None = None
        self.check: CheckResult | None = None
        self.progress = _Progress()
        self._task: asyncio.Task[None] | None = None
        self._force = asyncio.Event()
        self._shadow: VectorStore | None = None
        self._shadow_docs: DocumentService | None = None
        self._dirty: set[str] = set()
        self._dirty_sources: set[str] = set()

    @property
    def live(self) -> VectorStore:
        return self.serving.store

    @property
    def target_signature(self) -> CollectionSignature:
        return self.target.signature

    # --- control --------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, reason: str) -> bool:
        """Start a rebuild in the background; False when one is under way already."""
        if self.running:
            return False
        self.reason, self.message, self.check = reason, None, None
        self.started_at, self.finished_at = now(), None
        self._force.clear()
        self.progress = _Progress()
        self.state = "building"
        self._task = asyncio.create_task(self._run(), name="rebuild")
        log.info("rebuild started", extra={"reason": reason})
        return True

    def request(self, reason: str) -> bool:
        """A writer's rebuild: started, or False when one is under way; refused while a refused shadow waits."""
        if self.state == "refused":
            raise ConflictError(
                f"a rebuilt collection refused by its self-check is waiting: {self.message} "
                'Send {"forceSwap": true} to swap it in, or change the settings back and restart.',
                code="REBUILD_REFUSED_PENDING",
                details={
                    "state": self.state,
                    "resolve": "forceSwap",
                    "check": self.check.as_dict() if self.check else None,
                },
            )
        return self.start(reason)

    def force_swap(self) -> None:
        """Swap a refused shadow in despite its self-check (a writer's decision)."""
        if self.state != "refused":
            raise ConflictError(
                f"no rebuilt collection is waiting for a forced swap (the rebuild is {self.state})",
                code="NOTHING_TO_SWAP",
            )
        self._force.set()

    async def stop(self) -> None:
        """Stop a rebuild under way; its shadow stays for the next start to resume."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        await self._detach(drop=False)

    # --- the mirror (services/serving.py WriteMirror) ----------------------------------------------

    async def changed(self, uri: str) -> None:
        if self._shadow_docs is None:
            return
        try:
            await self._copy(uri)
        except Exception:
            log.warning("a write could not be mirrored to the rebuild; retried before the swap", exc_info=True)
            self._dirty.add(uri)

    async def source_deleted(self, source_identifier: str) -> None:
        if self._shadow_docs is None:
            return
        try:
            await self._shadow_docs.delete_source(source_identifier, REBUILDER)
        except Exception:
            log.warning("a source delete could not be mirrored; retried before the swap", exc_info=True)
            self._dirty_sources.add(source_identifier)

    # --- the run -----------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            shadow = await in_thread(self.live.open_shadow, self.target_signature)
            self._shadow = shadow
            await in_thread(repair, shadow)  # a write a kill -9 interrupted in the shadow
            # The serving path's converter (its limits, its slots): a PDF or notebook is converted
            # again from its stored bytes, the way it was when it was PUT.
            self._shadow_docs = self.shadow_documents(shadow)
            self.serving.mirror_writes(self)
            await self._copy_all()
            await self._drop_deleted()
            await self._retry_dirty(locked=True)
            self.progress.copy_s = round(time.monotonic() - self.progress.started, 1)
            while True:
                self.state = "checking"
                checking = time.monotonic()
                self.check = await self._self_check()
                self.progress.check_s = round(time.monotonic() - checking, 1)
                if self.check.passed or self._force.is_set():
                    break
                self.state = "refused"
                self.message = refusal(self.check)
                self.metrics.rebuild_swaps.labels("refused").inc()
                log.warning("rebuild refused by its self-check", extra={"check": self.check.as_dict()})
                await self._force.wait()
            forced = not self.check.passed
            self.state = "swapping"
            await self._swap()
            self.metrics.rebuild_swaps.labels("forced" if forced else "swapped").inc()
            self.state, self.finished_at = "idle", now()
            self.message = "swapped in" + (" (forced past a failed self-check)" if forced else "")
            log.info("rebuild finished", extra={"documents": self.progress.done, "forced": forced})
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.state, self.finished_at = "failed", now()
            self.message = f"{type(exc).__name__}: {exc}; the current collection stays; a restart resumes the rebuild"
            log.exception("rebuild failed")
            await self._detach(drop=False)
        finally:
            self._publish()

    async def _copy_all(self) -> None:
        self.progress.total = (await store_call(self.live.count))[0]
        self._publish()
        cursor: str | None = None
        while True:
            records, cursor = await store_call(
                functools.partial(
                    self.live.list_documents, source_identifier=None, uri_prefix=None, limit=PAGE, cursor=cursor
                )
            )
            for record in records:
                async with self.documents.holding(record.uri, record.source_identifier):
                    if await self._copy(record.uri):
                        self.progress.copied += 1
                self.progress.done += 1
                self._publish()
                await asyncio.sleep(self.settings.rebuild_pause_ms / 1000)
            if cursor is None:
                return

    async def _drop_deleted(self) -> None:
        """Documents in the shadow that the live collection no longer has (deleted while we were down)."""
        assert self._shadow is not None and self._shadow_docs is not None
        shadow, cursor = self._shadow, None
        while True:
            records, cursor = await store_call(
                functools.partial(
                    shadow.list_documents, source_identifier=None, uri_prefix=None, limit=PAGE, cursor=cursor
                )
            )
            present = await store_call(self.live.existing_records, [r.uri for r in records])
            for record in records:
                if record.uri not in present:
                    async with self.documents.holding(record.uri, record.source_identifier):
                        await self._copy(record.uri)
            if cursor is None:
                return

    async def _copy(self, uri: str) -> bool:
        """Make the shadow hold what the live collection holds for `uri` (the caller holds its lock).

        True when something was written (an unchanged document costs one read of each side).
        """
        assert self._shadow_docs is not None
        record = await store_call(self.live.get_document, uri)
        if record is None or record.checksum == INCOMPLETE:
            return await self._shadow_docs.delete(uri, None, REBUILDER) > 0
        stored = await store_call(self.live.get_body, uri)
        if stored is not None and stored.checksum == record.checksum:
            # As it was PUT: a PDF's or notebook's bytes are converted again, the same way.
            request = DocumentWrite(
                uri=uri,
                content=stored.content,
                metadata=record.metadata,
                content_type=stored.content_type,
                content_encoding="base64" if stored.content_encoding == "base64" else "utf-8",
            )
        else:
            chunks = await store_call(self.live.document_chunks, uri, 0, record.chunks)
            # Earlier releases read every document as markdown, whatever its URI's extension.
            request = DocumentWrite(
                uri=uri, content=legacy_content(record, chunks), metadata=record.metadata, content_type=MARKDOWN
            )
        response = await self._shadow_docs.put(request, REBUILDER)
        return response.status != "unchanged"

    async def _retry_dirty(self, *, locked: bool) -> None:
        """Copy again what a mirror failed to; `locked`: take each document's lock (no swap pause held)."""
        assert self._shadow_docs is not None
        for source in sorted(self._dirty_sources):
            await self._shadow_docs.delete_source(source, REBUILDER)
            self._dirty_sources.discard(source)
        for uri in sorted(self._dirty):
            if locked:
                record = await store_call(self.live.get_document, uri)
                async with self.documents.holding(uri, record.source_identifier if record else None):
                    await self._copy(uri)
            else:
                await self._copy(uri)
            self._dirty.discard(uri)

    async def _self_check(self) -> CheckResult:
        assert self._shadow is not None
        shadow_search = self.shadow_search(self._shadow)
        settings = self.settings
        check = await build_check_set(
            self.live, self.search, self.insights, REBUILDER, queries=settings.rebuild_check_queries
        )
        return await self_check(self.search, shadow_search, check, REBUILDER, margin=settings.rebuild_check_margin)

    async def _swap(self) -> None:
        """Writes wait from the last copies to the switch; searches only for the switch itself."""
        assert self._shadow is not None
        shadow = self._shadow
        async with self.documents.paused():
            await self._retry_dirty(locked=False)
            for source in await store_call(self.live.source_identifiers):
                status = await store_call(self.live.get_sync_status, source)
                if status is not None:
                    await store_call(shadow.put_sync_status, status)
            await store_call(shadow.mark_chunker, self.serving.chunker.fingerprint)
            self.serving.mirror_writes(None)
            self._shadow, self._shadow_docs = None, None
            staged = await in_thread(self.live.stage_adoption, shadow)
            async with self.serving.exclusive():
                await in_thread(self.live.adopt, staged)
                self.serving.swap_to(self.target)

    async def _detach(self, *, drop: bool) -> None:
        self.serving.mirror_writes(None)
        shadow, self._shadow, self._shadow_docs = self._shadow, None, None
        if shadow is not None:
            try:
                await in_thread(self.live.drop_shadow, shadow) if drop else await in_thread(shadow.close)
            except Exception:
                log.warning("could not close the rebuild's shadow collection", exc_info=True)

    # --- reporting ---------------------------------------------------------------------------

    def _publish(self) -> None:
        self.metrics.rebuild_documents.labels("done").set(self.progress.done)
        self.metrics.rebuild_documents.labels("total").set(self.progress.total)
        self.metrics.rebuild_running.set(1 if self.state in ("building", "checking", "refused", "swapping") else 0)
        self.metrics.rebuild_rate.set(self.progress.rate() or 0.0)

    def status(self) -> dict[str, Any]:
        self._publish()
        return {
            "state": self.state,
            "reason": self.reason,
            "message": self.message,
            "target": {"signature": sg.describe(self.target_signature), "chunker": self.serving.chunker.fingerprint},
            "documents": {"done": self.progress.done, "total": self.progress.total, "copied": self.progress.copied},
            "ratePerSecond": self.progress.rate(),
            "copySeconds": self.progress.copy_s,
            "checkSeconds": self.progress.check_s,
            "etaSeconds": self.progress.eta_s() if self.state == "building" else None,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "check": self.check.as_dict() if self.check is not None else None,
        }


def refusal(check: CheckResult) -> str:
    """Why a shadow was refused, with the figures, and how to resolve it."""
    figures = "; ".join(
        f"{mode} MRR@{DEPTH} {check.modes[mode].current} -> {check.modes[mode].rebuilt} "
        f"(difference {check.modes[mode].difference:+.4f}, upper bound {check.modes[mode].upper:+.4f})"
        for mode in check.worse
    )
    return (
        f"the rebuilt collection is worse than the current one beyond the margin {check.margin} with confidence, "
        f"over {check.queries} queries: {figures}; the current collection stays. "
        'POST /api/v1/reindex with {"forceSwap": true} swaps it in anyway.'
    )


def legacy_content(record: DocumentRecord, chunks: list[DocumentChunk]) -> str:
    """A document written before bodies were kept: its chunks joined, its title as front matter.

    The chunker may have dropped heading-only pieces, and the front matter's other fields are gone;
    the next sync of the source writes the document as it is again.
    """
    text = join_chunks(chunks)
    if record.title:
        return f"---\ntitle: {json.dumps(record.title)}\n---\n{text}"
    return text
