"""The request bodies' budget: its bounds hold on any sequence of requests, and the gate refuses unread.

Properties (generated sequences of reservations and releases): the bytes held never pass the total
nor one caller's share, a refusal names the bound that was reached (429 the caller's, 503 the
total's), and once every holder is done (or cancelled) nothing is held. Then the app: a body past
its caller's share is answered 429 with Retry-After before a byte of it is read.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kbsearch.aio.bodies import BodyBudget
from kbsearch.app import create_app
from kbsearch.errors import BodyBudgetExceededError, RequestTooLargeError, ServiceBusyError, ServiceError
from kbsearch.settings import Settings
from tests.support.hashing import HashingEmbedder
from tests.support.properties import properties
from tests.support.service import make_store

KEYS = ["a", "b", "c", "d"]
steps = st.lists(
    st.tuples(st.booleans(), st.sampled_from(KEYS), st.integers(1, 40)), min_size=1, max_size=60
)  # (reserve or release the oldest, key, size)


@properties(300)
@given(total=st.integers(1, 100), share=st.integers(1, 100), ops=steps)
def test_the_bounds_hold_on_any_sequence_and_everything_comes_back(total, share, ops):
    share = min(share, total)
    budget = BodyBudget(total, share)
    held: list[tuple[str, int]] = []
    for reserve, key, size in ops:
        if reserve or not held:
            before = (budget.in_flight, budget.held_by(key))
            refused: ServiceError | None = None
            try:
                budget.reserve(key, size)
            except ServiceError as exc:
                refused = exc
            if refused is None:
                held.append((key, size))
            else:
                assert before == (budget.in_flight, budget.held_by(key))  # a refusal takes nothing
                if size > share:
                    assert isinstance(refused, RequestTooLargeError)
                elif before[1] + size > share:
                    assert isinstance(refused, BodyBudgetExceededError) and refused.status_code == 429
                else:
                    assert isinstance(refused, ServiceBusyError) and refused.status_code == 503
                    assert before[0] + size > total
                assert refused.status_code == 413 or refused.details["retryAfterSeconds"] >= 1
        else:
            budget.release(*held.pop(0))
        assert budget.in_flight == sum(size for _, size in held) <= total
        assert all(budget.held_by(k) == sum(s for h, s in held if h == k) <= share for k in KEYS)
    for key, size in held:
        budget.release(key, size)
    assert budget.in_flight == 0 and all(budget.held_by(k) == 0 for k in KEYS)
    assert budget._by_key == {}  # no entry left behind for a caller gone


@properties(100)
@given(sizes=st.lists(st.tuples(st.sampled_from(KEYS), st.integers(1, 10)), min_size=1, max_size=30), data=st.data())
def test_holders_cancelled_at_any_point_release_everything(sizes, data):
    cancelled = data.draw(st.sets(st.integers(0, len(sizes) - 1)))

    async def scenario() -> None:
        budget = BodyBudget(40, 20)
        gate = asyncio.Event()

        async def holder(key: str, size: int) -> None:
            with budget.held(key, size):
                await gate.wait()

        tasks = [asyncio.create_task(holder(key, size)) for key, size in sizes]
        await asyncio.sleep(0)
        assert budget.in_flight <= 40
        for i in cancelled:
            tasks[i].cancel()
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert budget.in_flight == 0 and budget._by_key == {}

    asyncio.run(scenario())


# --- through the app ---------------------------------------------------------------------------

TOKENS = (
    "tokens:\n"
    '  - {name: nobody, token: "nobody-token-1", sources: []}\n'
    '  - {name: team-b, token: "team-b-token-2", sources: ["team-b/*"]}\n'
)
SEARCH = json.dumps({"query": "hello"}).encode()


@pytest.fixture
async def app(tmp_path):
    (tmp_path / "tokens.yaml").write_text(TOKENS)
    settings = Settings(
        data_dir=tmp_path / "data",
        tokens_file=tmp_path / "tokens.yaml",
        body_bytes_in_flight=4 * len(SEARCH),
        body_bytes_in_flight_per_caller=2 * len(SEARCH),
        max_body_bytes=1024,
    )
    app = create_app(settings, store=make_store("edge", tmp_path / "data"), embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        yield app


def scope_of(token: str, body: bytes = SEARCH, chunked: bool = False) -> dict:
    length = [(b"transfer-encoding", b"chunked")] if chunked else [(b"content-length", str(len(body)).encode())]
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/api/v1/search", "raw_path": b"/api/v1/search", "query_string": b"",
        "root_path": "", "server": ("kb", 80), "client": ("test", 1),
        "headers": [(b"content-type", b"application/json"), (b"authorization", f"Bearer {token}".encode()), *length],
    }  # fmt: skip


async def call(app, scope: dict, receive) -> tuple[int, dict, dict]:
    sent = []

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return sent[0]["status"], {k.decode(): v.decode() for k, v in sent[0]["headers"]}, json.loads(body)


async def test_a_body_past_the_callers_share_is_refused_unread_and_others_go_on(app):
    release = asyncio.Event()
    reads = []

    both_reading = asyncio.Event()

    async def slow_receive():  # a body whose bytes are still coming: it holds its reservation
        reads.append("slow")
        if reads.count("slow") == 2:
            both_reading.set()
        await release.wait()
        return {"type": "http.request", "body": SEARCH, "more_body": False}

    async def counted_receive():
        reads.append("counted")
        return {"type": "http.request", "body": SEARCH, "more_body": False}

    held = [asyncio.create_task(call(app, scope_of("nobody-token-1"), slow_receive)) for _ in range(2)]
    async with asyncio.timeout(60):
        await both_reading.wait()
    status, headers, body = await call(app, scope_of("nobody-token-1"), counted_receive)
    assert (status, body["error"]["code"], headers["retry-after"]) == (429, "BODY_BUDGET_EXCEEDED", "1")
    assert "counted" not in reads  # answered before its body was read
    assert headers["connection"] == "close"
    status, _, body = await call(app, scope_of("team-b-token-2"), counted_receive)  # another caller's share
    assert status == 200, body
    release.set()
    assert [(await task)[0] for task in held] == [200, 200]
    status, _, _ = await call(app, scope_of("nobody-token-1"), counted_receive)  # released: fits again
    assert status == 200


async def test_a_chunked_body_reserves_the_largest_body(app):
    # max_body_bytes (1024) is past the caller's share here: such a body could never fit, so 413, not 429.
    async def receive():
        raise AssertionError("the body was read")

    status, headers, body = await call(app, scope_of("nobody-token-1", chunked=True), receive)
    assert (status, body["error"]["code"]) == (413, "REQUEST_TOO_LARGE")
    assert "retry-after" not in headers


async def test_the_total_is_refused_with_503_when_callers_together_fill_it(tmp_path):
    (tmp_path / "tokens.yaml").write_text(TOKENS)
    settings = Settings(
        data_dir=tmp_path / "data",
        tokens_file=tmp_path / "tokens.yaml",
        body_bytes_in_flight=len(SEARCH),
        body_bytes_in_flight_per_caller=len(SEARCH),
    )
    app = create_app(settings, store=make_store("edge", tmp_path / "data"), embedder=HashingEmbedder())
    release = asyncio.Event()

    async def slow_receive():
        await release.wait()
        return {"type": "http.request", "body": SEARCH, "more_body": False}

    async with app.router.lifespan_context(app):
        held = asyncio.create_task(call(app, scope_of("nobody-token-1"), slow_receive))
        await asyncio.sleep(0.05)
        status, headers, body = await call(app, scope_of("team-b-token-2"), slow_receive)
        assert (status, body["error"]["code"], headers["retry-after"]) == (503, "SERVICE_BUSY", "1")
        release.set()
        assert (await held)[0] == 200


def test_the_derived_defaults_follow_the_body_limit_and_the_memory_limit():
    http = Settings().http
    assert http.body_budget(None) == (4 * http.max_body_bytes, http.max_body_bytes)
    total, share = http.body_budget(3 << 30)
    assert total == (3 << 30) // 4 // 32 and share == max(http.max_body_bytes, total // 4)
    assert Settings(body_bytes_in_flight=10 << 20).http.body_budget(3 << 30) == (10 << 20, 8 << 20)
