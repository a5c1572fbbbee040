"""A sync prepared once per turn, as Flux's source-controller does: the spec checked, its repository
parsed (location and ref), its globs, version pattern and path weights compiled. The engine, the clone cache and
`git ls-remote` take this object and parse nothing again."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kboperator.errors import InvalidSpecError
from kboperator.models import Credentials, SyncSpec
from kboperator.repourl import CheckedRepo, check_repo
from kboperator.sync.documents import RESERVED_KEYS, PathWeights, version_pattern
from kboperator.sync.docuri import check_web_url
from kboperator.sync.linear import LinearPattern
from kboperator.sync.paths import PathFilter

__all__ = ["PreparedSync", "prepare"]

_METADATA_KEY = re.compile(r"^[A-Za-z0-9_.\-/]{1,128}$")


@dataclass(frozen=True)
class PreparedSync:
    """One source's sync, checked: what `SyncEngine.sync` takes."""

    spec: SyncSpec
    repo: CheckedRepo
    filter: PathFilter
    version: LinearPattern | None
    weights: PathWeights

    @property
    def source_id(self) -> str:
        return self.spec.source_id

    def with_credentials(self, credentials: Credentials | None) -> PreparedSync:
        """The same sync with the repository's credentials (read only when a sync runs)."""
        repo = replace(self.spec.repo, credentials=credentials)
        return replace(self, spec=replace(self.spec, repo=repo), repo=replace(self.repo, spec=repo))


def prepare(spec: SyncSpec, *, local_root: Path | None = None, forbidden: Sequence[Path] = ()) -> PreparedSync:
    """Check what git does not (source id, limits, metadata, globs, version pattern) and parse the
    repository's URL and ref (repourl.check_repo: `local_root` and `forbidden` as there).
    InvalidSpecError says what is wrong, without secrets."""
    if not spec.source_id or not isinstance(spec.source_id, str):
        raise InvalidSpecError("the source id is empty")
    if spec.web_url is not None:
        try:
            check_web_url(spec.web_url)
        except ValueError as exc:
            raise InvalidSpecError(str(exc)) from None
    if spec.max_file_size < 1:
        raise InvalidSpecError("the maximum file size must be at least 1 byte")
    for key, value in spec.metadata.items():
        if key in RESERVED_KEYS:
            raise InvalidSpecError(f"metadata key {key!r} is reserved: the operator sets it on every document")
        if not isinstance(key, str) or not _METADATA_KEY.match(key):
            raise InvalidSpecError(f"metadata key {key!r} must be 1-128 letters, digits or _ . - /")
        if not isinstance(value, str):
            raise InvalidSpecError(f"metadata value of {key!r} must be a string")
    version = version_pattern(spec.version_pattern) if spec.version_pattern is not None else None
    weights = PathWeights(spec.path_weights)
    path_filter = PathFilter(spec.include, spec.exclude)
    repo = check_repo(spec.repo, allow_local=spec.allow_local, local_root=local_root, forbidden=forbidden)
    return PreparedSync(spec, repo, path_filter, version, weights)
