"""Commands in, results out: every face makes its command with the wire body's one `to_command()`,
and a peer is sent only the fields the caller set."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import Field, StrictInt, StrictStr, ValidationError

from kbsearch.commands import SearchQuery
from kbsearch.console.pages import RESULTS_LIMIT
from kbsearch.deps import context_of
from kbsearch.mcp.context import ToolContext
from kbsearch.mcp.tools import run_search
from kbsearch.models import SearchFilter
from kbsearch.peers.router import peer_body
from kbsearch.schemas.fields import Body, Scalar
from kbsearch.schemas.search import SearchRequest
from kbsearch.services.access.scope import Caller
from kbsearch.services.search.service import SearchService
from tests.support.service import running_service


async def test_rest_mcp_and_the_console_search_through_the_one_to_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[SearchQuery] = []
    taken: list[SearchQuery] = []
    to_command, search = SearchRequest.to_command, SearchService.search

    def spy(self: SearchRequest) -> SearchQuery:
        made.append(to_command(self))
        return made[-1]

    async def seen(self: SearchService, request: SearchQuery, caller: Caller, **options: Any) -> Any:
        taken.append(request)
        return await search(self, request, caller, **options)

    monkeypatch.setattr(SearchRequest, "to_command", spy)
    monkeypatch.setattr(SearchService, "search", seen)
    async with running_service("edge", tmp_path / "data") as client:
        # A page of that version: a search naming a version nobody holds is refused (VERSION_NOT_FOUND).
        written = await client.put(
            "/api/v1/documents",
            json={
                "uri": "https://git.example/a/2.1/deploys.md",
                "content": "# Deploys\n\nHow deploys roll out.",
                "metadata": {"sourceIdentifier": "docs/a", "version": "2.1"},
            },
        )
        assert written.status_code == 200, written.text
        rest = await client.post(
            "/api/v1/search",
            json={
                "query": "deploys",
                "limit": RESULTS_LIMIT,
                "filter": {"sourceIdentifier": "docs/a", "version": "2.1"},
            },
        )
        assert rest.status_code == 200, rest.text
        tools = ToolContext(caller=Caller.anonymous(), app=context_of(client.app))  # type: ignore[attr-defined]
        await run_search(tools, "deploys", RESULTS_LIMIT, sources=["docs/a"], version="2.1")
        page = await client.get("/ui/", params={"q": "deploys", "source": "docs/a", "version": "2.1"})
        assert page.status_code == 200, page.text
    expected = SearchQuery(
        query="deploys", limit=RESULTS_LIMIT, filter=SearchFilter(source_identifiers=["docs/a"], version="2.1")
    )
    # Each face made its command once, with the body's to_command(), and the service got that very command.
    assert made == [expected] * 3
    assert [id(c) for c in taken] == [id(c) for c in made]


class _OlderFilter(Body):
    """A search filter as an older release had it: no `version`; unknown keys refused (extra=forbid)."""

    source_identifier: StrictStr | list[StrictStr] | None = None
    uri_prefix: StrictStr | None = None
    metadata: dict[str, Scalar] = Field(default_factory=dict)


class _OlderSearchRequest(Body):
    """A search body as an older release had it: no `collapse`, the older filter."""

    query: StrictStr
    limit: Annotated[StrictInt, Field(ge=1, le=100)] = 10
    mode: Literal["hybrid", "dense", "keyword"] = "hybrid"
    filter: _OlderFilter = Field(default_factory=_OlderFilter)


def test_an_older_peer_accepts_a_search_that_leaves_the_newer_fields_alone() -> None:
    body = SearchRequest.model_validate({"query": "q", "limit": 5, "filter": {"sourceIdentifier": "docs/a"}})
    forwarded = peer_body(body.to_command())
    assert forwarded == {"query": "q", "limit": 5, "filter": {"sourceIdentifier": "docs/a"}}
    _OlderSearchRequest.model_validate(forwarded)
    # What a peer was sent before (the body dumped whole, every default in it) the older peer refuses.
    with pytest.raises(ValidationError, match="collapse"):
        _OlderSearchRequest.model_validate(body.model_dump(mode="json", by_alias=True))


def test_a_peer_is_sent_every_field_the_caller_set() -> None:
    asked = {
        "query": "q",
        "limit": 3,
        "mode": "keyword",
        "filter": {
            "sourceIdentifier": ["a/b", "c/d"],
            "uriPrefix": "https://x/",
            "metadata": {"k": "v"},
            "version": "2.1",
        },
        "collapse": False,
    }
    command = SearchRequest.model_validate(asked).to_command()
    assert peer_body(command) == asked
    literal = {"query": "ERR_X", "mode": "literal", "caseSensitive": True}
    assert peer_body(SearchRequest.model_validate(literal).to_command()) == literal
    assert SearchRequest.model_validate(peer_body(command)).to_command() == command
