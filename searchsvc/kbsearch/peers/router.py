"""Fan one search out to the peers a caller may reach, and merge their hits with the local ones.

Scope never widens: a caller reaches a peer only if its scope covers every pattern the peer is
declared with (`covers`). A peer it may not reach is not asked and not reported; a peer whose
check failed is skipped and reported `scope-undecided`. The caller's token never leaves this
service: each peer gets its own. A peer that is slow, down or misbehaving is left out of that
response, which names it; its circuit breaker stops asking it for a while after repeated failures.

A peer is not trusted with another store's page: its hit joins another store's hit of the same
page only when the two texts are the same, and then the local copy is the one shown. A peer's
relevance is re-scored by this service before the merge (peers/rescore.py, from SearchService).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal

from kbsearch import tracing
from kbsearch.commands import SearchQuery
from kbsearch.metrics import Metrics
from kbsearch.models import SearchHit
from kbsearch.peers.breaker import STATE_VALUE, CircuitBreaker
from kbsearch.peers.client import FailureReason, PeerClient, PeerFailure
from kbsearch.peers.config import Peer

log = logging.getLogger(__name__)

UnansweredReason = FailureReason | Literal["open-circuit", "scope-undecided"]
_GLOB_CHARS = frozenset("*?[")
EVERYTHING = "*"


@dataclass(frozen=True, slots=True)
class Unanswered:
    name: str
    reason: UnansweredReason


@dataclass(frozen=True, slots=True)
class PeerAnswers:
    hits: list[list[SearchHit]]  # one list per peer that answered, each hit naming its peer
    unanswered: list[Unanswered]


def covers(caller_patterns: Sequence[str], pattern: str) -> bool:
    """Whether a caller with these scope patterns may see every source `pattern` matches.

    Proven three ways only: the caller sees everything (`*`), has the very same pattern, or has
    `prefix/*` (a glob-free prefix) and `pattern` starts with that prefix. Anything else is not covered.
    """
    if not isinstance(pattern, str) or not pattern:
        raise TypeError("a scope pattern must be a non-empty string")
    for mine in caller_patterns:
        if not isinstance(mine, str):
            raise TypeError("a scope pattern must be a string")
        if mine in (EVERYTHING, pattern):
            return True
        if mine.endswith("/*"):
            prefix = mine[:-1]  # "team-a/"
            if not _GLOB_CHARS & set(prefix) and pattern.startswith(prefix):
                return True
    return False


def may_reach(caller_patterns: Sequence[str], peer: Peer) -> bool:
    return all(covers(caller_patterns, p) for p in peer.config.scopes)


def merge(
    local: Sequence[SearchHit], answers: Iterable[Sequence[SearchHit]], limit: int, *, collapse: bool, local_store: str
) -> list[SearchHit]:
    """One list by calibrated relevance (highest first; the local store first on a tie, then the peers in
    file order). The same page with the same text from two stores is one hit naming both (`stores`): the
    local copy if one is local, else the more relevant (the first on a tie); the other's version joins
    `otherVersions`. The same page with another text stands apart: no store's text is shown under
    another's name. When no peer sent a hit, the local hits keep their own order: a reranker's, which
    relevance alone would undo."""
    from_peers = [h for hits in answers for h in hits]
    if not from_peers:
        return [_named(h, local_store) for h in local][:limit]
    merged: dict[tuple[Any, ...], SearchHit] = {}
    for hit in [*(_named(h, local_store) for h in local), *from_peers]:
        page = (hit.uri,) if collapse else (hit.uri, hit.version, hit.chunk_index)
        key = (*page, hit.content)
        kept = merged.get(key)
        if kept is None:
            merged[key] = hit
            continue
        if local_store in kept.stores or (kept.relevance or 0.0) >= (hit.relevance or 0.0):
            better, other = kept, hit  # local hits come first: a local copy is never displaced
        else:
            better, other = hit, kept
        versions = [v for v in [*better.other_versions, other.version, *other.other_versions] if v is not None]
        merged[key] = replace(
            better,
            stores=tuple(dict.fromkeys([*better.stores, *other.stores])),
            other_versions=list(dict.fromkeys(v for v in versions if v != better.version)),
        )
    # sorted() is stable: equal relevance keeps the arrival order (local, then peers in file order).
    return sorted(merged.values(), key=lambda h: -(h.relevance or 0.0))[:limit]


def _state_value(breaker: CircuitBreaker) -> float:
    return STATE_VALUE[breaker.state]


def _named(hit: SearchHit, store: str) -> SearchHit:
    return hit if hit.stores else replace(hit, stores=(store,))


class PeerRouter:
    """The peers of the peers file, each with its breaker; `ask` fans one search out to those in reach."""

    def __init__(
        self,
        peers: list[Peer],
        client: PeerClient,
        metrics: Metrics,
        *,
        timeout_s: float,
        breaker_failures: int,
        breaker_reset_s: float,
    ) -> None:
        self.peers, self.client, self.metrics, self.timeout_s = peers, client, metrics, timeout_s
        self.breakers = {p.name: CircuitBreaker(breaker_failures, breaker_reset_s) for p in peers}
        for breaker_name, breaker in self.breakers.items():  # read at each scrape: open turns half-open by time
            metrics.peer_breaker_state.labels(breaker_name).set_function(partial(_state_value, breaker))

    def budget_s(self, peer: Peer) -> float:
        return peer.config.timeout_seconds or self.timeout_s

    async def ask(
        self, request: SearchQuery, caller_patterns: Sequence[str], allows: Callable[[str | None], bool]
    ) -> PeerAnswers:
        """The peers' hits for this caller. `allows` is the caller's own scope over a sourceIdentifier: a
        peer hit outside it is dropped, so a peer token broader than the peer's declared scopes widens nothing."""
        unanswered: list[Unanswered] = []
        asked: list[Peer] = []
        for peer in self.peers:
            try:
                allowed = may_reach(caller_patterns, peer)
            except Exception:  # noqa: BLE001 - fail closed: a scope that cannot be checked reaches no peer
                log.warning("peer skipped: the caller's scope could not be checked", extra={"peer": peer.name})
                unanswered.append(self._unanswered(peer.name, "scope-undecided"))
                continue
            if not allowed:
                continue  # not the caller's to know about
            if not self.breakers[peer.name].allow():
                unanswered.append(self._unanswered(peer.name, "open-circuit"))
                continue
            asked.append(peer)
        if not asked:
            return PeerAnswers([], unanswered)
        body = peer_body(request)
        with tracing.span("peers", {"kb.peers.asked": len(asked)}):
            outcomes = await asyncio.gather(*(self._one(peer, body) for peer in asked))
        unanswered += [o for o in outcomes if isinstance(o, Unanswered)]
        # A peer asked for `limit` sends no more; the re-scoring embeds no more than that of any peer.
        answered = [
            [h for h in o if allows(h.source_identifier)][: request.limit]
            for o in outcomes
            if not isinstance(o, Unanswered)
        ]
        return PeerAnswers(answered, unanswered)

    async def _one(self, peer: Peer, body: dict[str, Any]) -> list[SearchHit] | Unanswered:
        breaker = self.breakers[peer.name]
        started = time.perf_counter()
        try:
            with tracing.span(f"peer {peer.name}", {"kb.peer.name": peer.name}):
                hits = await self.client.search(peer, body, self.budget_s(peer))
        except PeerFailure as failure:
            breaker.failed()
            if failure.reason == "timeout":
                self.metrics.peer_timeouts.labels(peer.name).inc()
            log.warning("peer did not answer", extra={"peer": peer.name, "reason": failure.detail})
            return self._unanswered(peer.name, failure.reason)
        except asyncio.CancelledError:
            breaker.released()
            raise
        except Exception:  # a peer must never blank the search, whatever went wrong with it
            breaker.failed()
            log.exception("peer search failed unexpectedly", extra={"peer": peer.name})
            return self._unanswered(peer.name, "error")
        finally:
            self.metrics.peer_seconds.labels(peer.name).observe(time.perf_counter() - started)
        breaker.succeeded()
        return hits

    def _unanswered(self, name: str, reason: UnansweredReason) -> Unanswered:
        self.metrics.peer_unanswered.labels(name, reason).inc()
        return Unanswered(name, reason)

    def count_contributions(self, hits: Iterable[SearchHit]) -> None:
        names = {p.name for p in self.peers}
        for hit in hits:
            for store in hit.stores:
                if store in names:
                    self.metrics.peer_hits.labels(store).inc()

    async def aclose(self) -> None:
        await self.client.aclose()


# The wire names of the fields whose domain name is not the camelCase of it.
_WIRE_NAMES = {"source_identifiers": "sourceIdentifier"}


def peer_body(query: SearchQuery) -> dict[str, Any]:
    """The search body a peer is sent: only the fields that differ from their defaults.

    A field this release added and the caller left alone is not sent, so an older peer, whose
    strict body refuses a field it does not know, still answers. One source is sent as a string,
    as a caller names it."""
    body = _set_fields(query)
    sources = body.get("filter", {}).get("sourceIdentifier")
    if sources is not None and len(sources) == 1:
        body["filter"]["sourceIdentifier"] = sources[0]
    return body


def _set_fields(value: Any) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for item in dataclasses.fields(value):
        field_value = getattr(value, item.name)
        if dataclasses.is_dataclass(field_value):
            field_value = _set_fields(field_value)
            if not field_value:
                continue
        elif field_value == _default(item):
            continue
        body[_WIRE_NAMES.get(item.name) or _camel(item.name)] = field_value
    return body


def _default(item: dataclasses.Field[Any]) -> Any:
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return item.default  # MISSING for a required field: equal to no value


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)
