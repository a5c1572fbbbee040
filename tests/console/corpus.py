"""Documents for the console tests and its screenshots: a small platform handbook, many ADRs, one hostile page."""

from __future__ import annotations

HANDBOOK = "platform/handbook"
RUNBOOKS = "platform/runbooks"
BASE = "https://git.example.com/platform"

XSS_URI = f"{BASE}/handbook/-/blob/main/notes/hostile.md"
XSS_MARKER = "xsscanary"
XSS_CONTENT = f"""---
title: "<script>window.__xss = 'title'</script> {XSS_MARKER} notes"
---
# Hostile <img src=x onerror="window.__xss = 'heading'"> heading

{XSS_MARKER} text with <script>window.__xss = 'body'; alert('xss')</script> inside,
and a link <a href="javascript:window.__xss='link'">click</a> and <b onmouseover="window.__xss='b'">bold</b>.

A [markdown link](javascript:window.__xss='md'), an ![image](https://tracker.example.com/pixel.png "x"),
<svg onload="window.__xss='svg'"></svg><iframe src="javascript:window.__xss='frame'"></iframe>
<style>body {{ display: none }}</style><form action="https://evil.example.com"><input name=q></form>
<details open ontoggle="window.__xss='toggle'"><summary>More</summary>hidden</details>
"""

PAGES = {
    "deploy/rolling-deploys.md": (
        HANDBOOK,
        """---
title: Rolling deploys
tags: [deploy, kubernetes]
---
# Rolling deploys

## Before you deploy

Check that the change has a green pipeline and that the canary dashboards are quiet. A deploy
during an incident needs the incident commander's approval.

## Rolling out

Every service is deployed with a rolling update: `maxSurge: 25%` and `maxUnavailable: 0`, so
capacity never drops. Readiness probes gate each new pod; a pod that is not ready within five
minutes stops the rollout and pages the owning team. See the [deployment guide](../guides/deploying.md)
and the [Kubernetes docs](https://kubernetes.io/docs/concepts/workloads/controllers/deployment/).

```yaml
strategy:
  type: RollingUpdate
  rollingUpdate:
    maxSurge: 25%
    maxUnavailable: 0
```

| Setting | Value | Why |
|---|--:|---|
| maxSurge | 25% | room for new pods |
| maxUnavailable | 0 | capacity never drops |

!!! warning "Database migrations"
    A rollout that changes the schema must stay backward compatible for one release.

## Rolling back

`kubectl rollout undo deployment/<name>` returns to the previous ReplicaSet. Roll back first,
investigate second: a rollback is always safe because migrations are backward compatible.
""",
    ),
    "security/credential-rotation.md": (
        HANDBOOK,
        """---
title: Rotating database credentials
tags: [security, postgres]
---
# Rotating database credentials

## Schedule

Database passwords are rotated every 90 days, and at once when someone with access leaves.

## How to rotate

1. Create the new password in the secret manager as a second version.
2. Roll the application so it reads both versions.
3. Change the password in Postgres with `ALTER ROLE app PASSWORD ...`.
4. Remove the old version once connection pools have recycled.
""",
    ),
    "oncall/paging-policy.md": (
        RUNBOOKS,
        """---
title: On-call paging policy
tags: [oncall]
---
# On-call paging policy

## Who gets paged

The primary on-call engineer is paged for every alert marked `severity: page`. If nobody
acknowledges within 10 minutes the secondary is paged, then the engineering manager.

## Quiet hours

Warnings never page at night; they open a ticket for the next working day.
""",
    ),
    "oncall/disk-full.md": (
        RUNBOOKS,
        """---
title: Node disk full
tags: [oncall, kubernetes]
---
# Node disk full

## Symptoms

Pods are evicted with `DiskPressure`, image pulls fail, and the kubelet logs
`eviction manager: must evict pod(s) to reclaim ephemeral-storage`.

## Remedy

Cordon the node, delete unused images with `crictl rmi --prune`, and check for a pod writing
logs to its container filesystem instead of stdout.
""",
    ),
}


def adr(number: int) -> tuple[str, str]:
    topics = ["caching", "queues", "tracing", "feature flags", "schemas", "retries", "quotas", "backups"]
    topic = topics[number % len(topics)]
    content = f"""---
title: "ADR-{number:03d}: {topic} for the platform"
---
# ADR-{number:03d}: {topic}

## Context

Teams asked for a shared approach to {topic}; each service had grown its own.

## Decision

The platform offers one supported way to do {topic}, documented in the handbook, with defaults
that are safe for every team.
"""
    return f"adr/{number:03d}-{topic.replace(' ', '-')}.md", content


def seed(put, sources: tuple[str, str] = (HANDBOOK, RUNBOOKS), adrs: int = 30) -> None:
    """Write the handbook pages, `adrs` ADRs and the hostile page through `put(uri, content, **metadata)`."""
    handbook, runbooks = sources
    for path, (source, content) in PAGES.items():
        owner = handbook if source == HANDBOOK else runbooks
        put(f"{BASE}/{owner.split('/')[-1]}/-/blob/main/{path}", content, sourceIdentifier=owner, path=path)
    for number in range(1, adrs + 1):
        path, content = adr(number)
        put(f"{BASE}/handbook/-/blob/main/{path}", content, sourceIdentifier=handbook, path=path)
    hostile_source = handbook.rsplit("/", 1)[0] + "/qa"  # apart, so that demo searches can leave it out
    hostile_owner = "<script>window.__xss='meta'</script>"
    put(XSS_URI, XSS_CONTENT, sourceIdentifier=hostile_source, path="notes/hostile.md", owner=hostile_owner)
