"""A search that names a documentation version no source holds fails plainly instead of answering empty.

Checked only when a search with a version found nothing, so a search that finds something pays nothing:
one engine facet over the indexed version, within the caller's sources and the filter's.
"""

from __future__ import annotations

from kbsearch.aio.runtime import store_call
from kbsearch.errors import VersionNotFoundError
from kbsearch.models import SearchFilter
from kbsearch.services.documents.versions import newest_first_key
from kbsearch.store.base import VectorStore

# Versions named in the error's details: enough to pick from, bounded whatever the collection holds.
MAX_LISTED_VERSIONS = 50


async def require_version(store: VectorStore, search_filter: SearchFilter, sources: list[str] | None) -> None:
    """Raise VersionNotFoundError when `search_filter.version` is none of the versions in `sources` (None: all)."""
    version = search_filter.version
    if version is None or sources == []:
        return
    counts = await store_call(store.version_counts, sources, search_filter.uri_prefix, MAX_LISTED_VERSIONS + 1)
    if version in counts:
        return
    available = sorted(counts, key=newest_first_key)[:MAX_LISTED_VERSIONS]
    where = f" in {', '.join(sources[:5])}" if sources else ""
    listed = f"; versions there: {', '.join(available[:10])}" if available else "; no versioned documents there"
    raise VersionNotFoundError(
        f"no documents of version {version!r}{where}{listed}",
        details={"version": version, "available": available},
    )
