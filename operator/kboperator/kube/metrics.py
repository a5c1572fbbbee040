"""Prometheus metrics: syncs by result, documents by outcome, sync duration, sources by phase, skipped fetches."""

from __future__ import annotations

import contextlib
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from kboperator.kube.resource import Phase
from kboperator.models import SyncResult

_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class OperatorMetrics:
    """The operator's own registry, so several operators (or tests) never collide."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.syncs = Counter(
            "kb_operator_syncs",
            "Sync attempts by result: success, partial or failed.",
            ["result"],
            registry=self.registry,
        )
        self.documents = Counter(
            "kb_operator_documents",
            "Documents handled by syncs, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "kb_operator_sync_duration_seconds",
            "Duration of sync attempts.",
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.sources = Gauge(
            "kb_operator_sources",
            "KnowledgeSources by phase.",
            ["phase"],
            registry=self.registry,
        )
        self.cleanups = Counter(
            "kb_operator_cleanups",
            "Deletion-policy runs by result.",
            ["result"],
            registry=self.registry,
        )
        self.drift_checks = Counter(
            "kb_operator_drift_checks",
            "Drift checks between syncs by result: clean, drift, or failed (the service did not answer).",
            ["result"],
            registry=self.registry,
        )
        self.fetches_skipped = Counter(
            "kb_operator_fetches_skipped",
            "Syncs that found the ref still at the last synced commit (git ls-remote) and fetched nothing.",
            registry=self.registry,
        )
        self.webhook_deliveries = Counter(
            "kb_operator_webhook_deliveries",
            "Webhook deliveries by result: requested, ignored_paths, ignored_ref, ignored_repository, "
            "ignored_event, duplicate, rate_limited, bad_signature, bad_payload, unknown_path, request_failed.",
            ["result"],
            registry=self.registry,
        )
        self.freshness_lag = Gauge(
            "kb_operator_source_freshness_lag_seconds",
            "Per source: from first seeing the remote's newest commit to its documents being searchable (last sync).",
            ["source"],
            registry=self.registry,
        )
        self.last_success = Gauge(
            "kb_operator_source_last_success_timestamp_seconds",
            "Per source: when its last successful sync ended (time() minus this is the age).",
            ["source"],
            registry=self.registry,
        )
        self.behind_bound = Gauge(
            "kb_operator_source_behind_bound",
            "Per source with a freshness bound: 1 while it is behind it, else 0.",
            ["source"],
            registry=self.registry,
        )
        self.push_to_searchable = Histogram(
            "kb_operator_push_to_searchable_seconds",
            "From a webhook's push delivery to the pushed commit being searchable.",
            buckets=(0.5, 1, 2, 3, 5, 10, 30, 60, 300, 900, 3600),
            registry=self.registry,
        )
        self._phases: dict[str, str] = {}
        self._lock = threading.Lock()
        self._server: tuple[WSGIServer, threading.Thread] | None = None
        for phase in Phase:
            self.sources.labels(phase=phase.value).set(0)

    def record_sync(self, result: SyncResult) -> None:
        """Count one finished sync and what it did to each document."""
        self.syncs.labels(result="success" if result.ok else "partial").inc()
        self.duration.observe(result.duration_s)
        if not result.fetched:
            self.fetches_skipped.inc()
        for outcome, count in (
            ("added", result.added),
            ("modified", result.modified),
            ("deleted", result.deleted),
            ("renamed", result.renamed),
            ("unchanged", result.unchanged),
            ("skipped", len(result.skipped)),
            ("failed", len(result.failed)),
        ):
            if count:
                self.documents.labels(outcome=outcome).inc(count)

    def record_failure(self, duration_s: float) -> None:
        """Count a sync that raised before producing a result."""
        self.syncs.labels(result="failed").inc()
        self.duration.observe(duration_s)

    def set_phase(self, source_id: str, phase: str | None) -> None:
        """Remember a source's phase (None when it is gone) and refresh the gauge."""
        with self._lock:
            if phase is None:
                self._phases.pop(source_id, None)
                for gauge in (self.freshness_lag, self.last_success, self.behind_bound):
                    with contextlib.suppress(KeyError):  # never set for this source
                        gauge.remove(source_id)
            else:
                self._phases[source_id] = phase
            counts = {p.value: 0 for p in Phase}
            for value in self._phases.values():
                counts[value] = counts.get(value, 0) + 1
            for value, count in counts.items():
                self.sources.labels(phase=value).set(count)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Expose /metrics on `port` in a daemon thread; port 0 means disabled."""
        if port and self._server is None:
            self._server = start_http_server(port, addr=addr, registry=self.registry)

    @property
    def serving(self) -> bool:
        """Whether /metrics is being served."""
        return self._server is not None

    def close(self) -> None:
        """Stop serving /metrics."""
        if self._server is not None:
            server, thread = self._server
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
            self._server = None
