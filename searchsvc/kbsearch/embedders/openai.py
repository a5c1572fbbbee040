"""The OpenAI embedder: any OpenAI-compatible embeddings endpoint, batched, with retries and size checks."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import openai
import tenacity

from kbsearch.apikey import client_api_key
from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.errors import ConfigurationError, EmbedderUnavailableError
from kbsearch.retrying import Transient, backoff, retry_after, retryable_status

PROBE_TEXT = "dimension probe"


class OpenAIEmbedder(EmbeddingProvider):
    """Embeds through the real `openai` client, `batch_size` texts per request.

    Retries are done here with tenacity, not by the client (its `max_retries` is 0). The client's own retries
    (openai 3.x) pick the same statuses and read the same Retry-After headers, but they lack what
    these are for: a Retry-After above 120 s makes the client give up at once, where this waits
    the capped `backoff_max` and tries again; its backoff cap is a fixed 8 s; its sleeps cannot be
    replaced (the tests record them instead of sleeping); and the error it raises does not say how
    many attempts were made (`details.attempts`). A request is retried on 408, 409, 429, any 5xx,
    connection errors and timeouts, up to `max_retries` times, after sleeping
    `min(backoff_max, backoff_base * 2**attempt)` times a random factor in [0.5, 1) (jitter spreads
    out clients that failed together), or as long as the server's Retry-After asks, still capped
    at `backoff_max`. When the retries are used up, the call raises EmbedderUnavailableError (503).

    Other failures are not retried. During `load()` (start-up) they are configuration problems and
    raise ConfigurationError: a 401/403 means a wrong key, a 400/404 a wrong model, base URL or
    `dimensions`. After start-up the same failures raise EmbedderUnavailableError instead: a key
    revoked while the service runs must make writes and searches fail with 503, not crash them.

    Every vector must have the expected size: the configured `dimensions` (also sent with each
    request), or the size `load()` learns from a probe. A wrong-sized or missing vector raises, so
    nothing of the wrong shape is ever stored.

    The query lane is embed_documents itself: each call sends requests of its own, so a query
    never waits behind another caller's document here.
    """

    provider = "openai"

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        api_key: str | None = None,
        base_url: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 128,
        max_retries: int = 5,
        timeout: float = 60.0,
        *,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
    ):
        if batch_size < 1 or max_retries < 0 or timeout <= 0 or (dimensions is not None and dimensions < 1):
            raise ValueError("need batch_size >= 1, max_retries >= 0, timeout > 0 and dimensions >= 1")
        api_key = client_api_key(
            api_key, base_url, key_setting="SEARCHSVC_OPENAI_API_KEY", url_setting="SEARCHSVC_OPENAI_BASE_URL"
        )
        self.model = model
        self.batch_size = batch_size
        self.turn_texts = batch_size  # one request a turn
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._sleep = sleep
        self._jitter = jitter
        self._requested_dimensions = dimensions
        self._dimensions = dimensions
        self._loaded = False
        self._lock = threading.Lock()
        self._client = openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)

    @property
    def dimensions(self) -> int:  # type: ignore[override]
        if self._dimensions is None:
            raise RuntimeError("OpenAIEmbedder.dimensions is known only after load() when not configured")
        return self._dimensions

    def load(self) -> None:
        """Check the endpoint, the key and the model with one probe; learn the vector size."""
        with self._lock:
            if not self._loaded:
                self._embed_batch([PROBE_TEXT], startup=True)
                self._loaded = True

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        if self._dimensions is None:
            self.load()
        vectors: list[list[float]] = []
        for i in range(0, len(texts), self.batch_size):
            vectors.extend(self._embed_batch(list(texts[i : i + self.batch_size]), startup=False))
        return vectors

    def close(self) -> None:
        self._client.close()

    def _embed_batch(self, batch: list[str], *, startup: bool) -> list[list[float]]:
        extra: dict[str, Any] = {}
        if self._requested_dimensions is not None:
            extra["dimensions"] = self._requested_dimensions
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(Transient),
            stop=tenacity.stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            sleep=self._sleep,
            reraise=True,
        )
        try:
            return retrying(self._request, batch, extra, startup)
        except Transient as exc:
            attempts = retrying.statistics["attempt_number"]
            raise EmbedderUnavailableError(
                f"the embedding endpoint failed {attempts} times in a row: {exc.failure}",
                details={"attempts": attempts, "reason": type(exc.failure).__name__},
            ) from exc.failure

    def _request(self, batch: list[str], extra: dict[str, Any], startup: bool) -> list[list[float]]:
        """One request: the vectors, or Transient for a failure worth another try."""
        try:
            response = self._client.embeddings.create(input=batch, model=self.model, encoding_format="float", **extra)
        except openai.APIConnectionError as exc:  # includes timeouts
            raise Transient(exc, None) from exc
        except openai.APIStatusError as exc:
            if not retryable_status(exc.status_code):
                raise self._rejected(exc, startup) from exc
            raise Transient(exc, retry_after(exc.response.headers)) from exc
        except openai.OpenAIError as exc:  # an answer the client cannot parse
            raise self._fail(f"unexpected answer from the embedding endpoint: {exc}", startup) from exc
        return self._vectors(response, len(batch), startup)

    def _wait(self, state: tenacity.RetryCallState) -> float:
        """Exponential backoff with jitter, or the server's Retry-After when longer; capped at backoff_max."""
        failure = state.outcome.exception() if state.outcome is not None else None
        asked = failure.retry_after if isinstance(failure, Transient) else None
        return backoff(
            state.attempt_number - 1, base=self.backoff_base, cap=self.backoff_max, jitter=self._jitter(), asked=asked
        )

    def _vectors(self, response: Any, expected_count: int, startup: bool) -> list[list[float]]:
        data = sorted(response.data, key=lambda item: item.index)
        if [item.index for item in data] != list(range(expected_count)):
            raise self._fail(f"the embedding endpoint returned {len(data)} vectors for {expected_count} texts", startup)
        vectors = [[float(x) for x in item.embedding] for item in data]
        expected = self._dimensions if self._dimensions is not None else len(vectors[0])
        for vector in vectors:
            if len(vector) != expected or expected == 0:
                raise self._dimension_mismatch(expected, len(vector), startup)
        self._dimensions = expected
        return vectors

    def _dimension_mismatch(self, expected: int, got: int, startup: bool) -> Exception:
        source = "SEARCHSVC_OPENAI_DIMENSIONS" if self._requested_dimensions is not None else "the probe at start-up"
        message = (
            f"model {self.model!r} returned a {got}-dimensional vector, expected {expected} (from {source}); "
            "the model may not support the `dimensions` parameter, or changed behind the endpoint"
        )
        if startup:
            return ConfigurationError(message)
        return EmbedderUnavailableError(
            message, details={"reason": "dimension_mismatch", "expected": expected, "got": got}
        )

    def _rejected(self, exc: openai.APIStatusError, startup: bool) -> Exception:
        status = exc.status_code
        if status in (401, 403):
            hint = "the API key was rejected: check SEARCHSVC_OPENAI_API_KEY"
        else:
            hint = "check SEARCHSVC_OPENAI_MODEL, SEARCHSVC_OPENAI_BASE_URL and SEARCHSVC_OPENAI_DIMENSIONS"
        message = f"the embedding endpoint refused the request (HTTP {status}); {hint}: {exc.message}"
        if startup:
            return ConfigurationError(message)
        return EmbedderUnavailableError(message, details={"status": status})

    @staticmethod
    def _fail(message: str, startup: bool) -> Exception:
        return ConfigurationError(message) if startup else EmbedderUnavailableError(message)
