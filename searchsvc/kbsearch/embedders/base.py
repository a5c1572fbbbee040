"""The embedding provider interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence


class EmbeddingProvider(ABC):
    """Turns texts into dense vectors. Methods block; the service calls them from a thread."""

    provider: str  # "local" | "openai" | test-only names
    model: str
    dimensions: int
    # How a local model runs ("torch", "onnx", "onnx-int8"); None for an API. Part of the
    # collection signature: see models.BACKEND_GROUPS for which backends' vectors may mix.
    backend: str | None = None
    # Put before a search query (not a document) by embed_query: some models are trained with an instruction.
    query_prefix: str = ""

    def load(self) -> None:  # noqa: B027 - optional hook
        """Do the heavy start-up work (load weights, check the endpoint). Called once."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what load() or the constructor opened (an HTTP client). Called once, at shutdown."""

    @abstractmethod
    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, computed in as few batched calls as possible."""

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([self.query_prefix + text])[0]

    def embed_keyed(self, items: Sequence[tuple[str, str]]) -> list[list[float]]:
        """One vector per (partition, text), in order. A partition names whose text it is (a source,
        a caller); only a cache in front (CachedEmbedder) tells them apart, so one tenant's texts
        never make another's faster."""
        return self.embed_documents([text for _, text in items])

    def partition(self, key: str) -> EmbeddingProvider:
        """This provider as seen by one partition (see embed_keyed); without a cache, itself."""
        return self
