"""Signatures and push payloads of each git host, in the shapes their documentation records
(tests/operator/webhook_payloads/): who sent it, which repository, ref and paths it names."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from kboperator.hooks.push import Push, parse_push, same_ref, same_repository
from kboperator.hooks.signatures import identify, verify
from kboperator.repourl import parse_repo_url
from tests.support.paths import REPO_ROOT

PAYLOADS = REPO_ROOT / "tests" / "operator" / "webhook_payloads"
SECRET = b"s3cret-webhook-token-of-the-source"


def body(name: str) -> bytes:
    return (PAYLOADS / name).read_bytes()


def hmac_hex(secret: bytes, data: bytes) -> str:
    return hmac.new(secret, data, hashlib.sha256).hexdigest()


def signed(host: str, data: bytes, secret: bytes = SECRET) -> dict[str, str]:
    """The headers each host sends with a delivery, signed as it signs them."""
    digest = hmac_hex(secret, data)
    return {
        "github": {"X-GitHub-Event": "push", "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
                   "X-Hub-Signature-256": f"sha256={digest}",
                   "X-Hub-Signature": "sha1=" + hmac.new(secret, data, hashlib.sha1).hexdigest()},
        "gitlab": {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": secret.decode(),
                   "X-Gitlab-Event-UUID": "13792a34-cac6-4fda-95a8-c58e00a3954e",
                   "X-Gitlab-Webhook-UUID": "the-same-for-every-delivery-of-this-hook"},
        "gitea": {"X-Gitea-Event": "push", "X-Gitea-Delivery": "f6266f16-1bf3-46a5-9ea4-602e06ead473",
                  "X-Gitea-Signature": digest},
        "forgejo": {"X-Forgejo-Event": "push", "X-Forgejo-Delivery": "a9e6c6e3-41a4-4e8d-9d0c-93a2d8d0d5d2",
                    "X-Forgejo-Signature": digest},
        "bitbucket-server": {"X-Event-Key": "repo:refs_changed", "X-Request-Id": "fbd2a5e1-5d6c-4d0a-9d3c-0c1f",
                             "X-Hub-Signature": f"sha256={digest}"},
        "generic": {"X-KB-Delivery": "ci-run-42", "X-KB-Signature-256": f"sha256={digest}"},
    }[host]  # fmt: skip


CASES = [
    ("github", "github-push.json", "https://github.com/acme/handbook.git", {"docs/setup.md"}),
    ("gitlab", "gitlab-push.json", "git@gitlab.example.com:acme/handbook.git",
     {"faq/new.md", "faq/index.md", ".gitlab-ci.yml", "old/notes.md"}),
    ("gitea", "gitea-push.json", "https://codeberg.org/acme/handbook", {"onboarding.md"}),
    ("forgejo", "gitea-push.json", "ssh://git@codeberg.org/acme/handbook.git", {"onboarding.md"}),
    ("bitbucket-server", "bitbucket-server-refs-changed.json", "https://bitbucket.example.com/scm/acme/handbook.git",
     None),
]  # fmt: skip


@pytest.mark.parametrize(("host", "payload", "source_url", "paths"), CASES, ids=[c[0] for c in CASES])
def test_each_hosts_push_is_verified_and_read(host: str, payload: str, source_url: str, paths: set[str] | None) -> None:
    data = body(payload)
    headers = signed(host, data)
    delivery = identify(headers)
    assert delivery is not None and delivery.delivery_id and "the-same-for-every" not in delivery.delivery_id
    assert verify(headers, data, SECRET)
    push = parse_push(delivery.host, delivery.event, json.loads(data))
    assert push is not None
    assert push.paths == (frozenset(paths) if paths is not None else None)
    location = parse_repo_url(source_url, allow_local=False)
    assert same_repository(push, location) and same_ref(push, "main") and same_ref(push, "refs/heads/main")
    assert not same_ref(push, "release")
    other = parse_repo_url(source_url.replace("handbook", "handbook-fork"), allow_local=False)
    assert not same_repository(push, other)


@pytest.mark.parametrize("host", ["github", "gitlab", "gitea", "forgejo", "bitbucket-server", "generic"])
def test_a_wrong_secret_a_changed_body_or_no_signature_is_refused(host: str) -> None:
    data = body("github-push.json")
    assert verify(signed(host, data), data, SECRET)
    assert not verify(signed(host, data, b"another-namespaces-secret-token"), data, SECRET)
    assert not verify(signed(host, data), data.replace(b"main", b"mainx"), SECRET) or host == "gitlab"
    assert not verify(signed(host, data), data, b"")
    unsigned = {
        k: v for k, v in signed(host, data).items() if "signature" not in k.lower() and "token" not in k.lower()
    }
    assert identify(unsigned) is None and not verify(unsigned, data, SECRET)


def test_a_signature_in_another_format_is_refused() -> None:
    data = body("github-push.json")
    digest = hmac_hex(SECRET, data)
    assert not verify({"X-Hub-Signature-256": digest}, data, SECRET)  # without `sha256=`
    assert not verify({"X-Hub-Signature-256": "sha1=" + digest}, data, SECRET)
    assert not verify({"X-Gitea-Signature": "sha256=" + digest}, data, SECRET)
    assert verify({"X-Hub-Signature-256": "sha256=" + digest.upper()}, data, SECRET)  # hex case is not meaning


def test_truncated_commit_lists_leave_the_paths_unknown() -> None:
    gitlab = json.loads(body("gitlab-push.json"))
    gitlab["total_commits_count"] = 25  # GitLab lists at most 20 commits
    push = parse_push("gitlab", "Push Hook", gitlab)
    assert push is not None and push.paths is None
    github = json.loads(body("github-push.json"))
    github["commits"] = github["commits"] * 20  # GitHub stops at 20 without saying how many
    push = parse_push("github", "push", github)
    assert push is not None and push.paths is None
    github["commits"], github["deleted"] = [], True  # a deleted branch
    push = parse_push("github", "push", github)
    assert push is not None and push.paths is None


def test_other_events_are_not_pushes_and_garbage_is_refused() -> None:
    assert parse_push("github", "ping", {"zen": "Keep it logically awesome.", "hook_id": 1}) is None
    assert parse_push("gitlab", "Merge Request Hook", {"object_kind": "merge_request"}) is None
    assert parse_push("bitbucket-server", "pr:opened", {"eventKey": "pr:opened"}) is None
    with pytest.raises(ValueError, match="JSON object"):
        parse_push("github", "push", ["not", "an", "object"])
    with pytest.raises(ValueError, match="no ref"):
        parse_push("github", "push", {"repository": {}})


def test_a_generic_push_names_its_ref_and_maybe_paths() -> None:
    push = parse_push("generic", "", {"ref": "refs/heads/main", "paths": ["docs/a.md"]})
    assert push == Push(frozenset(), frozenset({"refs/heads/main"}), frozenset({"docs/a.md"}))
    assert same_repository(push, parse_repo_url("https://git.example.com/a/b.git", allow_local=False))
    push = parse_push("generic", "", {"ref": "main", "repository": "https://git.example.com/a/b"})
    assert push is not None and push.paths is None and same_ref(push, "main")
    assert not same_repository(push, parse_repo_url("https://git.example.com/a/c.git", allow_local=False))
