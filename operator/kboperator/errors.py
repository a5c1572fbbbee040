"""The operator's exception tree: every error says whether retrying can help.

    SyncError                        base of everything the sync core raises
    ├── InvalidSpecError             permanent: bad URL, ref, glob or schedule; a URL, ref,
    │                                SSH user or host starting with '-'; a ref that does not
    │                                exist or names no commit; a local repository when local
    │                                ones are not allowed (or outside their root); an unknown
    │                                URL scheme; a search service off the allow-list; a Secret
    │                                that did not opt in for its use. Fix the spec.
    │   └── SecretNotAllowedError    the Secret did not opt in for this use (its secret-type
    │                                label) or is bound (key `url`) to another URL.
    ├── SecretError                  a Secret or one of its keys is missing or unreadable (404,
    │                                403): retried with backoff, fixed by changing the Secret.
    ├── KubernetesUnavailableError   transient: the Kubernetes API answered 429/5xx or not at all.
    ├── KubernetesAccessError        the operator's own API access is broken (TLS, configuration,
    │                                its credentials): fixed by the operator's installer.
    ├── RepositoryAuthError          permanent until the credentials (the Secret) change.
    ├── RepositoryUnavailableError   transient: host unreachable, fetch failed.
    ├── RepositoryReadError          transient: git could not read the cached clone.
    ├── MassDeletionRefusedError     permanent until the spec or the repository changes;
    │                                the message says why the sync refused to wipe a source.
    ├── QuestionsError               permanent until the repository's .kb/questions.yaml
    │                                changes; never fails a sync: its quality says why.
    ├── ServiceUnavailableError      transient: the search service answered 429/5xx or the
    │                                network failed, after all retries.
    ├── ServiceRejectedError         the service refused one request with a 4xx: a failure
    │   │                            carrying the service's error code and message (a 404
    │   │                            or 405 says the URL is not a v1 search service).
    │   └── DocumentRejectedError    permanent for this file: 409 (the URI belongs to another
    │                                source), 413 (too large), 422 (invalid). The file is
    │                                skipped, and tried again when it changes.
    └── ServiceAuthError             the service answered 401/403: the service token is wrong.

Messages never contain credentials.
"""

from __future__ import annotations

from typing import Any


class SyncError(Exception):
    """Base class of every error raised by the sync core."""


class InvalidSpecError(SyncError):
    """The spec can never work as written."""


class RepositoryAuthError(SyncError):
    """The repository refused our credentials, or needs some we do not have."""


class RepositoryUnavailableError(SyncError):
    """The repository could not be reached or fetched right now."""


class RepositoryReadError(SyncError):
    """git could not read the cached clone (damaged, or the disk failed)."""


class QuestionsError(SyncError):
    """The repository's judged questions (.kb/questions.yaml) are not a file we take: fix the file."""


class MassDeletionRefusedError(SyncError):
    """A sync would have deleted every document of a source for a suspicious reason."""


class SecretNotAllowedError(InvalidSpecError):
    """The Secret did not opt in for this use, or is bound to another URL (kube.secrets)."""


class SecretError(SyncError):
    """A Secret or one of its keys is missing or unreadable: fixed by changing the Secret."""


class KubernetesUnavailableError(SyncError):
    """The Kubernetes API did not answer; trying again later can help."""


class KubernetesAccessError(SyncError):
    """The operator's own access to the Kubernetes API is broken (TLS, configuration, credentials)."""


class ServiceError(SyncError):
    """An answer (or no answer) from the search service."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        details: Any = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.details = details


class ServiceUnavailableError(ServiceError):
    """The service kept failing (429, 5xx or network) through every retry."""


class ServiceRejectedError(ServiceError):
    """The service refused a request with a 4xx other than 401/403."""


class DocumentRejectedError(ServiceRejectedError):
    """The service refused one document for good (409, 413, 422): a skip, not a failure."""


class ServiceAuthError(ServiceError):
    """The service refused our token (401/403)."""
