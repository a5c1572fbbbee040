"""The collection signature: what built a collection's vectors, stored on one point, and whether they fit."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kbsearch.errors import ConfigurationError
from kbsearch.models import (
    BACKEND_GROUPS,
    POINT_ID_NAMESPACE,
    CollectionSignature,
    interchangeable_backends,
)
from kbsearch.store.base import (
    CHUNKER,
    EPOCH,
    KIND,
    KIND_COLLECTION,
)

# The one point that holds the collection's signature; fixed so every open finds it.
SIGNATURE_POINT_ID = str(uuid.uuid5(POINT_ID_NAMESPACE, "collection:signature"))

_SIGNATURE_FIELDS = {
    "embedderProvider": "embedder_provider",
    "embedderModel": "embedder_model",
    "dimensions": "dimensions",
    "sparseEncoder": "sparse_encoder",
    "embedderBackend": "embedder_backend",
}


# --- signature --------------------------------------------------------------------------


def signature_payload(signature: CollectionSignature, epoch: str) -> dict[str, Any]:
    payload: dict[str, Any] = {KIND: KIND_COLLECTION, EPOCH: epoch}
    for key, attr in _SIGNATURE_FIELDS.items():
        payload[key] = getattr(signature, attr)
    return payload


def with_chunker(payload: Mapping[str, Any], fingerprint: str) -> dict[str, Any]:
    """The signature point's payload, recording the chunker the whole collection was built with."""
    return {**payload, CHUNKER: fingerprint}


def chunker_from_payload(payload: Mapping[str, Any] | None) -> str | None:
    value = (payload or {}).get(CHUNKER)
    return value if isinstance(value, str) and value else None


def new_epoch() -> str:
    """A collection epoch: random, made once when the collection (or its signature) is created."""
    return uuid.uuid4().hex


def epoch_from_payload(payload: Mapping[str, Any] | None) -> str | None:
    value = (payload or {}).get(EPOCH)
    return value if isinstance(value, str) and value else None


def signature_from_payload(payload: Mapping[str, Any]) -> CollectionSignature:
    fields: dict[str, Any] = {attr: payload.get(key) for key, attr in _SIGNATURE_FIELDS.items()}
    return CollectionSignature(**fields)


def describe(signature: CollectionSignature) -> str:
    backend = f" backend={signature.embedder_backend}" if signature.embedder_backend else ""
    return (
        f"embedder={signature.embedder_provider}/{signature.embedder_model}{backend} "
        f"dimensions={signature.dimensions} sparse={signature.sparse_encoder}"
    )


def compatible(stored: CollectionSignature, wanted: CollectionSignature) -> bool:
    """Equal but for the backend, and the two backends' vectors interchangeable (models.BACKEND_GROUPS)."""
    if replace(stored, embedder_backend=None) != replace(wanted, embedder_backend=None):
        return False
    if stored.embedder_provider != "local":
        return stored.embedder_backend == wanted.embedder_backend
    return interchangeable_backends(stored.embedder_backend, wanted.embedder_backend)


def check_signature(
    where: str, stored: CollectionSignature | None, has_points: bool, wanted: CollectionSignature
) -> bool:
    """Whether the signature must still be written; raise ConfigurationError on a mismatch.

    `where` names the collection (and path) for the message. A collection made by another local
    backend whose vectors are interchangeable (torch and onnx fp32) opens; the stored signature
    keeps the backend the collection was created with.
    """
    if stored is None:
        if has_points:
            # Data written by something else: its vectors cannot be trusted to match.
            raise ConfigurationError(
                f"Collection {where} holds points but no collection signature, so its vectors "
                f"cannot be checked against [{describe(wanted)}]. {_REINDEX_HINT}"
            )
        return True
    if not compatible(stored, wanted):
        keep = ""
        if replace(stored, embedder_backend=None) == replace(wanted, embedder_backend=None):
            made_with = stored.embedder_backend or "torch"  # collections from before backends were recorded
            usable = sorted(next((g for g in BACKEND_GROUPS if made_with in g), {made_with}))
            keep = f" To keep it, set SEARCHSVC_LOCAL_BACKEND to {' or '.join(usable)}."
        raise ConfigurationError(
            f"Collection {where} was built with [{describe(stored)}] but the service is "
            f"configured with [{describe(wanted)}]; its vectors are not comparable.{keep} "
            f"{_REBUILD_HINT} {_REINDEX_HINT}"
        )
    return False


_REBUILD_HINT = (
    "With SEARCHSVC_REBUILD=auto (the default) the service serves it as it is and rebuilds it in the "
    "background instead (docs/operations/upgrades-and-reindex.md)."
)
_REINDEX_HINT = (
    "To re-index, point SEARCHSVC_COLLECTION at a new collection name (or, for the embedded "
    "store, delete the collection's directory under SEARCHSVC_DATA_DIR) and re-sync the sources; "
    "or restore the embedder settings the collection was built with (SEARCHSVC_EMBEDDER, "
    "SEARCHSVC_LOCAL_MODEL, SEARCHSVC_LOCAL_BACKEND, SEARCHSVC_OPENAI_MODEL, SEARCHSVC_OPENAI_DIMENSIONS)."
)
