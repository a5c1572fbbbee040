"""The one module that talks HTTP to a peer: POST its /api/v1/search with the peer's own token.

What a peer sends is untrusted: the body is read while streaming and refused past a byte cap,
then validated against PeerAnswer: relevance in [0, 1] (though the router re-scores it, see
peers/rescore.py), pages and cells 1-based, a chunk index within its document's chunk count, and
bounds on every list and count a face shows or the re-scoring reads. An answer with one result out
of range is `malformed` as a whole: a peer that sends one is not trusted with the rest.
Every way a peer can fail ends as PeerFailure with a reason; nothing else escapes `search`.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kbsearch import tracing
from kbsearch.models import MetadataValue, SearchHit
from kbsearch.peers.config import Peer

FailureReason = Literal["timeout", "error", "malformed", "oversized"]
# Sent with every search to a peer: a peer answers it from its own store alone, so two services that
# name each other as peers never ask each other in a loop.
PEER_SEARCH_HEADER = "x-kb-peer-search"
MAX_PEER_RESULTS = 100  # a search's own limit (SearchRequest.limit)


class PeerFailure(Exception):
    def __init__(self, reason: FailureReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


Relevance = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
# Past these no document of any store goes: a count or index beyond them is not a peer's data.
MAX_PEER_CHUNKS = 1_000_000  # chunks of one document (SEARCHSVC_MAX_DOCUMENT_CHUNKS is 5000 by default)
MAX_PEER_PLACE = 1_000_000  # a PDF page or a notebook cell, 1-based
MAX_HEADINGS = 32  # a heading path (markdown has six levels)
MAX_LABEL_CHARS = 4096  # a title or one heading
MAX_VERSIONS = 100
ChunkCount = Annotated[int, Field(ge=0, le=MAX_PEER_CHUNKS)]
Place = Annotated[int, Field(ge=1, le=MAX_PEER_PLACE)]
Label = Annotated[str, Field(max_length=MAX_LABEL_CHARS)]


class PeerResult(BaseModel):
    """One hit as a peer sends it: what the merge needs is checked, whatever else a newer peer sends is ignored."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    id: Annotated[str, Field(min_length=1, max_length=512)]
    uri: Annotated[str, Field(min_length=1, max_length=2048)]
    chunk_index: Annotated[ChunkCount, Field(alias="chunkIndex")]
    total_chunks: Annotated[ChunkCount, Field(ge=1, alias="totalChunks")]
    content: str
    score: Annotated[float, Field(allow_inf_nan=False)]
    relevance: Relevance
    title: Label | None = None
    headings: Annotated[list[Label], Field(max_length=MAX_HEADINGS)] = Field(default_factory=list)
    metadata: dict[str, MetadataValue] = Field(default_factory=dict)
    source_identifier: Annotated[str | None, Field(alias="sourceIdentifier")] = None
    version: Label | None = None
    other_versions: Annotated[list[Label], Field(max_length=MAX_VERSIONS, alias="otherVersions")] = Field(
        default_factory=list
    )
    more_matches: Annotated[ChunkCount, Field(alias="moreMatches")] = 0
    page: Place | None = None
    cell: Place | None = None

    @model_validator(mode="after")
    def _within_document(self) -> PeerResult:
        if self.chunk_index >= self.total_chunks:
            raise ValueError("chunkIndex must be below totalChunks")
        return self


class PeerAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    results: Annotated[list[PeerResult], Field(max_length=MAX_PEER_RESULTS)]


def parse_answer(body: bytes) -> list[PeerResult] | PeerFailure:
    """A peer's body as validated results, or a `malformed` failure; never raises, whatever the bytes."""
    try:
        return PeerAnswer.model_validate_json(body).results
    except (ValidationError, ValueError, RecursionError) as exc:
        kind = exc.errors()[0].get("type", "invalid") if isinstance(exc, ValidationError) and exc.errors() else "json"
        return PeerFailure("malformed", f"the answer does not validate ({kind})")


def to_hit(result: PeerResult, store: str) -> SearchHit:
    return SearchHit(
        id=result.id,
        score=result.score,
        uri=result.uri,
        chunk_index=result.chunk_index,
        total_chunks=result.total_chunks,
        content=result.content,
        title=result.title,
        headings=result.headings,
        metadata=result.metadata,
        source_identifier=result.source_identifier,
        version=result.version,
        relevance=result.relevance,
        other_versions=result.other_versions,
        more_matches=result.more_matches,
        page=result.page,
        cell=result.cell,
        stores=(store,),
    )


class PeerClient:
    """One connection pool for every peer; `search` asks one peer within `timeout_s`."""

    def __init__(self, max_response_bytes: int) -> None:
        self.max_response_bytes = max_response_bytes
        # No environment proxies or .netrc: a peer gets exactly the headers written here.
        self._http = httpx.AsyncClient(trust_env=False, follow_redirects=False)

    async def search(self, peer: Peer, body: dict[str, Any], timeout_s: float) -> list[SearchHit]:
        try:
            async with asyncio.timeout(timeout_s):
                raw = await self._fetch(peer, body, timeout_s)
        except TimeoutError:
            raise PeerFailure("timeout", f"no answer within {timeout_s:g} s") from None
        except httpx.TimeoutException:
            raise PeerFailure("timeout", f"no answer within {timeout_s:g} s") from None
        except (httpx.HTTPError, httpx.StreamError, httpx.InvalidURL, OSError) as exc:
            raise PeerFailure("error", type(exc).__name__) from None
        parsed = parse_answer(raw)
        if isinstance(parsed, PeerFailure):
            raise parsed
        return [to_hit(r, peer.name) for r in parsed]

    async def _fetch(self, peer: Peer, body: dict[str, Any], timeout_s: float) -> bytes:
        headers = {
            "Authorization": f"Bearer {peer.token.value().get_secret_value()}",
            "Accept": "application/json",
            PEER_SEARCH_HEADER: "1",
        }
        tracing.inject(headers)  # the peer's spans join this search's trace
        url = f"{peer.config.url}/api/v1/search"
        async with self._http.stream("POST", url, json=body, headers=headers, timeout=timeout_s) as response:
            if response.status_code != 200:
                raise PeerFailure("error", f"HTTP {response.status_code}")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_response_bytes:
                raise PeerFailure("oversized", f"{declared} bytes declared")
            received = bytearray()
            async for chunk in response.aiter_bytes():
                received += chunk
                if len(received) > self.max_response_bytes:
                    raise PeerFailure("oversized", f"more than {self.max_response_bytes} bytes")
            return bytes(received)

    async def aclose(self) -> None:
        await self._http.aclose()
