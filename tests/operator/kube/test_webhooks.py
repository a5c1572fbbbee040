"""The webhook receiver over real HTTP, setting the sync-now annotation through the (emulated)
Kubernetes API exactly as `kubectl annotate` would."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from kboperator.crd import SYNC_REQUEST_ANNOTATION
from kboperator.hooks.signatures import Delivery
from kboperator.kube.metrics import OperatorMetrics
from kboperator.kube.secrets import SecretReader
from kboperator.kube.source import parse_source
from kboperator.kube.webhooks import (
    MAX_MATCHED_PATHS,
    SyncRequester,
    WebhookReceiver,
    hook_path,
    judge,
    push_request_time,
)
from kboperator.sync.paths import PathFilter
from tests.support.kube import KubeApi, KubeEmulator
from tests.support.paths import REPO_ROOT

PAYLOADS = REPO_ROOT / "tests" / "operator" / "webhook_payloads"
REPO = "https://github.com/acme/handbook.git"
TOKEN_A = "team-a-webhook-secret-0123456789"
TOKEN_B = "team-b-webhook-secret-9876543210"
SPEC = {"repository": {"url": REPO, "ref": "main"}, "paths": ["docs/**/*.md"], "exclude": ["docs/drafts/**"]}


class Hooks:
    """The receiver on 127.0.0.1, two sources of the same repository in two namespaces."""

    def __init__(self, receiver: WebhookReceiver, metrics: OperatorMetrics, team_a: KubeApi, team_b: KubeApi) -> None:
        self.receiver, self.metrics, self.team_a, self.team_b = receiver, metrics, team_a, team_b
        self.base = f"http://127.0.0.1:{receiver.port}"

    async def deliver(
        self,
        path: str,
        payload: bytes,
        *,
        token: str = TOKEN_A,
        delivery: str = "d-1",
        headers: dict[str, str] | None = None,
        event: str = "push",
    ) -> httpx.Response:
        digest = hmac.new(token.encode(), payload, hashlib.sha256).hexdigest()
        sent = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": f"sha256={digest}"}
        sent["Content-Type"] = "application/json"
        async with httpx.AsyncClient(base_url=self.base) as client:
            return await client.post(path, content=payload, headers=headers if headers is not None else sent)

    def requested(self, api: KubeApi, name: str = "handbook") -> str | None:
        return ((api.get(name) or {}).get("metadata", {}).get("annotations") or {}).get(SYNC_REQUEST_ANNOTATION)

    def counted(self, result: str) -> float:
        value = self.metrics.registry.get_sample_value("kb_operator_webhook_deliveries_total", {"result": result})
        return value or 0.0


@pytest.fixture
async def hooks(kube: KubeEmulator, kubeconfig: Path) -> AsyncIterator[Hooks]:
    reader = SecretReader.from_environment()
    metrics = OperatorMetrics()
    receiver = WebhookReceiver(SyncRequester(reader.api_client), metrics, max_body_bytes=64 * 1024, burst=3)
    await receiver.start(0, "127.0.0.1")
    team_a, team_b = KubeApi(kube, "team-a"), KubeApi(kube, "team-b")
    for api, token in ((team_a, TOKEN_A), (team_b, TOKEN_B)):
        await api.create("handbook", SPEC)
        receiver.register(parse_source(api.namespace, "handbook", SPEC, allow_local=False), "handbook", token)
    try:
        yield Hooks(receiver, metrics, team_a, team_b)
    finally:
        await receiver.close()
        reader.close()


def github_push(*paths: str, ref: str = "refs/heads/main", repo: str = REPO) -> bytes:
    payload = json.loads((PAYLOADS / "github-push.json").read_bytes())
    payload["ref"] = ref
    payload["repository"]["clone_url"] = repo
    payload["repository"]["ssh_url"] = payload["repository"]["html_url"] = payload["repository"]["git_url"] = None
    payload["commits"][0]["modified"] = list(paths)
    return json.dumps(payload).encode()


PATH_A, PATH_B = hook_path("team-a", "handbook", TOKEN_A), hook_path("team-b", "handbook", TOKEN_B)


async def test_a_signed_push_to_a_selected_path_sets_the_sync_request(hooks: Hooks) -> None:
    answer = await hooks.deliver(PATH_A, github_push("docs/setup.md"), delivery="first")
    assert answer.status_code == 202, answer.text
    assert answer.json()["result"] == "requested"
    value = hooks.requested(hooks.team_a)
    assert value is not None and value == answer.json()["request"] and value.endswith(":first")
    assert push_request_time(value) is not None
    assert hooks.requested(hooks.team_b) is None  # the other namespace's source is untouched
    # The same delivery again (a host's retry): nothing new is requested.
    again = await hooks.deliver(PATH_A, github_push("docs/setup.md"), delivery="first")
    assert (again.status_code, again.json()["result"]) == (200, "duplicate")
    assert hooks.requested(hooks.team_a) == value
    assert (hooks.counted("requested"), hooks.counted("duplicate")) == (1, 1)


async def test_another_namespaces_secret_or_no_signature_triggers_nothing(hooks: Hooks) -> None:
    payload = github_push("docs/setup.md")
    wrong = await hooks.deliver(PATH_A, payload, token=TOKEN_B)  # team-b's secret on team-a's path
    assert (wrong.status_code, wrong.json()["result"]) == (401, "bad_signature")
    missing = await hooks.deliver(PATH_A, payload, headers={"X-GitHub-Event": "push", "X-GitHub-Delivery": "x"})
    assert missing.status_code == 401
    tampered_digest = hmac.new(TOKEN_A.encode(), payload, hashlib.sha256).hexdigest()
    tampered = await hooks.deliver(
        PATH_A, payload + b" ", headers={"X-GitHub-Event": "push", "X-Hub-Signature-256": f"sha256={tampered_digest}"}
    )
    assert tampered.status_code == 401
    guessed = await hooks.deliver(hook_path("team-a", "handbook", "guess"), payload)
    assert (guessed.status_code, guessed.json()["result"]) == (404, "unknown_path")
    assert hooks.requested(hooks.team_a) is None and hooks.requested(hooks.team_b) is None
    assert hooks.counted("bad_signature") == 3


async def test_pushes_that_do_not_concern_the_source_trigger_nothing(hooks: Hooks) -> None:
    cases = [
        (github_push("src/main.py", "docs/drafts/wip.md", "README.md"), "ignored_paths"),
        (github_push("docs/setup.md", ref="refs/heads/release"), "ignored_ref"),
        (github_push("docs/setup.md", repo="https://github.com/acme/other.git"), "ignored_repository"),
    ]
    for n, (payload, result) in enumerate(cases):
        answer = await hooks.deliver(PATH_A, payload, delivery=f"d{n}")
        assert (answer.status_code, answer.json()["result"]) == (202, result)
    ping = await hooks.deliver(PATH_A, b'{"zen": "Design for failure.", "hook_id": 7}', delivery="p", event="ping")
    assert (ping.status_code, ping.json()["result"]) == (202, "ignored_event")
    garbage = await hooks.deliver(PATH_A, b"{not json", delivery="g")
    assert (garbage.status_code, garbage.json()["result"]) == (400, "bad_payload")
    assert hooks.requested(hooks.team_a) is None
    assert hooks.counted("ignored_paths") == 1


async def test_each_source_has_its_own_rate_limit(hooks: Hooks) -> None:
    payloads = [github_push(f"docs/setup-{n}.md") for n in range(4)]
    answers = [await hooks.deliver(PATH_A, payload, delivery=f"burst-{n}") for n, payload in enumerate(payloads)]
    assert [a.status_code for a in answers] == [202, 202, 202, 429]  # a burst of 3
    assert int(answers[-1].headers["Retry-After"]) >= 1
    # The refused delivery is not remembered: the host's redelivery is not taken for a duplicate.
    assert (await hooks.deliver(PATH_A, payloads[3], delivery="burst-3")).status_code == 429
    other = await hooks.deliver(PATH_B, payloads[0], token=TOKEN_B, delivery="burst-0")
    assert other.status_code == 202  # team-b's budget is its own
    assert hooks.counted("rate_limited") == 2


async def test_an_oversized_body_is_refused_before_anything_else(hooks: Hooks) -> None:
    payload = github_push("docs/setup.md", *[f"docs/f{n:05d}.md" for n in range(4000)])
    assert len(payload) > 64 * 1024
    answer = await hooks.deliver(PATH_A, payload)
    assert answer.status_code == 413
    assert hooks.requested(hooks.team_a) is None


async def test_a_captured_delivery_replayed_under_a_new_id_is_a_duplicate(hooks: Hooks) -> None:
    """The delivery id is an unsigned header: the signed body itself names the delivery."""
    payload = github_push("docs/setup.md")
    first = await hooks.deliver(PATH_A, payload, delivery="original")
    assert (first.status_code, first.json()["result"]) == (202, "requested")
    replayed = await hooks.deliver(PATH_A, payload, delivery="forged-new-id")
    assert (replayed.status_code, replayed.json()["result"]) == (200, "duplicate")
    assert hooks.requested(hooks.team_a) == first.json()["request"]  # the replay requested nothing
    # Another push (another body) is judged as usual, and the same body on another source is its own.
    assert (await hooks.deliver(PATH_A, github_push("docs/other.md"), delivery="next")).json()["result"] == "requested"
    other = await hooks.deliver(PATH_B, payload, token=TOKEN_B, delivery="original")
    assert other.json()["result"] == "requested"


async def test_a_body_nested_too_deep_is_a_bad_payload(hooks: Hooks) -> None:
    depth = 30_000  # as deep as the fixture's 64 KiB cap allows; judge() is held to 100,000 below
    answer = await hooks.deliver(PATH_A, b"[" * depth + b"]" * depth, delivery="deep")
    assert (answer.status_code, answer.json()["result"]) == (400, "bad_payload")
    assert "nested too deep" in answer.json()["message"]
    # Still serving, and a good delivery still requests its sync.
    assert (await hooks.deliver(PATH_A, github_push("docs/setup.md"), delivery="ok")).status_code == 202


@pytest.mark.parametrize("body", [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000])
def test_judge_refuses_a_hundred_thousand_levels_with_a_stable_answer(body: bytes) -> None:
    source = parse_source("team-a", "handbook", SPEC, allow_local=False)
    delivery = Delivery("github", "push", "deep")
    assert judge(source, delivery, body) == (
        400,
        "bad_payload",
        "not a push event: the JSON is nested too deep",
    )


async def test_a_push_listing_more_paths_than_are_matched_requests_a_sync(hooks: Hooks) -> None:
    unselected = [f"src/f{n:04d}.py" for n in range(MAX_MATCHED_PATHS + 1)]
    body = json.dumps({"ref": "refs/heads/main", "paths": unselected}).encode()
    answer = await hooks.deliver(PATH_A, body, headers=generic_headers(body, "many"))
    assert (answer.status_code, answer.json()["result"]) == (202, "requested")  # taken as touching anything
    few = json.dumps({"ref": "refs/heads/main", "paths": unselected[:MAX_MATCHED_PATHS]}).encode()
    answer = await hooks.deliver(PATH_A, few, headers=generic_headers(few, "few"))
    assert (answer.status_code, answer.json()["result"]) == (202, "ignored_paths")


def generic_headers(body: bytes, delivery: str, token: str = TOKEN_A) -> dict[str, str]:
    digest = hmac.new(token.encode(), body, hashlib.sha256).hexdigest()
    return {"X-KB-Signature-256": f"sha256={digest}", "X-KB-Delivery": delivery, "Content-Type": "application/json"}


class HeldFilter(PathFilter):
    """A source's real filter whose matching waits until the test lets it go: a match that is slow."""

    def __init__(self, include: list[str], exclude: list[str]) -> None:
        super().__init__(include, exclude)
        self.entered, self.release = threading.Event(), threading.Event()

    def matches(self, path: str) -> bool:
        self.entered.set()
        self.release.wait(60)
        return super().matches(path)


async def test_healthz_and_another_namespace_answer_while_a_match_runs(hooks: Hooks) -> None:
    held = HeldFilter(SPEC["paths"], SPEC["exclude"])
    source = parse_source("team-a", "handbook", SPEC, allow_local=False)
    hooks.receiver.register(replace(source, prepared=replace(source.prepared, filter=held)), "handbook", TOKEN_A)
    slow = asyncio.create_task(hooks.deliver(PATH_A, github_push("docs/setup.md"), delivery="slow"))
    try:
        assert await asyncio.to_thread(held.entered.wait, 60)
        async with httpx.AsyncClient(base_url=hooks.base) as client:
            assert (await client.get("/healthz")).json() == {"status": "ok"}
        other = await hooks.deliver(PATH_B, github_push("docs/setup.md"), token=TOKEN_B, delivery="other")
        assert (other.status_code, other.json()["result"]) == (202, "requested")
        assert not slow.done()
    finally:
        held.release.set()
    answer = await slow
    assert (answer.status_code, answer.json()["result"]) == (202, "requested")
