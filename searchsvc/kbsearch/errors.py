"""Domain errors. Each carries the HTTP status and stable code the API answers with.

ServiceError
├── InvalidRequestError        422  a request the contract does not allow
│   ├── ConversionError             a document its format's converter cannot read (code names why)
│   └── DocumentTooComplexError     a document whose chunking would pass a per-document budget
├── DocumentTooLargeError      413  content over the per-document limit
├── RequestTooLargeError       413  a request body over the body limit
├── UnauthenticatedError       401  no or wrong bearer token
├── ForbiddenError             403  a token that may not do this
├── NotFoundError              404  no such document (or not visible to the caller)
│   └── VersionNotFoundError        a search names a version none of its sources holds
├── RequestTimeoutError        408  the request body did not arrive in time
├── ConflictError              409  the document belongs to another source
│   └── WriteConflictError          a concurrent write of the same document won; retry
├── OverloadedError            429  too much work queued; retry later
│   └── BodyBudgetExceededError     the caller's share of request bodies in flight is spent
├── LLMUnavailableError        502  the language model could not answer (down, 5xx after retries, bad reply)
├── LLMTimeoutError            504  the language model did not answer in time
└── UnavailableError           503  transient: store or embedder not usable now
    ├── NotReadyError               still starting up
    ├── ServiceBusyError            the service's total of request bodies in flight is spent
    ├── StoreUnavailableError       the vector store failed or is unreachable
    ├── EmbedderUnavailableError    the embedding provider failed after retries
    └── AuthUnavailableError        a Kubernetes token or access review could not be decided

ConfigurationError is not an HTTP error: it stops start-up with a message (for example an
embedder that does not match the collection's vectors).
"""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    status_code = 500
    code = "INTERNAL_ERROR"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.details = details or {}
        if code is not None:
            self.code = code

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later (429 and 503)."""
        return self.status_code in (429, 503)


class InvalidRequestError(ServiceError):
    status_code = 422
    code = "VALIDATION_ERROR"


class NotFoundError(ServiceError):
    status_code = 404
    code = "NOT_FOUND"


class VersionNotFoundError(NotFoundError):
    """A search or ask names a documentation version none of the caller's (filtered) sources holds.

    Asking again cannot help; `details.available` lists the versions that exist (at most a few dozen)."""

    code = "VERSION_NOT_FOUND"


class ConversionError(InvalidRequestError):
    """A PDF, Word file, notebook... that cannot become text: corrupt, encrypted, no text layer, a bomb.

    Sending the same bytes again cannot help; the code says which problem it is.
    """

    code = "CONVERSION_FAILED"


class DocumentTooComplexError(InvalidRequestError):
    """Chunking the document would pass a per-document budget: chunks, characters produced or seconds.

    The same text always will, so it is not retryable; `details` names the limit that was reached.
    """

    code = "DOCUMENT_TOO_COMPLEX"


class DocumentTooLargeError(ServiceError):
    status_code = 413
    code = "DOCUMENT_TOO_LARGE"


class RequestTooLargeError(ServiceError):
    status_code = 413
    code = "REQUEST_TOO_LARGE"


class UnauthenticatedError(ServiceError):
    status_code = 401
    code = "UNAUTHENTICATED"


class ForbiddenError(ServiceError):
    status_code = 403
    code = "FORBIDDEN"


class RequestTimeoutError(ServiceError):
    status_code = 408
    code = "REQUEST_TIMEOUT"


class ConflictError(ServiceError):
    status_code = 409
    code = "CONFLICT"


class WriteConflictError(ConflictError):
    """Transient, unlike the other 409s: a write from another replica won the race."""

    code = "WRITE_CONFLICT"

    @property
    def retryable(self) -> bool:
        return True


class OverloadedError(ServiceError):
    status_code = 429
    code = "TOO_MANY_REQUESTS"


class BodyBudgetExceededError(OverloadedError):
    """Refused before the body is read: the caller's other bodies still in flight hold its share."""

    code = "BODY_BUDGET_EXCEEDED"


class LLMUnavailableError(ServiceError):
    """The chat model is the upstream here, so its failure is a 502, not our own 503."""

    status_code = 502
    code = "LLM_UNAVAILABLE"


class LLMTimeoutError(ServiceError):
    status_code = 504
    code = "LLM_TIMEOUT"


class UnavailableError(ServiceError):
    status_code = 503
    code = "UNAVAILABLE"


class NotReadyError(UnavailableError):
    code = "NOT_READY"


class ServiceBusyError(UnavailableError):
    """Refused before the body is read: all callers' bodies in flight hold the service's total."""

    code = "SERVICE_BUSY"


class StoreUnavailableError(UnavailableError):
    code = "STORE_UNAVAILABLE"


class EmbedderUnavailableError(UnavailableError):
    code = "EMBEDDER_UNAVAILABLE"


class ConfigurationError(Exception):
    """A setting or stored state that makes start-up impossible; the message says how to fix it."""


class AuthUnavailableError(UnavailableError):
    """Fail closed: no answer rather than an unscoped one."""

    code = "AUTH_UNAVAILABLE"
