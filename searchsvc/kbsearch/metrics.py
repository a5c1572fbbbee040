"""Prometheus metrics, on a registry owned by one app so tests never share counters, and their listener.

Metrics are served on a port of their own (SEARCHSVC_METRICS_PORT), never on the API's: they name
every peer and count requests by route and peer, so a team that can reach the API would learn the
peers' names and when other teams search. A separate port is what a NetworkPolicy can tell apart
(the chart admits only networkPolicy.metricsFrom to it); a token on the API port would be one more
secret for every Prometheus, and a path on a port every tenant reaches.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.http_requests = Counter(
            "searchsvc_http_requests_total",
            "HTTP requests by route and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.http_seconds = Histogram(
            "searchsvc_http_request_duration_seconds",
            "HTTP request duration by route.",
            ["method", "route"],
            registry=self.registry,
        )
        self.documents_written = Counter(
            "searchsvc_documents_written_total",
            "Document PUTs by outcome (created, updated, unchanged).",
            ["status"],
            registry=self.registry,
        )
        self.documents_converted = Counter(
            "searchsvc_documents_converted_total",
            "Documents converted to text, by format (pdf, docx, ipynb, ...) and outcome (ok or an error code).",
            ["format", "outcome"],
            registry=self.registry,
        )
        self.chunks_embedded = Counter(
            "searchsvc_chunks_embedded_total",
            "Chunks sent to the embedder (reused vectors excluded).",
            registry=self.registry,
        )
        self.chunks_deleted = Counter(
            "searchsvc_chunks_deleted_total",
            "Chunks removed by document or source deletes.",
            registry=self.registry,
        )
        self.search_seconds = Histogram(
            "searchsvc_search_duration_seconds",
            "Search time by mode and stage (embed, engine).",
            ["mode", "stage"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )
        self.reranks = Counter(
            "searchsvc_reranks_total",
            "Reranks by backend and outcome (ok; timeout or error: the first-stage order was served).",
            ["backend", "outcome"],
            registry=self.registry,
        )
        self.rerank_seconds = Histogram(
            "searchsvc_rerank_duration_seconds",
            "Rerank time by backend.",
            ["backend"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.ask_seconds = Histogram(
            "searchsvc_ask_duration_seconds",
            "Ask time, from the request to the final answer, by mode (llm, extractive).",
            ["mode"],
            registry=self.registry,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160),
        )
        self.asks = Counter(
            "searchsvc_asks_total",
            "Asks by mode and outcome (grounded, ungrounded, or the error code).",
            ["mode", "outcome"],
            registry=self.registry,
        )
        self.llm_tokens = Counter(
            "searchsvc_llm_tokens_total",
            "Chat model tokens, as the endpoint reported them, by kind (prompt, completion).",
            ["kind"],
            registry=self.registry,
        )
        self.llm_errors = Counter(
            "searchsvc_llm_errors_total",
            "Failed chat model requests, retried ones included, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.query_log_written = Counter(
            "searchsvc_query_log_written_total",
            "Query log entries written to the store.",
            registry=self.registry,
        )
        self.query_log_dropped = Counter(
            "searchsvc_query_log_dropped_total",
            "Query log entries dropped, by reason (queue_full, store_error, store_unwritable).",
            ["reason"],
            registry=self.registry,
        )
        self.query_log_pruned = Counter(
            "searchsvc_query_log_pruned_total",
            "Query log entries deleted by retention (age or count).",
            registry=self.registry,
        )
        self.conversion_sandbox = Gauge(
            "searchsvc_conversion_sandbox_layer",
            "Layers of the conversion child's sandbox: 1 in force, 0 not given by this kernel "
            "(empty-workdir, empty-environment, no-new-privs, landlock, seccomp).",
            ["layer"],
            registry=self.registry,
        )
        self.rebuild_documents = Gauge(
            "searchsvc_rebuild_documents",
            "Documents of the background rebuild under way: done and total.",
            ["kind"],
            registry=self.registry,
        )
        self.rebuild_rate = Gauge(
            "searchsvc_rebuild_documents_per_second",
            "Documents the background rebuild copies per second (0 when none runs).",
            registry=self.registry,
        )
        self.rebuild_running = Gauge(
            "searchsvc_rebuild_running",
            "1 while a background rebuild builds, checks, waits for a forced swap or swaps; else 0.",
            registry=self.registry,
        )
        self.rebuild_swaps = Counter(
            "searchsvc_rebuild_swaps_total",
            "Rebuilt collections by outcome of their self-check: swapped, refused, forced.",
            ["outcome"],
            registry=self.registry,
        )
        # Peers (kbsearch.peers): one series per peer name from the peers file.
        self.peer_seconds = Histogram(
            "searchsvc_peer_request_duration_seconds",
            "Time a peer took to answer a search (answered or not), by peer.",
            ["peer"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.peer_unanswered = Counter(
            "searchsvc_peer_unanswered_total",
            "Searches a peer did not answer, by peer and reason (timeout, error, malformed, oversized, "
            "open-circuit, scope-undecided).",
            ["peer", "reason"],
            registry=self.registry,
        )
        self.peer_timeouts = Counter(
            "searchsvc_peer_timeouts_total",
            "Searches a peer did not answer within its time budget, by peer.",
            ["peer"],
            registry=self.registry,
        )
        self.peer_hits = Counter(
            "searchsvc_peer_hits_total",
            "Hits a peer contributed to merged results (after the merge and the limit), by peer.",
            ["peer"],
            registry=self.registry,
        )
        # Judged questions (.kb/questions.yaml) of each source, as its last sync report gave them.
        self.source_quality = Gauge(
            "searchsvc_source_quality",
            "A source's judged questions as its last sync report measured them, by figure: hit_at_1, "
            "hit_at_5 (shares of questions whose expected page came first, or in the top 5) and facts "
            "(the share of answers holding their facts). Set by the replica that took the report.",
            ["source", "figure"],
            registry=self.registry,
        )
        self.source_questions = Gauge(
            "searchsvc_source_questions",
            "Judged questions of a source, by outcome: asked, failed.",
            ["source", "outcome"],
            registry=self.registry,
        )
        self.peer_breaker_state = Gauge(
            "searchsvc_peer_breaker_state",
            "A peer's circuit breaker: 0 closed, 1 half-open, 2 open.",
            ["peer"],
            registry=self.registry,
        )

    def record_quality(
        self, source: str, figures: Mapping[str, float | None], counts: Mapping[str, int | None]
    ) -> None:
        """The gauges of a source's judged questions (figures by `figure`, counts by `outcome`); a
        value None removes its series, so a figure a source no longer has is not shown stale."""
        series: tuple[tuple[Gauge, Mapping[str, float | None]], ...] = (
            (self.source_quality, figures),
            (self.source_questions, counts),
        )
        for gauge, values in series:
            for label, value in values.items():
                if value is None:
                    with suppress(KeyError):  # never set
                        gauge.remove(source, label)
                else:
                    gauge.labels(source, label).set(value)


@contextmanager
def metrics_listener(registry: CollectorRegistry, host: str, port: int) -> Iterator[int]:
    """Serve `registry` at http://host:port/metrics from a thread while the block runs; yields the port bound.

    prometheus_client's own threaded server: scrapes never wait on the event loop, and nothing but
    the registry is served there. OSError (the port is taken) propagates: start-up stops.
    """
    server, thread = start_http_server(port, addr=host, registry=registry)
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
