"""What the handlers share: settings, metrics, the Secret reader, clones, engines and the sync slots."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from kboperator.git.auth import HostKeys
from kboperator.git.repo import RepoCache
from kboperator.kube.engines import EngineCache
from kboperator.kube.metrics import OperatorMetrics
from kboperator.kube.secrets import SecretReader, service_token
from kboperator.kube.source import ServiceRef
from kboperator.kube.webhooks import SyncRequester, WebhookReceiver
from kboperator.searchclient import SearchClient
from kboperator.settings import OperatorSettings
from kboperator.sync.engine import SyncEngine


class OperatorContext:
    """The operator's composition root: built once at start-up and kept in kopf's memo; every
    source shares it (settings, metrics, the Secret reader, clones, engines, slots, webhooks)."""

    def __init__(
        self,
        settings: OperatorSettings,
        *,
        secrets: SecretReader,
        metrics: OperatorMetrics | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.secrets = secrets
        self.metrics = metrics or OperatorMetrics()
        self.policy = settings.service_policy
        host_keys = HostKeys(settings.ssh_known_hosts_file, trust_on_first_use=settings.ssh_trust_on_first_use)
        self.repos = RepoCache(
            settings.cache_dir,
            local_root=settings.local_repositories_root,
            host_keys=host_keys,
            partial=settings.partial_clone,
        )
        # The bound on concurrent syncs across all sources (one slow repository never holds up
        # more than one slot; each source also syncs at most once at a time, see reconcile.SourceState).
        self.slots = asyncio.Semaphore(settings.max_concurrent_syncs)
        self._transport = transport  # tests reach an in-process search service through it
        self._engines = EngineCache(self._new_engine, settings.max_search_clients)
        #: The webhook receiver (started by the `configure` handler), when KBOPERATOR_WEBHOOK_PORT is set.
        self.webhooks: WebhookReceiver | None = None
        if settings.webhook_port:
            self.webhooks = WebhookReceiver(
                SyncRequester(secrets.api_client),
                self.metrics,
                max_body_bytes=settings.webhook_max_body_bytes,
                rate_per_minute=settings.webhook_rate_per_minute,
                burst=settings.webhook_burst,
            )

    @asynccontextmanager
    async def engine(self, namespace: str, service: ServiceRef) -> AsyncIterator[SyncEngine]:
        """The engine for a source's search service, held for the block.

        The URL must be allowed (InvalidSpecError, and nothing is read or sent, otherwise). The
        token is the source's Secret's, else the operator's own for its own default service,
        else none: the operator's token never goes anywhere else.
        """
        target = self.policy.target(service.url)
        token: str | None
        if service.secret_name:
            token = await service_token(self.secrets, namespace, service.secret_name, target)
            identity = f"secret:{namespace}/{service.secret_name}"
        elif target == self.policy.default:
            token = self.settings.search_token.get_secret_value() if self.settings.search_token else None
            identity = "operator"
        else:
            token, identity = None, "none"
        async with self._engines.lease(str(target), identity, token) as engine:
            yield engine

    def _new_engine(self, url: str, token: str | None) -> SyncEngine:
        client = SearchClient(
            url,
            token,
            transport=self._transport,
            timeout=self.settings.http_timeout_seconds,
            max_attempts=self.settings.http_max_attempts,
            backoff_base=self.settings.http_backoff_seconds,
        )
        return SyncEngine(client, self.repos)

    async def close(self) -> None:
        """Close every HTTP client and stop serving metrics and webhooks."""
        if self.webhooks is not None:
            await self.webhooks.close()
        await self._engines.close()
        self.secrets.close()
        self.metrics.close()
