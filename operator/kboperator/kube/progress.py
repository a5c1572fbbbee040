"""A running sync's progress in its KnowledgeSource's status, written through the API at once.

kopf applies a handler's patch only when the call returns, and a sync runs inside one call: the
progress (status.progress and the Syncing condition, shaped by StatusWriter.progress) goes
straight to the `/status` subresource as a merge patch, like kopf's own. Throttled by
sync.reporting, so a sync of any size costs a handful of writes; the outcome's patch (kopf's,
at the handler's end) closes it with the final counts (StatusWriter.sync_ended).
"""

from __future__ import annotations

import asyncio

import kubernetes.client

from kboperator.crd import GROUP, PLURAL, VERSION
from kboperator.kube.status import StatusWriter
from kboperator.sync.reporting import Snapshot

#: A status write that takes longer is given up (the next snapshot tries again); the sync goes on.
PATCH_TIMEOUT_S = 10


class StatusProgress:
    """A sync.reporting sink: each snapshot as a patch of the source's status."""

    def __init__(
        self, api_client: kubernetes.client.ApiClient, writer: StatusWriter, namespace: str, name: str
    ) -> None:
        self._api = kubernetes.client.CustomObjectsApi(api_client)
        self.writer = writer
        self.namespace = namespace
        self.name = name

    async def __call__(self, snapshot: Snapshot) -> None:
        body = {"status": self.writer.progress(snapshot)}
        await asyncio.to_thread(
            self._api.patch_namespaced_custom_object_status, GROUP, VERSION, self.namespace, PLURAL, self.name, body,
            _request_timeout=PATCH_TIMEOUT_S, _content_type="application/merge-patch+json",
        )  # fmt: skip
