"""The webhook receiver: git hosts' push deliveries become the sources' sync-now requests.

Served by aiohttp (it comes with kopf) on its own port, off unless KBOPERATOR_WEBHOOK_PORT is
set. A source opts in with `spec.webhook.secretRef`, a Secret of its own namespace labelled
`kb.knowledgebase.dev/secret-type: webhook` whose key `token` is the webhook secret. Its
receiver path is `/hook/<sha256 of namespace/name/token>` (status.webhookPath): unguessable
without the secret, and a new one when the secret changes. So no one can trigger a source
without its own namespace's secret, and a path names one source only.

A delivery, in order: known path (else 404); body within the size cap (aiohttp answers 413);
valid signature (hooks.signatures; else 401); neither a delivery id already handled nor a body
accepted within the last hour (else 200 "duplicate": the id is an unsigned header, so a
captured delivery replayed under a new id is caught by its body); a push (else 202
"ignored_event": a ping, another event; 400 "bad_payload" for a body that is not JSON, or
nested too deep to decode); of the source's repository and ref, touching a path its
include/exclude globs select (else 202 "ignored_*", counted); within the source's rate limit
(else 429); then the sync-now annotation is set to `push:<time>:<delivery id>` (202
"requested"), which the source's loop runs as an incremental sync (statemachine).
Every outcome is counted in kb_operator_webhook_deliveries{result}.

Bounds: decoding the body and matching its paths run in the receiver's own threads, never on
the event loop, so /healthz and other sources' deliveries are answered meanwhile. Decoding is
linear in the body (capped by maxBodyBytes); at most MAX_MATCHED_PATHS paths are matched, each in
time linear in its length (sync.paths); a push listing more is taken as touching the source,
which is what a push whose paths are unknown gets anyway.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import kubernetes.client
from aiohttp import web

from kboperator.crd import GROUP, PLURAL, PUSH_REQUEST_PREFIX, SYNC_REQUEST_ANNOTATION, VERSION
from kboperator.hooks.push import PushError, parse_push, same_ref, same_repository
from kboperator.hooks.signatures import Delivery, identify, verify
from kboperator.kube.metrics import OperatorMetrics
from kboperator.kube.source import Source

__all__ = [
    "MAX_MATCHED_PATHS",
    "HookTarget",
    "SyncRequester",
    "WebhookReceiver",
    "hook_path",
    "judge",
    "push_request",
    "push_request_time",
]

log = logging.getLogger(__name__)

_REMEMBERED_DELIVERIES = 512  # per source: hosts redeliver within minutes, not after hundreds of pushes
_REPLAY_WINDOW_S = 3600.0  # an accepted body is a duplicate for this long, whatever its delivery id
MAX_MATCHED_PATHS = 1000  # a push listing more paths is taken as touching the source
_MATCHING_THREADS = 2

RequestSync = Callable[[str, str, str], Awaitable[None]]


def hook_path(namespace: str, name: str, token: str) -> str:
    """The receiver path of a source: it cannot be guessed without the source's webhook secret."""
    return "/hook/" + hashlib.sha256(f"{namespace}/{name}/{token}".encode()).hexdigest()


_STAMP = "%Y%m%dT%H%M%S.%fZ"


def push_request(delivery_id: str, received: datetime.datetime) -> str:
    """The sync-request value for a delivery: `push:<when it arrived>:<delivery id>`."""
    return f"{PUSH_REQUEST_PREFIX}{received.strftime(_STAMP)}:{delivery_id}"[:253]


def push_request_time(value: object) -> datetime.datetime | None:
    """When the push behind a `push:` sync request arrived; None for any other request."""
    if not isinstance(value, str) or not value.startswith(PUSH_REQUEST_PREFIX):
        return None
    stamp = value[len(PUSH_REQUEST_PREFIX) :].split(":", 1)[0]
    try:
        return datetime.datetime.strptime(stamp, _STAMP).replace(tzinfo=datetime.UTC)
    except ValueError:
        return None


@dataclass
class HookTarget:
    """One source that takes webhooks: what a delivery is checked against."""

    namespace: str
    name: str
    source: Source
    secret: bytes
    tokens: float = 0.0
    refilled: float = 0.0
    seen: collections.OrderedDict[str, None] = field(default_factory=collections.OrderedDict)
    # Digests of the bodies accepted, with when (time.monotonic()): the replay window.
    bodies: collections.OrderedDict[str, float] = field(default_factory=collections.OrderedDict)

    def take(self, rate_per_minute: float, burst: int) -> bool:
        """A token bucket: `burst` deliveries at once, then `rate_per_minute`."""
        now = time.monotonic()
        if self.refilled == 0.0:
            self.tokens = float(burst)
        else:
            self.tokens = min(float(burst), self.tokens + (now - self.refilled) * rate_per_minute / 60)
        self.refilled = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True

    def handled(self, delivery_id: str, body_digest: str) -> bool:
        """Whether this delivery id, or this exact signed body within the replay window, was accepted."""
        oldest = time.monotonic() - _REPLAY_WINDOW_S
        while self.bodies and next(iter(self.bodies.values())) < oldest:
            self.bodies.popitem(last=False)
        return delivery_id in self.seen or body_digest in self.bodies

    def remember(self, delivery_id: str, body_digest: str) -> None:
        self.seen[delivery_id] = None
        self.bodies[body_digest] = time.monotonic()
        for remembered in (self.seen, self.bodies):
            while len(remembered) > _REMEMBERED_DELIVERIES:
                remembered.popitem(last=False)

    def forget(self, delivery_id: str, body_digest: str) -> None:
        self.seen.pop(delivery_id, None)
        self.bodies.pop(body_digest, None)


def judge(source: Source, delivery: Delivery, body: bytes) -> tuple[int, str, str] | None:
    """Why a signed delivery requests no sync of `source` (status, result, message); None: it does.

    Blocking (the receiver runs it in a thread): linear in the body, MAX_MATCHED_PATHS paths at most.
    """
    try:
        payload = json.loads(body or b"null")
    except RecursionError:
        return 400, "bad_payload", "not a push event: the JSON is nested too deep"
    except ValueError as exc:
        return 400, "bad_payload", f"not a push event: {exc}"
    try:
        push = parse_push(delivery.host, delivery.event, payload)
    except PushError as exc:
        return 400, "bad_payload", f"not a push event: {exc}"
    if push is None:
        return 202, "ignored_event", f"event {delivery.event or 'unknown'!r} is not a push"
    if not same_repository(push, source.location):
        return 202, "ignored_repository", "the push is for another repository"
    if not same_ref(push, source.sync.repo.ref):
        return 202, "ignored_ref", f"the push did not move {source.sync.repo.ref!r}"
    paths = push.paths
    path_filter = source.prepared.filter
    if paths is not None and len(paths) <= MAX_MATCHED_PATHS and not any(path_filter.matches(p) for p in paths):
        return 202, "ignored_paths", "the push touched no path the source's globs select"
    return None


class SyncRequester:
    """Sets a source's sync-now annotation through the Kubernetes API, as `kubectl annotate` does."""

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self._api = kubernetes.client.CustomObjectsApi(api_client)

    async def __call__(self, namespace: str, name: str, value: str) -> None:
        body = {"metadata": {"annotations": {SYNC_REQUEST_ANNOTATION: value}}}
        await asyncio.to_thread(
            self._api.patch_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name, body,
            _request_timeout=30, _content_type="application/merge-patch+json",
        )  # fmt: skip


class WebhookReceiver:
    """The registry of sources that take webhooks, and the aiohttp server that receives them."""

    def __init__(
        self,
        request_sync: RequestSync,
        metrics: OperatorMetrics,
        *,
        max_body_bytes: int = 5 * 1024 * 1024,
        rate_per_minute: float = 30.0,
        burst: int = 10,
    ) -> None:
        self.request_sync = request_sync
        self.deliveries = metrics.webhook_deliveries
        self.rate_per_minute = rate_per_minute
        self.burst = burst
        self.max_body_bytes = max_body_bytes
        self._targets: dict[str, HookTarget] = {}
        self._paths: dict[tuple[str, str], str] = {}
        self._runner: web.AppRunner | None = None
        self._matching: ThreadPoolExecutor | None = None
        self.port: int | None = None

    def register(self, source: Source, name: str, token: str) -> str:
        """Take webhooks for `source` (again, with a new spec or secret); returns its path."""
        path = hook_path(source.namespace, name, token)
        key = (source.namespace, name)
        old = self._paths.get(key)
        previous = self._targets.pop(old, None) if old else None
        target = HookTarget(source.namespace, name, source, token.encode())
        if previous is not None and old == path:  # the same secret: keep its rate and deliveries
            target.tokens, target.refilled = previous.tokens, previous.refilled
            target.seen, target.bodies = previous.seen, previous.bodies
        self._targets[path] = target
        self._paths[key] = path
        return path

    def unregister(self, namespace: str, name: str) -> None:
        path = self._paths.pop((namespace, name), None)
        if path:
            self._targets.pop(path, None)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_body_bytes)
        app.router.add_post("/hook/{digest}", self._receive)
        app.router.add_get("/healthz", self._healthz)
        return app

    async def start(self, port: int, addr: str = "0.0.0.0") -> None:
        """Serve on `port` (0: any free port, see `self.port`)."""
        self._matching = ThreadPoolExecutor(_MATCHING_THREADS, thread_name_prefix="webhook-match")
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, addr, port)
        await site.start()
        server = site._server  # aiohttp keeps the bound socket there; the public API only has the name
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port
        log.info("webhook receiver listening on %s:%s", addr, self.port)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._matching is not None:
            self._matching.shutdown(wait=False, cancel_futures=True)
            self._matching = None

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    def _answer(self, status: int, result: str, message: str, **extra: str) -> web.Response:
        self.deliveries.labels(result=result).inc()
        return web.json_response({"result": result, "message": message, **extra}, status=status)

    async def _receive(self, request: web.Request) -> web.Response:
        target = self._targets.get(request.path)
        if target is None:
            return self._answer(404, "unknown_path", "no source takes webhooks at this path")
        body = await request.read()  # aiohttp refuses a body over client_max_size with 413
        headers = dict(request.headers)
        delivery = identify(headers)
        if delivery is None or not verify(headers, body, target.secret):
            return self._answer(401, "bad_signature", "missing or invalid signature")
        # The body is what the signature vouches for: its digest names the delivery, whatever the
        # (unsigned) id header says.
        body_digest = hashlib.sha256(body).hexdigest()
        delivery_id = delivery.delivery_id or body_digest
        if target.handled(delivery_id, body_digest):
            return self._answer(200, "duplicate", "this delivery was already handled")
        loop = asyncio.get_running_loop()
        refused = await loop.run_in_executor(self._matching, judge, target.source, delivery, body)
        if refused is not None:
            return self._answer(*refused)
        if target.handled(delivery_id, body_digest):  # the same delivery, accepted while this one was judged
            return self._answer(200, "duplicate", "this delivery was already handled")
        # Only what would start a sync spends the source's budget; a refused delivery is not
        # remembered, so the host's redelivery is judged again.
        if not target.take(self.rate_per_minute, self.burst):
            response = self._answer(429, "rate_limited", "too many deliveries for this source; try again later")
            response.headers["Retry-After"] = str(max(1, int(60 / max(self.rate_per_minute, 0.001))))
            return response
        target.remember(delivery_id, body_digest)
        value = push_request(delivery_id, datetime.datetime.now(datetime.UTC))
        try:
            await self.request_sync(target.namespace, target.name, value)
        except Exception as exc:  # noqa: BLE001 - the host retries a 503; the reason is logged
            log.warning("source %s/%s: setting the sync request failed: %s", target.namespace, target.name, exc)
            target.forget(delivery_id, body_digest)  # a redelivery must be able to succeed
            return self._answer(503, "request_failed", "the sync request could not be set; deliver again")
        log.info("source %s/%s: sync requested by webhook delivery %s", target.namespace, target.name, delivery_id)
        return self._answer(202, "requested", "sync requested", request=value)
