"""A repository's judged questions, `.kb/questions.yaml`: parsed with a bounded schema and clear errors.

    version: 1                  # optional
    questions:
      - question: How do I install the operator?
        expected: docs/install.md          # the page that answers it (or a list of pages)
        facts: ["helm install"]            # optional: strings its answer must hold

The file is the repository's, so it is untrusted input. Bounds: MAX_FILE_BYTES bytes, MAX_QUESTIONS
questions, MAX_QUESTION_CHARS characters a question, MAX_EXPECTED pages and MAX_FACTS facts each,
YAML nested at most MAX_DEPTH deep and without anchors or aliases (an alias makes a small file a
large document). Anything else raises QuestionsError with a message that names the place
(`questions[3].expected: ...`), never the value.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictStr, ValidationError, field_validator

from kboperator.errors import QuestionsError

QUESTIONS_PATH = ".kb/questions.yaml"
MAX_FILE_BYTES = 256 * 1024
MAX_QUESTIONS = 200
MAX_QUESTION_CHARS = 500  # below the search service's query bound (1000)
MAX_EXPECTED = 10
MAX_FACTS = 10
MAX_FACT_CHARS = 200
MAX_PATH_CHARS = 1024
MAX_DEPTH = 8
_ERRORS_SHOWN = 5


def _listed(value: object) -> object:
    return [value] if isinstance(value, str) else value


def _text(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value.strip()


Text = Annotated[StrictStr, Field(min_length=1)]


class Question(BaseModel):
    """One judged question: its text, the page(s) that answer it, and facts its answer must hold."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    question: Annotated[Text, Field(max_length=MAX_QUESTION_CHARS)]
    # One page or a list of pages; kept as a list.
    expected: Annotated[
        list[Annotated[StrictStr, Field(min_length=1, max_length=MAX_PATH_CHARS)]],
        Field(min_length=1, max_length=MAX_EXPECTED),
        BeforeValidator(_listed),
    ]
    facts: Annotated[list[Annotated[Text, Field(max_length=MAX_FACT_CHARS)]], Field(max_length=MAX_FACTS)] = Field(
        default_factory=list
    )

    @field_validator("question")
    @classmethod
    def _question(cls, value: str) -> str:
        return _text(value)

    @field_validator("facts")
    @classmethod
    def _facts(cls, value: list[str]) -> list[str]:
        return [_text(fact) for fact in value]

    @field_validator("expected")
    @classmethod
    def _expected(cls, value: list[str]) -> list[str]:
        for path in value:
            if path.startswith("/") or path != path.strip():
                raise ValueError("a page is its path in the repository, e.g. docs/install.md (no leading /)")
        return value

    @property
    def pages(self) -> tuple[str, ...]:
        return tuple(self.expected)


class QuestionSet(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    questions: Annotated[list[Question], Field(max_length=MAX_QUESTIONS)]


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader without anchors and aliases, and with nesting bounded."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            raise QuestionsError(f"{QUESTIONS_PATH}: YAML aliases (*name) are not allowed here")
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if getattr(event, "anchor", None):
            raise QuestionsError(f"{QUESTIONS_PATH}: YAML anchors (&name) are not allowed here")
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                raise QuestionsError(f"{QUESTIONS_PATH}: nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def check_size(size: int) -> None:
    """Refuse a questions file by its size alone, before it is read."""
    if size > MAX_FILE_BYTES:
        raise QuestionsError(f"{QUESTIONS_PATH} is {size} bytes; at most {MAX_FILE_BYTES} are read")


def parse_questions(data: bytes) -> QuestionSet:
    """The questions in a `.kb/questions.yaml`'s bytes; raises QuestionsError saying what is wrong."""
    check_size(len(data))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise QuestionsError(f"{QUESTIONS_PATH} is not UTF-8 text") from None
    try:
        loaded: Any = yaml.load(text, Loader=_BoundedLoader)
    except ValueError:  # a constructor's refusal, e.g. an integer of more than 4300 digits
        raise QuestionsError(f"{QUESTIONS_PATH}: a value YAML cannot read (a number too long?)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise QuestionsError(f"{QUESTIONS_PATH}: {problem}{where}") from None
    if not isinstance(loaded, dict):
        raise QuestionsError(f"{QUESTIONS_PATH} must be a mapping with a `questions` list")
    try:
        return QuestionSet.model_validate(loaded)
    except ValidationError as exc:
        raise QuestionsError(f"{QUESTIONS_PATH}: {_problems(exc)}") from None


def _problems(exc: ValidationError) -> str:
    """The first few problems, each as `place: message`: the place, never the value (it may be huge)."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    shown = [f"{_place(e['loc'])}: {e['msg']}" for e in errors[:_ERRORS_SHOWN]]
    more = len(errors) - len(shown)
    return "; ".join(shown) + (f" (and {more} more)" if more > 0 else "")


def _place(loc: tuple[int | str, ...]) -> str:
    place = ""
    for part in loc:
        place += f"[{part}]" if isinstance(part, int) else f".{part}" if place else str(part)
    return place or "the file"
