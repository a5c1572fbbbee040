"""The traces' section: off unless SEARCHSVC_TRACING is set (kbsearch.tracing)."""

from __future__ import annotations

from pydantic import AnyHttpUrl, Field

from kbsearch.settings.base import Section

__all__ = ["TracingSettings"]


class TracingSettings(Section):
    # Off by default: no SDK is loaded and no span is made. The exporter, sampler and service name
    # also follow the standard OTEL_* variables, which the OpenTelemetry SDK reads itself.
    tracing: bool = False
    # The OTLP/HTTP traces URL (…/v1/traces); unset: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
    # OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318/v1/traces.
    tracing_endpoint: AnyHttpUrl | None = None
    # How many hits a retrieval span names by id and score (gen_ai.retrieval.documents); 0: none.
    tracing_documents: int = Field(default=10, ge=0, le=100)
