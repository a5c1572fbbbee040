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
    # Texts per document call of the batcher (services/documents/batching.py), one writer's turn: a local
    # model's call holds the cores while other writers wait; an API's is one request.
    turn_texts: int = 64

    def load(self) -> None:  # noqa: B027 - optional hook
        """Do the heavy start-up work (load weights, check the endpoint). Called once."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what load() or the constructor opened (an HTTP client). Called once, at shutdown."""

    @abstractmethod
    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, computed in as few batched calls as possible."""

    def embed_query_lane(self, texts: Sequence[str]) -> list[list[float]]:
        """The same vectors as embed_documents, on the query lane: for a caller waiting on the answer
        (a search's query, an ask's passages), never queued behind another caller's document.
        A provider whose calls never wait for each other (an API) keeps this default."""
        return self.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.embed_query_lane([self.query_prefix + text])[0]

    def embed_keyed(self, items: Sequence[tuple[str, str]], *, query_lane: bool = False) -> list[list[float]]:
        """One vector per (partition, text), in order. A partition names whose text it is (a source,
        a caller); only a cache in front (CachedEmbedder) tells them apart, so one tenant's texts
        never make another's faster."""
        texts = [text for _, text in items]
        return self.embed_query_lane(texts) if query_lane else self.embed_documents(texts)

    def partition(self, key: str) -> EmbeddingProvider:
        """This provider as seen by one partition (see embed_keyed); without a cache, itself."""
        return self


class InProcessEmbedder(EmbeddingProvider):
    """A model run in this process, on two lanes (documents, queries) that `_embed` tells apart;
    the model is loaded at the first call that has texts, if load() has not run yet."""

    _dimensions: int | None = None  # set by load()

    @property
    def dimensions(self) -> int:  # type: ignore[override]
        if self._dimensions is None:
            raise RuntimeError(f"{type(self).__name__}.dimensions is known only after load()")
        return self._dimensions

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self._on_lane(texts, query=False)

    def embed_query_lane(self, texts: Sequence[str]) -> list[list[float]]:
        return self._on_lane(texts, query=True)

    def _on_lane(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        if not texts:
            return []
        if not self._loaded:
            self.load()
        return self._embed(texts, query=query)

    @property
    @abstractmethod
    def _loaded(self) -> bool:
        """Whether load() has made the model ready."""

    @abstractmethod
    def _embed(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        """One vector per text (at least one), the model loaded; `query`: on the query lane."""
