"""The judged questions of a source (sync.questions) asked of the search service after a sync.

Each question is one search within the source (its best HITS pages: hit@1 when an expected page
comes first, hit@5 when it is among them) and, when it has facts, one ask within the source: its
answer holds the facts when each appears in it, ignoring case and spacing. The questions run one
at a time, so a source's evaluation adds at most two requests in flight to the service, and at
most 2 x MAX_QUESTIONS requests in all. A service that stops answering ends the evaluation with
an error in place of the figures; the sync's own outcome stands.
"""

from __future__ import annotations

import logging

from kboperator.errors import QuestionsError, SyncError
from kboperator.git.repo import Checkout
from kboperator.models import Quality, QuestionOutcome
from kboperator.searchclient import SearchClient
from kboperator.sync.questions import QUESTIONS_PATH, QuestionSet, check_size, parse_questions

log = logging.getLogger(__name__)

HITS = 5


def read_questions(checkout: Checkout) -> QuestionSet | QuestionsError | None:
    """The questions of the checkout's head (blocking); None without a file, the error when it is refused."""
    entry = checkout.file_at(QUESTIONS_PATH)
    if entry is None:
        return None
    try:
        check_size(entry.size or 0)
        return parse_questions(checkout.read_blob(entry.sha))
    except QuestionsError as exc:
        return exc


async def evaluate(client: SearchClient, source_id: str, questions: QuestionSet | QuestionsError) -> Quality:
    """Ask the questions of the source's index; never raises a SyncError (it becomes `error`)."""
    if isinstance(questions, QuestionsError):
        return Quality(error=str(questions))
    outcomes: list[QuestionOutcome] = []
    try:
        for question in questions.questions:
            pages = await client.search_pages(question.question, source_id, HITS)
            wanted = set(question.pages)
            rank = next((i for i, page in enumerate(pages, 1) if page.path in wanted), None)
            missing: tuple[str, ...] = ()
            if question.facts:
                answer = _plain(await client.ask(question.question, source_id))
                missing = tuple(fact for fact in question.facts if _plain(fact) not in answer)
            outcomes.append(QuestionOutcome(question.question, question.pages, rank, tuple(question.facts), missing))
    except SyncError as exc:
        log.warning("source %s: the judged questions stopped after %d: %s", source_id, len(outcomes), exc)
        return Quality(error=f"the search service stopped answering after {len(outcomes)} questions: {exc}")
    return Quality(tuple(outcomes))


def _plain(text: str) -> str:
    return " ".join(text.casefold().split())
