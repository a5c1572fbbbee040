"""A Kubernetes API for in-process kopf tests: kmock 0.8 plus what a real API server does.

kmock's stock emulator is not enough for kopf (see shared/notes/platform.md); this subclass:
1. serves discovery for namespaces, events, Secrets and the KnowledgeSource CRD;
2. assigns uid, resourceVersion, creationTimestamp and generation (bumped on spec changes
   only), answers a failed JSON-patch `test` op with 422, and honours `generateName`;
3. subscribes a watch to changes before taking its snapshot, so nothing falls in between,
   and honours the watch's resourceVersion (lists report the current one), so a watch never
   replays a stale state that kopf has already patched past;
4. keeps the status subresource apart: a create or a patch of the object never sets status,
   and a patch of `/status` touches nothing else;
5. applies the CRD's structural schema (crds/, read at test time) to every KnowledgeSource
   write: prunes undeclared fields, applies defaults, refuses invalid objects with 422 (see
   crdschema.py); what it pruned from, refused of or ignored in the operator's writes (status
   sent to the object, or anything but status sent to `/status`) is kept in `schema_problems`;
6. knows the operator by its bearer token (the kubeconfig's) and records each of its requests in
   `operator_requests` (RBAC itself is judged by the real API server in tests/kube/);
7. answers TokenReview and SubjectAccessReview from a script (`reviews`, see kmock_reviews.py);
8. expires watches on demand (`expire_watches`): open streams end with an ERROR event holding
   a 410 Status, and a watch from an older resourceVersion gets the same, so a client must
   re-list, as after an etcd compaction.
It ignores label and field selectors, evaluates no CEL rules, and cannot parse a cluster-wide
`/api/v1/namespaces` list: the operator disables kopf's namespace scanning, so it never asks.

`running_operator` runs the real kopf operator in the test's event loop with
kopf.spawn_tasks/run_tasks (kopf.operator() would wait ~5 s at exit and cancel pytest's tasks).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import datetime
import itertools
import secrets
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import jsonpatch
import kmock
import kopf
import kubernetes.config.kube_config
import pytest
import yaml
from kmock import action

from tests.support.crdschema import StructuralSchema, knowledge_source_schema
from tests.support.kube_reviews import ReviewScript
from tests.support.rbac import ApiRequest, verb_of

GROUP, VERSION, PLURAL = "kb.knowledgebase.dev", "v1alpha1", "knowledgesources"
KS = kmock.resource(GROUP, VERSION, PLURAL)
SECRETS = kmock.resource("", "v1", "secrets")
EVENTS = kmock.resource("", "v1", "events")
NAMESPACES = kmock.resource("", "v1", "namespaces")
_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete"}
#: The operator's identity: its kubeconfig sends this bearer token; the test's own client none.
OPERATOR_TOKEN = "kmock-operator-serviceaccount"


class KubeEmulator(kmock.KubernetesEmulator):
    """kmock's emulator with server-assigned metadata, a race-free watch, a status subresource,
    the CRD's schema, and watch expiry."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._versions = itertools.count(1)
        self._version = 0
        self.schemas: dict[Any, StructuralSchema] = {KS: knowledge_source_schema()}
        #: Objects the test writes skip validation while set: as if stored under an older, laxer CRD.
        self.lax_for_users = False
        self.schema_problems: list[str] = []
        self.operator_requests: list[ApiRequest] = []
        self._compacted: dict[Any, int] = {}
        self.expired_watches = 0
        #: TokenReview and SubjectAccessReview, answered as the test scripts them.
        self.reviews = ReviewScript()
        self.resources[KS] = kmock.ResourceInfo(
            kind="KnowledgeSource",
            singular="knowledgesource",
            namespaced=True,
            shortnames={"ks"},
            verbs=_VERBS,
            subresources={"status"},
        )
        self.resources[SECRETS] = kmock.ResourceInfo(kind="Secret", namespaced=True, verbs=_VERBS)
        self.resources[EVENTS] = kmock.ResourceInfo(kind="Event", namespaced=True, verbs=_VERBS)
        self.resources[NAMESPACES] = kmock.ResourceInfo(kind="Namespace", namespaced=False, verbs=_VERBS)

    async def _handle(self, request: kmock.Request) -> Any:
        review = await self.reviews.answer(_method(request), request.url.path, request.data)
        if review is not None:
            return review
        self._authorize(request)
        if request.resource is None or request.action not in (action.CREATE, action.UPDATE, action.DELETE):
            return await super()._handle(request)
        async with self._lock:
            if request.action == action.CREATE:
                await self._create(request)
            elif request.action == action.UPDATE:
                await self._update(request)
            else:
                await self._delete(request)
        # Skip the parent's own bookkeeping (done above) but keep its routing and responses.
        return await kmock.RawHandler._handle(self, request)

    def _authorize(self, request: kmock.Request) -> None:
        """Record the operator's requests."""
        if not _is_operator(request):
            return
        resource = request.resource if request.resource is not None and request.resource.plural else None
        seen = ApiRequest(
            verb=_method(request).lower()
            if resource is None
            else verb_of(
                _method(request), named=request.name is not None, watch=request.params.get("watch") in ("true", "1")
            ),
            group=None if resource is None else resource.group or "",
            resource=None if resource is None else resource.plural,
            subresource=request.subresource,
            namespace=request.namespace,
            name=request.name,
            path=request.url.path,
        )
        self.operator_requests.append(seen)

    def _admit(self, request: kmock.Request, body: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
        """The object as the API server stores it: pruned and defaulted; 422 when invalid."""
        schema = self.schemas.get(request.resource)
        if schema is None:
            return body
        stored, pruned, causes = schema.admit(body, old)
        operator = _is_operator(request)
        what = f"{_method(request)} {request.url.path}"
        if causes and (operator or not self.lax_for_users):
            if operator:
                self.schema_problems += [f"{what} refused: {c.field}: {c.message}" for c in causes]
            name = body.get("metadata", {}).get("name", "")
            message = f'{_kind(request)} "{name}" is invalid: ' + ", ".join(f"{c.field}: {c.message}" for c in causes)
            raise kmock.KubernetesError(
                422,
                "Invalid",
                message,
                {
                    "name": name,
                    "group": request.resource.group,
                    "kind": _kind(request),
                    "causes": [c.as_status_cause() for c in causes],
                },
            )
        if pruned and operator:
            self.schema_problems += [f"{what} wrote {path}, which the CRD does not declare (pruned)" for path in pruned]
        return stored

    def _note_ignored(self, request: kmock.Request) -> None:
        """The parts of an operator's patch that the status subresource makes the server ignore."""
        patch = request.data
        if isinstance(patch, list):
            paths = [op.get("path", "") for op in patch if op.get("op") != "test"]
            touched = {path.split("/")[1] for path in paths if path.startswith("/")}
        else:
            touched = set(patch or {})
        ignored = touched - {"status"} if request.subresource == "status" else touched & {"status"}
        what = f"{_method(request)} {request.url.path}"
        self.schema_problems += [f"{what} wrote {part}, which this endpoint ignores" for part in sorted(ignored)]

    async def expire_watches(self, resource: Any = KS) -> None:
        """Expire every watch of `resource` now, as a compaction does: each must re-list.

        The cluster's revision moves on (as other writes move it) and everything older is
        compacted away: open streams end with 410, and so does any watch from an older version.
        """
        async with self._lock:
            self._compacted[resource] = int(self._next_version())
            await self._buses[resource].put({"type": "ERROR", "object": _gone(self._version)})

    async def _create(self, request: kmock.Request) -> None:
        body = copy.deepcopy(request.data)
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(4)
        meta.setdefault("namespace", request.namespace)
        key = (request.resource, meta.get("namespace"), meta["name"])
        if key in self._objects and not self._objects[key].deleted:
            raise kmock.KubernetesError(409, "AlreadyExists", f"{meta['name']} already exists")
        if "status" in self.resources[request.resource].subresources:
            body.pop("status", None)  # set through /status only
        body = self._admit(request, body)
        meta = body["metadata"]
        meta.update(uid=str(uuid.uuid4()), generation=1, creationTimestamp=_now())
        meta["resourceVersion"] = self._next_version()
        request.data.setdefault("metadata", {})["name"] = meta["name"]  # for the default responder
        if key in self._objects:
            self._objects[key].create(body)
        else:
            self._objects[key] = body
        await self._buses[request.resource].put({"type": "ADDED", "object": copy.deepcopy(body)})

    async def _update(self, request: kmock.Request) -> None:
        key = (request.resource, request.namespace, request.name)
        if key not in self._objects or self._objects[key].deleted:
            raise kmock.KubernetesObjectNotFoundError()
        old = copy.deepcopy(self._objects[key].raw)
        new = self._patched(old, request.data)
        has_status = "status" in self.resources[request.resource].subresources
        if has_status and _is_operator(request):
            self._note_ignored(request)
        if request.subresource == "status":
            new = (
                dict(old, status=new.get("status"))
                if "status" in new
                else {k: v for k, v in old.items() if k != "status"}
            )
        elif has_status:
            new = {k: v for k, v in new.items() if k != "status"} | (
                {"status": old["status"]} if "status" in old else {}
            )
        new = self._admit(request, new, old)
        if new == old:
            return  # a no-op patch keeps the resourceVersion and emits no event, like the real API
        meta = new["metadata"]
        if {k: v for k, v in new.items() if k not in ("metadata", "status")} != {
            k: v for k, v in old.items() if k not in ("metadata", "status")
        }:
            meta["generation"] = old["metadata"].get("generation", 1) + 1
        meta["resourceVersion"] = self._next_version()
        self._objects[key].history.append(new)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._objects[key].delete()
            await self._buses[request.resource].put({"type": "DELETED", "object": copy.deepcopy(new)})
        else:
            await self._buses[request.resource].put({"type": "MODIFIED", "object": copy.deepcopy(new)})

    async def _delete(self, request: kmock.Request) -> None:
        key = (request.resource, request.namespace, request.name)
        if key not in self._objects or self._objects[key].deleted:
            raise kmock.KubernetesObjectNotFoundError()
        body = copy.deepcopy(self._objects[key].raw)
        meta = body["metadata"]
        if meta.get("deletionTimestamp"):
            return
        if meta.get("finalizers"):
            meta["deletionTimestamp"] = _now()
            meta["resourceVersion"] = self._next_version()
            self._objects[key].history.append(body)
            await self._buses[request.resource].put({"type": "MODIFIED", "object": copy.deepcopy(body)})
        else:
            self._objects[key].delete()
            await self._buses[request.resource].put({"type": "DELETED", "object": body})

    def _next_version(self) -> str:
        self._version = next(self._versions)
        return str(self._version)

    async def _serve_list(self, request: kmock.Request) -> Any:
        listing = await super()._serve_list(request)
        listing["metadata"]["resourceVersion"] = str(self._version)
        return listing

    @staticmethod
    def _patched(old: dict[str, Any], patch: Any) -> dict[str, Any]:
        if isinstance(patch, list):  # application/json-patch+json
            try:
                return jsonpatch.apply_patch(old, patch, in_place=False)
            except jsonpatch.JsonPatchTestFailed:
                raise kmock.KubernetesError(422, "Invalid", "the object has been modified") from None
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise kmock.KubernetesError(422, "Invalid", str(exc)) from None
        return _merge(old, patch or {})  # application/merge-patch+json (RFC 7386)

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[Any]:
        yield b""  # send the headers now, so the client knows the stream is open
        bus = self._buses[request.resource]
        since = request.params.get("resourceVersion", "")
        since_version = int(since) if since.isdigit() else 0
        if since_version and since_version < self._compacted.get(request.resource, 0):
            self.expired_watches += 1
            yield {"type": "ERROR", "object": _gone(since_version)}
            return
        async with self._lock:  # writers hold the lock: subscribe and snapshot atomically
            mark = await bus.mark()
            snapshot = [
                {"type": "MODIFIED" if since_version else "ADDED", "object": copy.deepcopy(obj.raw)}
                for (resource, namespace, name), obj in list(self._objects.items())
                if not obj.deleted
                and self._selects(request, resource, namespace, name)
                and _version_of(obj.raw) > since_version
            ]
        try:
            for event in snapshot:
                yield event
            async for event in bus.stream(since=mark):
                if event.get("type") == "ERROR":  # expired: the stream ends here
                    self.expired_watches += 1
                    yield event
                    return
                meta = event.get("object", {}).get("metadata", {})
                if self._selects(request, request.resource, meta.get("namespace"), meta.get("name")):
                    yield event
        finally:
            await bus.unmark(mark)

    @staticmethod
    def _selects(request: kmock.Request, resource: Any, namespace: str | None, name: str | None) -> bool:
        return (
            resource == request.resource
            and (request.namespace is None or namespace == request.namespace)
            and (request.name is None or name == request.name)
        )


def _is_operator(request: kmock.Request) -> bool:
    auth = {k.lower(): v for k, v in request.headers.items()}.get("authorization", "")
    return auth == f"Bearer {OPERATOR_TOKEN}"


def _method(request: kmock.Request) -> str:
    return str(getattr(request.method, "value", request.method))


def _kind(request: kmock.Request) -> str:
    return f"{request.resource.plural}.{request.resource.group}"


def _gone(version: int) -> dict[str, Any]:
    """The Status a real API server streams when a watch's resourceVersion was compacted away."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"too old resource version: {version}",
        "reason": "Expired",
        "code": 410,
    }


def _version_of(body: dict[str, Any]) -> int:
    version = body.get("metadata", {}).get("resourceVersion", "")
    return int(version) if version.isdigit() else 0


def _merge(old: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(old) if isinstance(old, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- fixtures and helpers for tests that run the operator against the emulator -------------


@pytest.fixture
async def kube() -> AsyncIterator[KubeEmulator]:
    """The emulated API server on 127.0.0.1."""
    async with KubeEmulator() as emulator, kmock.Server(emulator):
        yield emulator


@pytest.fixture
def kubeconfig(kube: KubeEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kubeconfig for the emulator, where kopf's login and the Secret reader both look."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "kmock",
                "clusters": [{"name": "kmock", "cluster": {"server": str(kube.url).rstrip("/")}}],
                "users": [{"name": "kmock", "user": {"token": OPERATOR_TOKEN}}],
                "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock"}}],
            }
        )
    )
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # The client reads KUBECONFIG at import time only; its default location is read per call.
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    return path


@asynccontextmanager
async def running_operator(
    memo: kopf.Memo,
    *,
    namespaces: list[str] | None = None,
    timeout: float = 120,  # noqa: ASYNC109 - bounds the start
) -> AsyncIterator[kopf.Memo]:
    """The real kopf operator with kboperator's handlers, in this event loop (cluster-wide by default)."""
    import kboperator.kube.handlers  # noqa: F401  # registers the handlers in kopf's default registry

    # kopf cancels every task it did not create when it stops: keep ours out of its way.
    ignored = _Spared(asyncio.all_tasks())
    ready = asyncio.Event()
    tasks = await kopf.spawn_tasks(
        clusterwide=not namespaces, namespaces=namespaces or (), standalone=True, memo=memo, ready_flag=ready
    )
    runner = asyncio.create_task(kopf.run_tasks(tasks, ignored=ignored))
    ignored.add(runner)
    try:
        await asyncio.wait_for(ready.wait(), timeout)
        yield memo
    finally:
        current = asyncio.current_task()
        if current is not None:
            ignored.add(current)
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner


class _Spared(set[asyncio.Task[Any]]):
    """Tasks kopf must not cancel when it stops: the test's own, and the emulator's server side.

    The API server's connection handlers are created when a client connects, so those serving
    the test's own keep-alive connection would look like leftovers of the operator to kopf.
    """

    def __contains__(self, task: object) -> bool:
        if super().__contains__(task):
            return True
        coro = task.get_coro() if isinstance(task, asyncio.Task) else None
        return getattr(coro, "__qualname__", "").startswith("RequestHandler.")


class KubeApi:
    """What a user does with kubectl, against the emulator."""

    def __init__(self, kube: KubeEmulator, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"

    async def create(
        self, name: str, spec: dict[str, Any], annotations: dict[str, str] | None = None, *, checked: bool = True
    ) -> None:
        """Create a KnowledgeSource; `checked=False` stores one the CRD refuses, as an older CRD let it be."""
        self.kube.lax_for_users = not checked
        try:
            await self._ok(self.kube.post(self.base, json=self.body(name, spec, annotations)))
        finally:
            self.kube.lax_for_users = False

    def body(self, name: str, spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "KnowledgeSource",
            "metadata": {"name": name, "namespace": self.namespace, "annotations": annotations or {}},
            "spec": spec,
        }

    async def patch(self, name: str, changes: dict[str, Any]) -> None:
        headers = {"Content-Type": "application/merge-patch+json"}
        await self._ok(self.kube.patch(f"{self.base}/{name}", json=changes, headers=headers))

    async def annotate(self, name: str, key: str, value: str) -> None:
        await self.patch(name, {"metadata": {"annotations": {key: value}}})

    async def delete(self, name: str) -> None:
        await self._ok(self.kube.delete(f"{self.base}/{name}"))

    async def create_secret(self, name: str, data: dict[str, str]) -> None:
        encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": self.namespace},
            "type": "Opaque",
            "data": encoded,
        }
        await self._ok(self.kube.post(f"/api/v1/namespaces/{self.namespace}/secrets", json=body))

    def get(self, name: str) -> dict[str, Any] | None:
        """The stored object, or None once it is gone."""
        key = (KS, self.namespace, name)
        if key not in self.kube.objects or self.kube.objects[key].deleted:
            return None
        return copy.deepcopy(self.kube.objects[key].raw)

    def status(self, name: str) -> dict[str, Any]:
        return (self.get(name) or {}).get("status") or {}

    def events(self, name: str) -> list[dict[str, Any]]:
        """Events about one object, oldest first."""
        return [
            obj.raw
            for key, obj in self.kube.objects.items()
            if key[0] == EVENTS and not obj.deleted and obj.raw.get("involvedObject", {}).get("name") == name
        ]

    @staticmethod
    async def _ok(request: Any) -> None:
        response = await request
        text = await response.text()
        assert response.status < 300, f"{response.status}: {text}"


async def eventually(check: Callable[[], Any], *, timeout: float = 120, what: str = "") -> Any:  # noqa: ASYNC109 - a polling deadline
    """Poll `check` until it returns something truthy; fail after `timeout`.

    The deadline only bounds a broken run: these waits take a second or two, but a loaded
    machine (a full suite next to other work on two cores) can stretch them many times over.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = check()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.05)
