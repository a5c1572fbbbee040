"""The service's factories fed from one flat `Settings(...)`, as kbsearch.factory feeds them their sections."""

from __future__ import annotations

from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.embedders.factory import build_embedder, relevance_calibration
from kbsearch.settings import Settings


def embedder_of(settings: Settings) -> EmbeddingProvider:
    """The embedder the service would build from `settings`, not loaded."""
    return build_embedder(settings.embedding, settings.storage.data_dir)


def calibration_of(settings: Settings) -> tuple[float, float]:
    """The relevance curve's (midpoint, steepness) the service would use with `settings`."""
    return relevance_calibration(settings.embedding, settings.search)
