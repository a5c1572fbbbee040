"""The chart's peers: none by default; a ConfigMap the service's own parser reads, each token Secret mounted."""

from __future__ import annotations

from pathlib import Path

import yaml

from kbsearch.peers.config import parse_peers
from tests.chart.helmchart import SEARCH, assert_schema_rejects, container, env_of, render, render_ok

PEERS = [
    {
        "name": "eu-west",
        "url": "https://kb.eu-west.example",
        "scopes": ["team-a/*"],
        "timeoutSeconds": 1.5,
        "tokenSecret": {"name": "kb-peer-eu-west", "key": "token"},
    },
    {"name": "staging", "url": "http://kb-search.staging.svc:8000", "scopes": ["*"],
     "tokenSecret": {"name": "kb-peer-staging", "key": "reader"}},
]  # fmt: skip


def test_by_default_there_are_no_peers():
    manifests = render("default")
    assert not [c for c in manifests.all("ConfigMap") if c["metadata"]["name"].endswith("-peers")]
    assert "SEARCHSVC_PEERS_FILE" not in env_of(container(manifests, "Deployment", SEARCH, "search"))


def test_peers_render_a_peers_file_the_service_reads_and_mount_each_token_secret(tmp_path: Path):
    values = tmp_path / "peers.yaml"
    values.write_text(yaml.safe_dump({"peers": PEERS}))
    manifests = render_ok("-f", str(values))
    configmap = manifests.one("ConfigMap", f"{SEARCH}-peers")
    parsed = parse_peers(configmap["data"]["peers.yaml"])  # the service's own validation
    assert [(p.name, p.url, p.scopes, p.timeout_seconds) for p in parsed.peers] == [
        ("eu-west", "https://kb.eu-west.example", ["team-a/*"], 1.5),
        ("staging", "http://kb-search.staging.svc:8000", ["*"], None),
    ]
    assert "token" not in configmap["data"]["peers.yaml"].replace("tokenFile", "").replace("/token", "")
    search = container(manifests, "Deployment", SEARCH, "search")
    assert env_of(search)["SEARCHSVC_PEERS_FILE"]["value"] == "/etc/kb-peers-file/peers.yaml"
    mounts = {m["name"]: m for m in search["volumeMounts"]}
    spec = manifests.one("Deployment", SEARCH)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["peers-file"]["configMap"]["name"] == f"{SEARCH}-peers"
    for peer in parsed.peers:
        secret = next(p["tokenSecret"] for p in PEERS if p["name"] == peer.name)
        mount = mounts[f"peer-{peer.name}"]
        assert mount["readOnly"] and str(peer.token_file) == f"{mount['mountPath']}/token"
        assert volumes[f"peer-{peer.name}"]["secret"]["secretName"] == secret["name"]
        assert volumes[f"peer-{peer.name}"]["secret"]["items"] == [{"key": secret["key"], "path": "token"}]
    annotations = manifests.one("Deployment", SEARCH)["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/peers" in annotations


def test_the_schema_refuses_a_peer_named_like_the_local_store_or_with_credentials_in_its_url(tmp_path: Path):
    for bad, where in (({"name": "local"}, "/peers/0/name"), ({"url": "https://u:p@kb.example"}, "/peers/0/url")):
        values = tmp_path / "bad.yaml"
        values.write_text(yaml.safe_dump({"peers": [PEERS[0] | bad]}))
        assert_schema_rejects(["-f", str(values)], where)
