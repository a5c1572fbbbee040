"""The ask panel: a question posted from the search page, answered by the same AskService as POST /api/v1/ask."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Request
from markupsafe import Markup, escape
from pydantic import ValidationError
from starlette.responses import HTMLResponse

from kbsearch.console.pages import MODES, source_names
from kbsearch.console.rendering import chunk_link, render
from kbsearch.console.session import CSRF_FIELD, check_csrf, console_caller
from kbsearch.deps import AskDep
from kbsearch.errors import ServiceError
from kbsearch.presenters import validation_message
from kbsearch.schemas.ask import AskCitation, AskRequest
from kbsearch.services.access.scope import Caller

router = APIRouter(prefix="/ui", include_in_schema=False)
Reader = Annotated[Caller, Depends(console_caller)]
_MARKER = re.compile(r"\[(\d{1,3})\]")
# A fenced code block of an answer: its fence line, its text, and its closing fence (or the end).
_FENCED = re.compile(r"^(?P<fence>`{3,}|~{3,})[^\n]*\n(?P<code>.*?)(?:^(?P=fence)[`~]*[ \t]*$\n?|\Z)", re.M | re.S)


def answer_with_chips(answer: str, citations: list[AskCitation]) -> Markup:
    """The answer, escaped, with each verified [n] marker turned into a chip that opens the cited chunk.

    Fenced code blocks become <pre><code> blocks, as written: a `[1]` inside code is code, not a chip.
    """
    pieces: list[Markup] = []
    position = 0
    for block in _FENCED.finditer(answer):
        pieces.append(_prose_with_chips(answer[position : block.start()], citations))
        pieces.append(Markup("<pre><code>{}</code></pre>").format(block.group("code")))
        position = block.end()
    pieces.append(_prose_with_chips(answer[position:], citations))
    return Markup("").join(pieces)


def _prose_with_chips(answer: str, citations: list[AskCitation]) -> Markup:
    cited = {c.n: c for c in citations}
    pieces: list[Markup] = []
    position = 0
    for match in _MARKER.finditer(answer):
        citation = cited.get(int(match.group(1)))
        if citation is None:
            continue  # not a verified citation: left as the text it is
        pieces.append(Markup(escape(answer[position : match.start()])))
        title = citation.title or citation.uri
        pieces.append(
            Markup('<a class="chip" href="{}" title="{}">{}</a>').format(
                chunk_link(citation.uri, citation.chunk_index), title, citation.n
            )
        )
        position = match.end()
    pieces.append(Markup(escape(answer[position:])))
    return Markup("").join(pieces)


@router.post("/ask")
async def ask_panel(
    request: Request,
    caller: Reader,
    service: AskDep,
    question: Annotated[str, Form(max_length=4000)],
    csrf_token: Annotated[str, Form(alias=CSRF_FIELD, max_length=128)] = "",
    source: Annotated[str, Form(max_length=512)] = "",
    uri_prefix: Annotated[str, Form(max_length=2000)] = "",
) -> HTMLResponse:
    check_csrf(request, csrf_token)
    answer, ask_error = None, None
    try:
        # The same filter as the search form's, passed as REST's ask passes it.
        search_filter: dict[str, Any] = {}
        if source:
            search_filter["sourceIdentifier"] = source
        if uri_prefix:
            search_filter["uriPrefix"] = uri_prefix
        body: dict[str, Any] = {"question": question, "filter": search_filter}
        answer = await service.ask(AskRequest.model_validate(body), caller)
    except ValidationError as exc:
        ask_error = validation_message(exc, style="bare")
    except ServiceError as exc:
        ask_error = exc.message
    chips = answer_with_chips(answer.answer, answer.citations) if answer is not None else None
    context = {
        "question": question,
        "source": source,
        "uri_prefix": uri_prefix,
        "answer": answer,
        "answer_html": chips,
        "ask_error": ask_error,
    }
    if request.headers.get("hx-request") == "true":
        return render(request, "_ask.html", context)
    # Without JavaScript: the search page again, with the answer in its panel.
    sources = await source_names(request, caller)
    page = {"q": "", "mode": "hybrid", "hits": [], "took_ms": None, "error": None, "sources": sources, "ask": True}
    return render(request, "search.html", page | {"modes": MODES} | context)
