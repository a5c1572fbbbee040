"""Path and query parameters that carry a sourceIdentifier or a URI, checked by the schemas' rules."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from starlette.convertors import Convertor, register_url_convertor

from kbsearch.schemas.fields import SourceIdentifier, Uri


class _AnyConvertor(Convertor[str]):
    """Like starlette's `path`, but newlines match too: the identifier rule, not the router, judges them.

    With `path`, `/sources/a%0Ab` matched no route and answered 404 instead of saying what is wrong.
    """

    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("anything", _AnyConvertor())

# Route paths write the identifier as `.../sources/{sourceIdentifier:anything}`, so that an empty,
# slashed or control-character identifier reaches the rule and gets a 422 naming the field.
SOURCE_PATH = "{sourceIdentifier:anything}"

SourceIdPath = Annotated[SourceIdentifier, Path(description="A sourceIdentifier; URL-encode `/` as %2F.")]
SourceIdQuery = Annotated[SourceIdentifier | None, Query()]
SourceIdListQuery = Annotated[list[SourceIdentifier] | None, Query()]
UriQuery = Annotated[Uri, Query()]
UriPrefixQuery = Annotated[Uri | None, Query()]
