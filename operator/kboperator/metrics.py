"""Prometheus metrics: syncs by result, documents by outcome, sync duration, sources by phase."""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from kboperator.models import SyncResult
from kboperator.statemachine import Phase

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
        self._phases: dict[str, str] = {}
        self._lock = threading.Lock()
        self._server: tuple[WSGIServer, threading.Thread] | None = None
        for phase in Phase:
            self.sources.labels(phase=phase.value).set(0)

    def record_sync(self, result: SyncResult) -> None:
        """Count one finished sync and what it did to each document."""
        self.syncs.labels(result="success" if result.ok else "partial").inc()
        self.duration.observe(result.duration_s)
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
