"""`helm template` (GitOps tools render this way) cannot keep random tokens: every render would rotate them.
The chart refuses, naming the value to set, unless the Secret is the user's or the render is throwaway."""

from __future__ import annotations

import pytest

from tests.chart.helmchart import parse, template


@pytest.mark.parametrize(
    ("args", "names"),
    [
        ((), ("knowledge-base-tokens", "auth.existingSecret")),
        (
            ("--set", "auth.existingSecret=kb-tokens", "--set", "store.mode=server"),
            ("api-key", "store.server.existingSecret"),
        ),
    ],
)
def test_a_render_without_a_cluster_refuses_to_make_up_secrets(args, names):
    result = template(*args, throwaway=False)
    assert result.returncode != 0, "rendered random secrets with no cluster to keep them"
    assert "this render has no cluster" in result.stderr and "GitOps" in result.stderr, result.stderr
    for name in names:
        assert name in result.stderr, result.stderr


def test_the_users_own_secrets_render_without_a_cluster():
    args = ("--set", "auth.existingSecret=kb-tokens", "--set", "store.mode=server")
    result = template(*args, "--set", "store.server.existingSecret=kb-qdrant", throwaway=False)
    assert result.returncode == 0, result.stderr
    kinds = {(d["kind"], d["metadata"]["name"]) for d in parse(result.stdout)}
    assert not any(kind == "Secret" for kind, _ in kinds), kinds  # nothing generated, nothing to rotate


def test_a_throwaway_render_says_so():
    result = template(throwaway=True)
    assert result.returncode == 0, result.stderr
    secrets = [d for d in parse(result.stdout) if d["kind"] == "Secret"]
    assert any(d["metadata"]["name"].endswith("-tokens") for d in secrets)
