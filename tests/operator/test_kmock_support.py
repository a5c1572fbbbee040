"""The emulated API server behaves like the real one where kopf depends on it."""

from __future__ import annotations

import asyncio
import json

from tests.operator.kmock_support import KS, KubeApi, KubeEmulator

BASE = "/apis/kb.knowledgebase.dev/v1alpha1/namespaces/kb/knowledgesources"


async def _patch(kube: KubeEmulator, path: str, body: object, kind: str = "merge") -> int:
    response = await kube.patch(path, data=json.dumps(body), headers={"Content-Type": f"application/{kind}-patch+json"})
    return response.status


async def test_server_assigns_metadata_and_bumps_generation_on_spec_changes_only(kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    await api.create("a", {"x": 1})
    created = api.get("a")["metadata"]
    assert created["uid"] and created["creationTimestamp"] and created["generation"] == 1
    assert await _patch(kube, f"{BASE}/a", {"metadata": {"labels": {"l": "v"}}}) == 200
    labelled = api.get("a")["metadata"]
    assert labelled["generation"] == 1 and int(labelled["resourceVersion"]) > int(created["resourceVersion"])
    assert await _patch(kube, f"{BASE}/a", {"spec": {"x": 2}}) == 200
    assert api.get("a")["metadata"]["generation"] == 2


async def test_status_is_a_subresource(kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    await api.create("a", {"x": 1})
    await _patch(kube, f"{BASE}/a", {"spec": {"x": 2}, "status": {"phase": "ignored"}})
    assert api.get("a")["spec"] == {"x": 2} and "status" not in api.get("a")
    await _patch(kube, f"{BASE}/a/status", {"spec": {"x": 3}, "status": {"phase": "Synced"}})
    assert api.get("a")["spec"] == {"x": 2} and api.status("a") == {"phase": "Synced"}
    assert api.get("a")["metadata"]["generation"] == 2


async def test_a_stale_json_patch_test_op_is_refused_with_422(kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    await api.create("a", {})
    version = api.get("a")["metadata"]["resourceVersion"]
    add = [{"op": "test", "path": "/metadata/resourceVersion", "value": version},
           {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]
    assert await _patch(kube, f"{BASE}/a", add, "json") == 200
    assert await _patch(kube, f"{BASE}/a", add, "json") == 422
    assert kube.objects[KS, "kb", "a"]["metadata"]["finalizers"] == ["f"]


async def test_finalizers_hold_deletion_until_removed(kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    await api.create("a", {})
    await _patch(kube, f"{BASE}/a", {"metadata": {"finalizers": ["f"]}})
    await api.delete("a")
    assert api.get("a")["metadata"]["deletionTimestamp"]
    await _patch(kube, f"{BASE}/a", {"metadata": {"finalizers": None}})
    assert api.get("a") is None


async def test_a_watch_misses_nothing_and_replays_nothing_older_than_asked(kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    await api.create("old", {})
    listing = await (await kube.get(BASE)).json()
    since = listing["metadata"]["resourceVersion"]
    async with kube.get(f"{BASE}?watch=true&resourceVersion={since}") as stream:
        await api.create("new", {})
        line = await asyncio.wait_for(stream.content.readline(), 5)
    event = json.loads(line)
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "new")


async def test_generate_name_gives_each_event_its_own_name(kube: KubeEmulator) -> None:
    for _ in range(2):
        body = {"metadata": {"generateName": "kopf-event-", "namespace": "kb"}, "reason": "R"}
        response = await kube.post("/api/v1/namespaces/kb/events", json=body)
        assert response.status == 200
    names = [key[2] for key in kube.objects if key[0].plural == "events"]
    assert len(set(names)) == 2 and all(n.startswith("kopf-event-") for n in names)
