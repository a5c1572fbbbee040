"""`.kb/questions.yaml`: the bounded schema, its clear errors, and generated input that parses or is refused."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kboperator.errors import QuestionsError, SyncError
from kboperator.sync.questions import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_QUESTION_CHARS,
    MAX_QUESTIONS,
    QuestionSet,
    check_size,
    parse_questions,
)

PROPERTIES = settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
MAX_ERROR_CHARS = 2000  # an error names places, never values: it stays short whatever the input


def test_a_question_with_one_page_or_several_and_facts() -> None:
    parsed = parse_questions(
        b"version: 1\nquestions:\n"
        b"  - question: '  How do I install it? '\n    expected: docs/install.md\n    facts: [helm install]\n"
        b"  - question: Where are backups?\n    expected: [docs/backup.md, docs/restore.md]\n"
    )
    first, second = parsed.questions
    assert (first.question, first.pages, first.facts) == (
        "How do I install it?",
        ("docs/install.md",),
        ["helm install"],
    )
    assert (second.pages, second.facts) == (("docs/backup.md", "docs/restore.md"), [])


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"questions: [", "expected the node content, but found '<stream end>' at line 1, column 13"),
        (b"- question: x", "must be a mapping with a `questions` list"),
        (b"version: 2\nquestions: []", "version: Input should be 1"),
        (b"questions:\n  - question: x\n    expected: a.md\n    extra: 1\n", "questions[0].extra: Extra inputs"),
        (
            b"questions:\n  - question: ' '\n    expected: a.md\n",
            "questions[0].question: Value error, must not be blank",
        ),
        (
            b"questions:\n  - question: x\n    expected: /a.md\n",
            "questions[0].expected: Value error, a page is its path",
        ),
        (b"questions:\n  - question: x\n    expected: []\n", "questions[0].expected: List should have at least 1"),
        (b"questions:\n  - {question: x, expected: a.md, facts: [1]}\n", "questions[0].facts[0]: Input should be"),
        (b"a: &anchor 1\nquestions: []\n", "YAML anchors (&name) are not allowed"),
        (b"questions: " + b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), f"nested more than {MAX_DEPTH} levels"),
        (b"questions: \xff", "is not UTF-8 text"),
        (b"questions: " + b"1" * 5000, "a value YAML cannot read"),
    ],
)
def test_a_refused_file_says_where(data: bytes, said: str) -> None:
    with pytest.raises(QuestionsError) as refused:
        parse_questions(data)
    assert said in str(refused.value)
    assert isinstance(refused.value, SyncError)


def test_the_bounds() -> None:
    one = {"question": "q", "expected": "a.md"}
    parse_questions(yaml.safe_dump({"questions": [dict(one) for _ in range(MAX_QUESTIONS)]}).encode())
    with pytest.raises(QuestionsError, match=rf"questions: List should have at most {MAX_QUESTIONS} items"):
        parse_questions(yaml.safe_dump({"questions": [dict(one) for _ in range(MAX_QUESTIONS + 1)]}).encode())
    long = {"question": "w" * (MAX_QUESTION_CHARS + 1), "expected": "a.md"}
    with pytest.raises(
        QuestionsError, match=rf"questions\[0\].question: String should have at most {MAX_QUESTION_CHARS}"
    ):
        parse_questions(yaml.safe_dump({"questions": [long]}).encode())
    with pytest.raises(QuestionsError, match=f"at most {MAX_FILE_BYTES} are read"):
        parse_questions(b"#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(QuestionsError, match="10000000 bytes"):
        check_size(10_000_000)  # refused by its size, before it is read


def test_many_errors_are_summed_up() -> None:
    bad = [{"question": 1, "expected": 2} for _ in range(10)]
    with pytest.raises(QuestionsError) as refused:
        parse_questions(yaml.safe_dump({"questions": bad}).encode())
    assert str(refused.value).endswith("(and 15 more)")


def _outcome(data: bytes) -> QuestionSet | QuestionsError:
    try:
        return parse_questions(data)
    except QuestionsError as exc:
        return exc


def _check(data: bytes) -> None:
    outcome = _outcome(data)
    if isinstance(outcome, QuestionsError):
        assert str(outcome).startswith(".kb/questions.yaml")
        assert len(str(outcome)) <= MAX_ERROR_CHARS
    else:
        assert len(outcome.questions) <= MAX_QUESTIONS
        assert all(0 < len(q.question) <= MAX_QUESTION_CHARS and q.pages for q in outcome.questions)


@PROPERTIES
@given(st.binary(max_size=4096))
@example(b"a: &a [1, 1]\nb: &b [*a, *a]\nc: [*b, *b]\n")  # the alias bomb, small
@example(b"{" * 5000)
@example(b"!!python/object:os.system [ls]")
def test_any_bytes_parse_or_are_refused_clearly(data: bytes) -> None:
    _check(data)


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=40),
    st.sampled_from(["docs/a.md", "/abs.md", " ", "", "How?", "v1"]),
)
KEYS = st.sampled_from(["question", "expected", "facts", "version", "questions", "other", "1"])
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=30,
)
QUESTION = st.fixed_dictionaries({"question": VALUES, "expected": VALUES}, optional={"facts": VALUES, "other": VALUES})
DOCUMENTS = st.one_of(
    VALUES,
    st.fixed_dictionaries(
        {"questions": st.lists(QUESTION, max_size=8) | VALUES}, optional={"version": VALUES, "x": VALUES}
    ),
)


@PROPERTIES
@given(DOCUMENTS)
def test_any_yaml_document_parses_or_is_refused_clearly(document: Any) -> None:
    _check(yaml.safe_dump(document, allow_unicode=True).encode())
