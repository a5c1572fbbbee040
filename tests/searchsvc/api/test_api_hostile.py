"""Hostile input gets a clear 4xx with a stable code, and leaves the store unchanged."""

from __future__ import annotations

import base64
import json

import pytest

from tests.searchsvc.api_fixtures import counts, put, sections

MIB = 1024 * 1024


@pytest.fixture
async def seeded(api):
    await put(api, "keep.md", sections(2), sourceIdentifier="s")
    return api


def put_raw(client, body: bytes, content_type: str = "application/json"):
    return client.put("/api/v1/documents", content=body, headers={"content-type": content_type})


BAD_DOCUMENTS = {
    "malformed json": (b'{"uri": "a.md", "content": ', "INVALID_JSON"),
    "invalid utf-8": (b'{"uri": "a.md", "content": "\xff\xfe bad"}', "INVALID_JSON"),
    "array body": (b"[1, 2]", "VALIDATION_ERROR"),
    "missing uri": (json.dumps({"content": "x"}).encode(), "VALIDATION_ERROR"),
    "missing content": (json.dumps({"uri": "a.md"}).encode(), "VALIDATION_ERROR"),
    "content is a number": (json.dumps({"uri": "a.md", "content": 5}).encode(), "VALIDATION_ERROR"),
    "uri is a list": (json.dumps({"uri": ["a"], "content": "x"}).encode(), "VALIDATION_ERROR"),
    "empty uri": (json.dumps({"uri": "", "content": "x"}).encode(), "VALIDATION_ERROR"),
    "uri of 2049 chars": (json.dumps({"uri": "u" * 2049, "content": "x"}).encode(), "VALIDATION_ERROR"),
    "control char in uri": (json.dumps({"uri": "a\nb", "content": "x"}).encode(), "VALIDATION_ERROR"),
    "NUL in content": (json.dumps({"uri": "a.md", "content": "bin\u0000ary"}).encode(), "VALIDATION_ERROR"),
    "nested metadata": (
        json.dumps({"uri": "a.md", "content": "x", "metadata": {"a": {"b": 1}}}).encode(),
        "VALIDATION_ERROR",
    ),
    "list of numbers in metadata": (
        json.dumps({"uri": "a.md", "content": "x", "metadata": {"a": [1, 2]}}).encode(),
        "VALIDATION_ERROR",
    ),
    "non-string sourceIdentifier": (
        json.dumps({"uri": "a.md", "content": "x", "metadata": {"sourceIdentifier": 7}}).encode(),
        "VALIDATION_ERROR",
    ),
    "bad metadata key": (
        json.dumps({"uri": "a.md", "content": "x", "metadata": {"a b": "c"}}).encode(),
        "VALIDATION_ERROR",
    ),
    "unknown field": (json.dumps({"uri": "a.md", "content": "x", "extra": 1}).encode(), "VALIDATION_ERROR"),
    # Either spelling of a key is read (see the next test), never both: the second is an unknown key.
    "one key spelled both ways": (
        json.dumps({"uri": "a.md", "content": "x", "contentType": "md", "content_type": "pdf"}).encode(),
        "VALIDATION_ERROR",
    ),
}


async def test_a_key_in_snake_case_reads_as_its_camel_case_name(seeded):
    body = {"uri": "snake.md", "content": base64.b64encode(b"# Snake\n\nsnake case key").decode()}
    response = await seeded.put("/api/v1/documents", json=body | {"content_encoding": "base64"})
    assert response.status_code == 200, response.text
    text = await seeded.get("/api/v1/documents/text", params={"uri": "snake.md"})
    assert text.json()["text"] == "# Snake\n\nsnake case key"


@pytest.mark.parametrize("case", sorted(BAD_DOCUMENTS))
async def test_bad_documents_are_refused_and_change_nothing(seeded, case):
    body, code = BAD_DOCUMENTS[case]
    before = await counts(seeded)
    response = await put_raw(seeded, body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"]
    assert await counts(seeded) == before


async def test_validation_errors_name_the_field_and_never_echo_input(seeded):
    secret_content = "s3cret-body " * 10
    body = json.dumps({"uri": "u" * 2049, "content": secret_content}).encode()
    response = await put_raw(seeded, body)
    assert "uri" in response.json()["error"]["message"]
    assert "s3cret" not in response.text


async def test_content_over_one_mib_is_413_document_too_large(seeded):
    before = await counts(seeded)
    response = await seeded.put("/api/v1/documents", json={"uri": "big.md", "content": "a" * (MIB + 1)})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "DOCUMENT_TOO_LARGE"
    assert response.json()["error"]["details"] == {"bytes": MIB + 1, "limit": MIB}
    assert await counts(seeded) == before


async def test_multibyte_content_is_measured_in_utf8_bytes(seeded):
    content = "é" * (MIB // 2 + 1)  # fewer than 1 Mi characters, more than 1 MiB of UTF-8
    response = await seeded.put("/api/v1/documents", json={"uri": "e.md", "content": content})
    assert response.status_code == 413


async def test_oversize_body_is_413_request_too_large(seeded):
    before = await counts(seeded)
    body = b'{"uri": "x", "content": "' + b"a" * (9 * MIB) + b'"}'
    response = await put_raw(seeded, body)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "REQUEST_TOO_LARGE"
    assert await counts(seeded) == before


async def test_a_one_mib_single_line_is_ingested(seeded):
    content = ("word " * (MIB // 5))[: MIB - 10]
    response = await seeded.put("/api/v1/documents", json={"uri": "line.md", "content": content})
    assert response.status_code == 200, response.text
    assert response.json()["chunks"] > 1000


async def test_ten_thousand_level_nested_list_is_ingested(seeded):
    # "- - - ... item" opens a new list level at every marker; quotes nest the same way.
    content = "# Deep\n\n" + "- " * 10_000 + "item\n\n" + "> " * 10_000 + "quote\n"
    response = await seeded.put("/api/v1/documents", json={"uri": "nested.md", "content": content})
    assert response.status_code == 200, response.text
    assert response.json()["chunks"] >= 1


BAD_SEARCHES = {
    "empty query": {"query": ""},
    "blank query": {"query": "   "},
    "query of 1001 chars": {"query": "q" * 1001},
    "limit 0": {"query": "x", "limit": 0},
    "limit 101": {"query": "x", "limit": 101},
    "limit as string": {"query": "x", "limit": "5"},
    "unknown mode": {"query": "x", "mode": "semantic"},
    "nested metadata filter": {"query": "x", "filter": {"metadata": {"a": {"b": 1}}}},
    "unknown filter key": {"query": "x", "filter": {"path": "a"}},
    "missing query": {"limit": 3},
}


@pytest.mark.parametrize("case", sorted(BAD_SEARCHES))
async def test_bad_searches_are_422(seeded, case):
    response = await seeded.post("/api/v1/search", json=BAD_SEARCHES[case])
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "VALIDATION_ERROR"


async def test_bad_listing_parameters_are_422(seeded):
    for params in ({"limit": 0}, {"limit": 1001}, {"limit": "many"}):
        response = await seeded.get("/api/v1/documents", params=params)
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "VALIDATION_ERROR"
