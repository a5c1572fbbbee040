"""The compact text a model reads beside each tool's structured output: never a second copy of the JSON."""

from __future__ import annotations

from collections.abc import Iterable

from kbsearch.mcp.models import ChunkContext, SourcesOverview
from kbsearch.schemas.ask import AskResponse
from kbsearch.schemas.documents import DeleteDocumentResponse, DocumentText, PutDocumentResponse, SourceDocumentList
from kbsearch.schemas.search import SearchResponse, SearchResult
from kbsearch.schemas.sources import SourceInfo

SEPARATOR = " \u203a "  # a right-pointing angle quote, between a title and its headings


def heading_path(title: str | None, headings: Iterable[str]) -> str:
    parts = [title] if title else []
    parts.extend(h for h in headings if h and h != title)
    return SEPARATOR.join(parts)


def hit_line(n: int, hit: SearchResult) -> str:
    label = heading_path(hit.title, hit.headings) or hit.uri
    version = f", version {hit.version}" if hit.version else ""
    others = f"; also in {', '.join(hit.other_versions)}" if hit.other_versions else ""
    return f"[{n}] {label} — {located(hit.uri, hit.page, hit.cell)} (relevance {hit.relevance:.2f}{version}{others})"


def located(uri: str, page: int | None, cell: int | None) -> str:
    """The URI, pointing at a PDF page (`#page=N`, which PDF viewers open at) or naming a notebook cell."""
    if page is not None:
        return f"{uri}#page={page} (page {page})"
    if cell is not None:
        return f"{uri} (cell {cell})"
    return uri


def search_text(response: SearchResponse) -> str:
    partial = _partial_note(response)
    if not response.results:
        return partial + f"No results ({response.mode} search) among the sources you may read."
    if response.nothing_relevant:
        best = max(h.relevance for h in response.results)
        note = f"Nothing relevant found (the best relevance is {best:.2f}); the closest results follow.\n\n"
    else:
        note = ""
    # The stores are named once more than one is in play (a search with no peers reads as before).
    named = response.partial or len({name for hit in response.results for name in hit.stores}) > 1
    blocks = [
        f"{hit_line(n, hit)}{_stores(hit) if named else ''}\n{hit.content}"
        for n, hit in enumerate(response.results, start=1)
    ]
    return partial + note + "\n\n".join(blocks)


def _partial_note(response: SearchResponse | AskResponse) -> str:
    if not response.partial:
        return ""
    missing = ", ".join(f"{p.name} ({p.reason})" for p in response.unanswered_peers)
    return f"Partial results: these stores did not answer: {missing}.\n\n"


def _stores(hit: SearchResult) -> str:
    return f" [from {', '.join(hit.stores)}]"


def document_text(page: DocumentText) -> str:
    label = page.title or page.uri
    where = f"characters {page.start} to {page.end} of {page.total_chars}"
    more = f"; continue with start={page.next_start}" if page.next_start is not None else "; end of document"
    return f"{label} — {page.uri} ({where}{more})\n\n{page.text}"


def context_text(context: ChunkContext) -> str:
    blocks = []
    for chunk in context.chunks:
        marker = " (asked for)" if chunk.chunk_index == context.chunk_index else ""
        label = heading_path(context.title, chunk.headings) or context.uri
        blocks.append(f"[chunk {chunk.chunk_index}/{context.total_chunks}{marker}] {label}\n{chunk.content}")
    return f"{context.uri}\n\n" + "\n\n".join(blocks)


def _source_line(source: SourceInfo) -> str:
    line = (
        f"{source.source_identifier}: {source.documents} documents, {source.chunks} chunks, "
        f"last ingest {source.last_ingested_at or 'never'}"
    )
    # Fields REST adds to a source later (the operator's sync status) show up here without a change.
    known = {"sourceIdentifier", "documents", "chunks", "lastIngestedAt", "versions"}
    extra = {k: v for k, v in source.model_dump(mode="json", by_alias=True).items() if k not in known and v is not None}
    if source.versions:  # by name, newest first: what an agent passes as `version`
        line += f"; versions: {', '.join(v.version for v in source.versions[:20])}"
        line += f" (+{len(source.versions) - 20} more)" if len(source.versions) > 20 else ""
    return line + "".join(f"; {key}: {_compact(value)}" for key, value in extra.items())


def _compact(value: object) -> str:
    """A nested record on one line: its set scalars, and its lists as counts (the records are in structuredContent)."""
    if not isinstance(value, dict):
        return str(value)
    parts = []
    for key, item in value.items():
        if isinstance(item, list):
            if item:
                parts.append(f"{key} {len(item)}")
        elif item is not None and not isinstance(item, dict):
            parts.append(f"{key} {item}")
    return ", ".join(parts)


def sources_text(overview: SourcesOverview) -> str:
    if not overview.sources:
        return "No sources are visible to you."
    header = f"{len(overview.sources)} sources, {overview.documents} documents, {overview.chunks} chunks"
    return header + "\n" + "\n".join(_source_line(s) for s in overview.sources)


def source_documents_text(listing: SourceDocumentList) -> str:
    header = f"{len(listing.documents)} documents of {listing.source_identifier}"
    if not listing.documents:
        return header + (" on this page." if listing.next_cursor else ".")
    lines = [header + (f" (more: cursor={listing.next_cursor})" if listing.next_cursor else "")]
    for d in listing.documents:
        version = f" [version {d.version}]" if d.version else ""
        lines.append(f"- {d.title or '(untitled)'}{version} — {d.uri} (written {d.ingested_at})")
    return "\n".join(lines)


def put_text(response: PutDocumentResponse) -> str:
    return (
        f"{response.status}: {response.uri} ({response.chunks} chunks, {response.chunks_embedded} embedded, "
        f"checksum {response.checksum})"
    )


def delete_text(response: DeleteDocumentResponse) -> str:
    return f"deleted: {response.uri} ({response.chunks_deleted} chunks)"


def ask_text(response: AskResponse) -> str:
    """The answer, then its numbered citations: what each [n] points at, and the cited sentence."""
    partial = _partial_note(response)
    if not response.citations:
        return partial + response.answer
    lines = [partial + response.answer, "", "Citations:"]
    named = response.partial or len({name for c in response.citations for name in c.stores}) > 1
    for citation in response.citations:
        label = heading_path(citation.title, citation.headings) or citation.uri
        where = located(citation.uri, citation.page, citation.cell)
        version = f", version {citation.version}" if citation.version else ""
        store = f", from {', '.join(citation.stores)}" if named else ""
        lines.append(f"[{citation.n}] {label} — {where} (chunk {citation.chunk_index}{version}{store})")
        lines.append(f'    "{citation.quote}"')
    return "\n".join(lines)
