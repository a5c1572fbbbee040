"""The emulated API server behaves like the real one where kopf depends on it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.support.kube import KS, OPERATOR_TOKEN, KubeApi, KubeEmulator

BASE = "/apis/kb.knowledgebase.dev/v1alpha1/namespaces/kb/knowledgesources"
URL = "https://git.example.com/acme/docs.git"
SPEC = {"repository": {"url": URL}}
AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


async def _patch(
    kube: KubeEmulator, path: str, body: object, kind: str = "merge", headers: dict[str, str] | None = None
) -> int:
    headers = {"Content-Type": f"application/{kind}-patch+json", **(headers or {})}
    response = await kube.patch(path, data=json.dumps(body), headers=headers)
    return response.status


async def _post(kube: KubeEmulator, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = await kube.post(BASE, json=body)
    return response.status, await response.json()


async def test_server_assigns_metadata_and_bumps_generation_on_spec_changes_only(kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    await api.create("a", SPEC)
    created = api.get("a")["metadata"]
    assert created["uid"] and created["creationTimestamp"] and created["generation"] == 1
    assert await _patch(kube, f"{BASE}/a", {"metadata": {"labels": {"l": "v"}}}) == 200
    labelled = api.get("a")["metadata"]
    assert labelled["generation"] == 1 and int(labelled["resourceVersion"]) > int(created["resourceVersion"])
    assert await _patch(kube, f"{BASE}/a", {"spec": {"suspend": True}}) == 200
    assert api.get("a")["metadata"]["generation"] == 2


async def test_status_is_a_subresource(kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    body = api.body("a", SPEC) | {"status": {"phase": "Synced"}}
    assert (await _post(kube, body))[0] < 300
    assert "status" not in api.get("a")  # a create never sets status
    await _patch(kube, f"{BASE}/a", {"spec": {"suspend": True}, "status": {"phase": "Failed"}})
    assert api.get("a")["spec"]["suspend"] is True and "status" not in api.get("a")
    await _patch(kube, f"{BASE}/a/status", {"spec": {"suspend": False}, "status": {"phase": "Synced"}})
    assert api.get("a")["spec"]["suspend"] is True and api.status("a") == {"phase": "Synced"}
    assert api.get("a")["metadata"]["generation"] == 2


async def test_a_stale_json_patch_test_op_is_refused_with_422(kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    await api.create("a", SPEC)
    version = api.get("a")["metadata"]["resourceVersion"]
    add = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
        {"op": "add", "path": "/metadata/finalizers", "value": ["f"]},
    ]
    assert await _patch(kube, f"{BASE}/a", add, "json") == 200
    assert await _patch(kube, f"{BASE}/a", add, "json") == 422
    assert kube.objects[KS, "kb", "a"]["metadata"]["finalizers"] == ["f"]


async def test_finalizers_hold_deletion_until_removed(kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    await api.create("a", SPEC)
    await _patch(kube, f"{BASE}/a", {"metadata": {"finalizers": ["f"]}})
    await api.delete("a")
    assert api.get("a")["metadata"]["deletionTimestamp"]
    await _patch(kube, f"{BASE}/a", {"metadata": {"finalizers": None}})
    assert api.get("a") is None


async def test_a_watch_misses_nothing_and_replays_nothing_older_than_asked(kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    await api.create("old", SPEC)
    listing = await (await kube.get(BASE)).json()
    since = listing["metadata"]["resourceVersion"]
    async with kube.get(f"{BASE}?watch=true&resourceVersion={since}") as stream:
        await api.create("new", SPEC)
        line = await asyncio.wait_for(stream.content.readline(), 60)
    event = json.loads(line)
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "new")


async def test_generate_name_gives_each_event_its_own_name(kube: KubeEmulator) -> None:
    for _ in range(2):
        body = {"metadata": {"generateName": "kopf-event-", "namespace": "kb"}, "reason": "R"}
        response = await kube.post("/api/v1/namespaces/kb/events", json=body)
        assert response.status == 200
    names = [key[2] for key in kube.objects if key[0].plural == "events"]
    assert len(set(names)) == 2 and all(n.startswith("kopf-event-") for n in names)


# --- the CRD's structural schema, as the API server applies it ------------------------------


async def test_an_object_the_crd_refuses_is_refused_with_422_and_its_causes(kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    bad = api.body("a", {"repository": {"url": URL, "ref": "-x"}, "schedule": "hourly", "deletionPolicy": "Keep"})
    status, answer = await _post(kube, bad)
    assert status == 422 and answer["reason"] == "Invalid"
    causes = {c["field"] for c in answer["details"]["causes"]}
    assert causes == {"spec.repository.ref", "spec.schedule", "spec.deletionPolicy"}
    assert 'knowledgesources.kb.knowledgebase.dev "a" is invalid' in answer["message"]
    status, answer = await _post(kube, api.body("b", {"paths": ["docs/**"]}))
    assert status == 422 and [c["field"] for c in answer["details"]["causes"]] == ["spec"]  # repository is required
    assert api.get("a") is None and api.get("b") is None


async def test_defaults_are_applied_and_undeclared_fields_pruned(kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    await api.create("a", {"repository": {"url": URL, "branch": "dev"}, "scheduel": "@daily"})
    assert api.get("a")["spec"] == {
        "repository": {"url": URL, "ref": "main"},
        "paths": ["**/*.md"],
        "exclude": [],
        "maxFileSizeBytes": 1048576,
        "schedule": "@every 1h",
        "suspend": False,
        "deletionPolicy": "Delete",
        "driftPolicy": "Auto",
    }
    # metadata is the server's own: the schema neither prunes nor defaults it.
    assert api.get("a")["metadata"]["annotations"] == {}


async def test_a_status_patch_is_validated_and_pruned_and_kopf_keeps_its_own_field(kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    await api.create("a", SPEC)
    assert await _patch(kube, f"{BASE}/a/status", {"status": {"phase": "Done"}}) == 422
    assert await _patch(kube, f"{BASE}/a/status", {"status": {"documentCount": -1}}) == 422
    assert await _patch(kube, f"{BASE}/a/status", {"status": {"lastSyncTime": "yesterday"}}) == 422
    twice = [
        {"type": "Ready", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2024-05-01T10:00:00Z"}
    ] * 2
    assert await _patch(kube, f"{BASE}/a/status", {"status": {"conditions": twice}}) == 422  # a list-map key twice
    assert api.status("a") == {}
    patch = {"status": {"phase": "Synced", "documentsIndexed": 3, "kopf": {"progress": {"sync": {"retries": 1}}}}}
    assert await _patch(kube, f"{BASE}/a/status", patch) == 200
    assert api.status("a") == {"phase": "Synced", "kopf": {"progress": {"sync": {"retries": 1}}}}


async def test_what_the_operator_wrote_that_the_crd_refused_or_pruned_is_kept(kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    await api.create("a", SPEC)
    assert await _patch(kube, f"{BASE}/a/status", {"status": {"madeUp": 1}}, headers=AS_OPERATOR) == 200
    assert await _patch(kube, f"{BASE}/a/status", {"status": {"phase": "Done"}}, headers=AS_OPERATOR) == 422
    assert await _patch(kube, f"{BASE}/a/status", {"status": {"other": 1}}) == 200  # the test's own: not kept
    assert kube.schema_problems == [
        f"PATCH {BASE}/a/status wrote status.madeUp, which the CRD does not declare (pruned)",
        f'PATCH {BASE}/a/status refused: status.phase: Unsupported value: "Done": '
        "supported values: ['Pending', 'Syncing', 'Synced', 'Failed', 'Suspended']",
    ]


async def test_what_the_operator_sent_to_the_wrong_endpoint_is_kept(kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    await api.create("a", SPEC)
    assert await _patch(kube, f"{BASE}/a", {"status": {"phase": "Synced"}}, headers=AS_OPERATOR) == 200
    assert await _patch(kube, f"{BASE}/a/status", {"spec": {"suspend": True}}, headers=AS_OPERATOR) == 200
    version = api.get("a")["metadata"]["resourceVersion"]
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
        {"op": "add", "path": "/status", "value": {"phase": "Failed"}},
    ]
    assert await _patch(kube, f"{BASE}/a", ops, "json", headers=AS_OPERATOR) == 200
    assert api.status("a") == {} and api.get("a")["spec"]["suspend"] is False  # all of it ignored
    assert kube.schema_problems == [
        f"PATCH {BASE}/a wrote status, which this endpoint ignores",
        f"PATCH {BASE}/a/status wrote spec, which this endpoint ignores",
        f"PATCH {BASE}/a wrote status, which this endpoint ignores",
    ]


async def test_an_object_stored_under_a_laxer_crd_can_still_have_its_status_written(kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    await api.create("a", {"repository": {"url": URL, "ref": "--upload-pack=x"}}, checked=False)
    # Ratcheting (Kubernetes 1.30+): the unchanged invalid ref does not block other writes...
    assert await _patch(kube, f"{BASE}/a/status", {"status": {"phase": "Failed"}}) == 200
    assert await _patch(kube, f"{BASE}/a", {"spec": {"suspend": True}}) == 200
    # ...but a new invalid value is refused, and a valid one accepted.
    assert await _patch(kube, f"{BASE}/a", {"spec": {"repository": {"ref": "--other"}}}) == 422
    assert await _patch(kube, f"{BASE}/a", {"spec": {"repository": {"ref": "main"}}}) == 200


# --- watch expiry ----------------------------------------------------------------------------


async def test_an_expired_watch_ends_with_410_and_an_old_version_is_gone(kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    await api.create("a", SPEC)
    since = (await (await kube.get(BASE)).json())["metadata"]["resourceVersion"]
    async with kube.get(f"{BASE}?watch=true&resourceVersion={since}") as stream:
        await kube.expire_watches()
        event = json.loads(await asyncio.wait_for(stream.content.readline(), 60))
        assert await asyncio.wait_for(stream.content.readline(), 60) == b""  # the server closed the stream
    assert event["type"] == "ERROR" and event["object"]["kind"] == "Status"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
    async with kube.get(f"{BASE}?watch=true&resourceVersion={since}") as stream:  # too old now
        event = json.loads(await asyncio.wait_for(stream.content.readline(), 60))
    assert event["type"] == "ERROR" and event["object"]["code"] == 410
    assert kube.expired_watches == 2
    # A re-list gives a version to watch from again.
    since = (await (await kube.get(BASE)).json())["metadata"]["resourceVersion"]
    async with kube.get(f"{BASE}?watch=true&resourceVersion={since}") as stream:
        await api.create("c", SPEC)
        event = json.loads(await asyncio.wait_for(stream.content.readline(), 60))
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "c")
