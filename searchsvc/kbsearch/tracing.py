"""OpenTelemetry traces, opt-in (SEARCHSVC_TRACING): the one module that imports opentelemetry.

Off (the default), nothing of the SDK is imported or built and `span` hands back one shared no-op
object, so each traced point costs one attribute read. On, `installed` builds a TracerProvider with
an OTLP/HTTP exporter (the SDK reads the standard OTEL_* variables: endpoint, headers, sampler,
service name) and makes it the process's global provider too, so the spans FastAPI and the MCP SDK
make themselves are exported with ours: FastAPI's HTTP server span (`POST /api/v1/search`, parented
from the request's `traceparent` header) and the MCP SDK's (`tools/call search`, from `_meta`).

What a span carries, by the GenAI, database, HTTP and MCP semantic conventions: operation names,
model and store names, counts, document ids with their scores. Never a query's or a document's
text, nor a token: an attribute is a name, a number or an id.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes import db_attributes as db
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.util.types import AttributeValue

from kbsearch.models import SearchHit
from kbsearch.settings import TracingSettings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

__all__ = ["Span", "annotate", "inject", "installed", "span"]

log = logging.getLogger(__name__)
TRACER_NAME = "kbsearch"
# gen_ai.operation.name's well-known values (the conventions' GenAiOperationNameValues).
RETRIEVAL, EMBEDDINGS = "retrieval", "embeddings"


class Span:
    """What a traced point may add to its span; the no-op one when tracing is off."""

    __slots__ = ("_span",)

    def __init__(self, otel_span: trace.Span | None = None) -> None:
        self._span = otel_span

    def answered(self, outcome: str, input_tokens: int, output_tokens: int) -> None:
        """An ask's outcome and the chat model's token counts (GenAI usage attributes)."""
        if self._span is not None:
            self._span.set_attribute("kb.ask.outcome", outcome)
            if input_tokens or output_tokens:
                self._span.set_attribute(gen_ai.GEN_AI_USAGE_INPUT_TOKENS, input_tokens)
                self._span.set_attribute(gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS, output_tokens)

    def retrieved(self, hits: Sequence[SearchHit], documents: int) -> None:
        """gen_ai.retrieval.documents: the first `documents` hits' ids and scores (no text), as JSON."""
        if self._span is None or documents <= 0:
            return
        shown = [{"id": hit.id, "score": round(_score(hit), 4)} for hit in hits[:documents]]
        self._span.set_attribute(gen_ai.GEN_AI_RETRIEVAL_DOCUMENTS, json.dumps(shown))
        self._span.set_attribute("kb.retrieval.hits", len(hits))


def _score(hit: SearchHit) -> float:
    return hit.relevance if hit.relevance is not None else hit.score


_NOOP = Span()


class _NoopContext(AbstractContextManager[Span]):
    def __enter__(self) -> Span:
        return _NOOP

    def __exit__(self, *exc: object) -> None:
        return None


_NOOP_CONTEXT = _NoopContext()


@dataclass
class _State:
    tracer: trace.Tracer | None = None
    documents: int = 0
    delegate: _Delegate | None = None


_state = _State()


def enabled() -> bool:
    return _state.tracer is not None


def span(name: str, attributes: Mapping[str, AttributeValue] | None = None) -> AbstractContextManager[Span]:
    """A child span of the current one while the block runs; the shared no-op when tracing is off."""
    if _state.tracer is None:
        return _NOOP_CONTEXT
    return _live(_state.tracer, name, trace.SpanKind.INTERNAL, attributes)


@contextmanager
def _live(
    tracer: trace.Tracer,
    name: str,
    kind: trace.SpanKind,
    attributes: Mapping[str, AttributeValue] | None,
    parent: otel_context.Context | None = None,
) -> Iterator[Span]:
    with tracer.start_as_current_span(name, context=parent, kind=kind, attributes=attributes) as current:
        try:
            yield Span(current)
        except BaseException as exc:
            current.set_attribute(error_attributes.ERROR_TYPE, type(exc).__qualname__)
            raise


# The points the services trace, each one line where it is used.


def retrieval(store: str, top_k: int, mode: str) -> AbstractContextManager[Span]:
    """A search: `retrieval {store}` (GenAI retrieval span); the caller adds `retrieved(hits)`."""
    if _state.tracer is None:
        return _NOOP_CONTEXT
    attributes: dict[str, AttributeValue] = {
        gen_ai.GEN_AI_OPERATION_NAME: RETRIEVAL,
        gen_ai.GEN_AI_DATA_SOURCE_ID: store,
        gen_ai.GEN_AI_REQUEST_TOP_K: top_k,
        "kb.search.mode": mode,
    }
    return span(f"{RETRIEVAL} {store}", attributes)


def documents_shown() -> int:
    """How many hits a retrieval span names (SEARCHSVC_TRACING_DOCUMENTS)."""
    return _state.documents


def embedding(provider: str, model: str) -> AbstractContextManager[Span]:
    """A query's embedding: `embeddings {model}` (GenAI embeddings span)."""
    if _state.tracer is None:
        return _NOOP_CONTEXT
    attributes: dict[str, AttributeValue] = {
        gen_ai.GEN_AI_OPERATION_NAME: EMBEDDINGS,
        gen_ai.GEN_AI_REQUEST_MODEL: model,
        gen_ai.GEN_AI_PROVIDER_NAME: provider,
    }
    return span(f"{EMBEDDINGS} {model}", attributes)


def engine(backend: str, collection: str, mode: str) -> AbstractContextManager[Span]:
    """The store's query: `search {collection}` (database client span; never the query itself)."""
    if _state.tracer is None:
        return _NOOP_CONTEXT
    attributes: dict[str, AttributeValue] = {
        db.DB_SYSTEM_NAME: "qdrant",  # Qdrant Edge embedded or a Qdrant server: `kb.store.backend` says which
        db.DB_OPERATION_NAME: "search",
        db.DB_COLLECTION_NAME: collection,
        "kb.store.backend": backend,
        "kb.search.mode": mode,
    }
    return span(f"search {collection}", attributes)


def rerank(reranker: str, candidates: int) -> AbstractContextManager[Span]:
    """The second stage: `rerank {reranker}` over `candidates` passages (their text stays out)."""
    if _state.tracer is None:
        return _NOOP_CONTEXT
    return span(f"rerank {reranker}", {"kb.rerank.name": reranker, "kb.rerank.candidates": candidates})


def ask(mode: str, model: str | None) -> AbstractContextManager[Span]:
    """A grounded answer: `ask` with its searches below it; the chat model by name, never the question."""
    if _state.tracer is None:
        return _NOOP_CONTEXT
    attributes: dict[str, AttributeValue] = {"kb.ask.mode": mode}
    if model is not None:
        attributes[gen_ai.GEN_AI_REQUEST_MODEL] = model
    return span("ask", attributes)


def annotate(attributes: Mapping[str, AttributeValue]) -> None:
    """Attributes for the span already current (the MCP SDK's server span, say); nothing when off."""
    if _state.tracer is not None:
        trace.get_current_span().set_attributes(attributes)


def inject(headers: MutableMapping[str, str]) -> None:
    """The current trace's `traceparent` (and `tracestate`) into an outbound request's headers."""
    if _state.tracer is not None:
        propagate.inject(headers)


# Installing: the provider for the app's life.


@contextmanager
def installed(settings: TracingSettings) -> Iterator[None]:
    """Tracing on for the block when SEARCHSVC_TRACING is set; the spans are flushed when it ends."""
    if not settings.tracing:
        yield
        return
    provider = _provider(settings)
    _state.delegate = _state.delegate or _install_global()
    _state.delegate.current = provider
    _state.tracer = provider.get_tracer(TRACER_NAME)
    _state.documents = settings.tracing_documents
    log.info("tracing on", extra={"documents": settings.tracing_documents})
    try:
        yield
    finally:
        _state.tracer = None
        _state.delegate.current = None
        provider.shutdown()  # exports what the batch still holds


def _provider(settings: TracingSettings) -> SdkTracerProvider:
    # Imported here: with tracing off the SDK and the exporter are never loaded.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override this default (Resource.create merges them).
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: "knowledge-search"}))
    endpoint = str(settings.tracing_endpoint) if settings.tracing_endpoint else None  # None: OTEL_EXPORTER_OTLP_*
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


class _Delegate(trace.TracerProvider):
    """The process's global provider, set once: it hands out tracers that follow the installed provider,
    so the MCP SDK's module-level tracer reaches this app's provider (and nothing once it is closed)."""

    def __init__(self) -> None:
        self.current: trace.TracerProvider | None = None

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _Following(self, args, kwargs)


@dataclass
class _Following(trace.Tracer):
    owner: _Delegate
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def _tracer(self) -> trace.Tracer:
        current = self.owner.current
        return current.get_tracer(*self.args, **self.kwargs) if current is not None else trace.NoOpTracer()

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._tracer().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:  # passes the real tracer's through
        return self._tracer().start_as_current_span(*args, **kwargs)


def _install_global() -> _Delegate:
    delegate = _Delegate()
    trace.set_tracer_provider(delegate)
    return delegate
