"""A sync-status report as the operator sends it, and where it goes, for the tests of every face."""

from __future__ import annotations

from urllib.parse import quote

SOURCE = "team-a/docs"


def report(**changes: object) -> dict[str, object]:
    body: dict[str, object] = {
        "commit": "0123456789abcdef0123456789abcdef01234567",
        "phase": "partial",
        "documents": 2,
        "added": 2,
        "failedFiles": [{"path": "docs/broken.md", "reason": "not ingested: 503 STORE_UNAVAILABLE"}],
        "skippedFiles": [{"path": "big.md", "reason": "refused by the search service", "code": "DOCUMENT_TOO_LARGE"}],
        "syncedAt": "2026-11-24T10:00:00Z",
        "nextSyncAt": "2026-11-24T11:00:00+01:00",
        "message": "1 document failed",
    }
    return body | changes


def status_path(source: str = SOURCE) -> str:
    return f"/api/v1/sources/{quote(source, safe='')}/status"
