"""Turns tree entries into the documents a source should hold, or into skips with a reason."""

from __future__ import annotations

import base64
import hashlib
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kboperator.errors import InvalidSpecError
from kboperator.git.objects import TreeEntry
from kboperator.models import FileIssue, SyncSpec
from kboperator.repourl import RepoLocation
from kboperator.sync.docuri import document_uri
from kboperator.sync.linear import LinearPattern, PatternError
from kboperator.sync.paths import PathFilter, compile_glob
from kboperator.sync.versions import VersionLayout, affixed_version

# Keys the engine sets on every document; a spec may not override them.
RESERVED_KEYS = ("sourceIdentifier", "repository", "ref", "commit", "path")
# `commit` changes with every sync; a document is not stale because of it alone.
_VOLATILE_KEYS = frozenset({"commit"})
_MAX_URI = 2048  # the v1 contract's limit
_MAX_VERSION_PATTERN = 512
_MAX_VERSION = 64  # the service keeps no more of a version
_MAX_PATH_WEIGHTS = 32
MAX_PATH_WEIGHT = 4.0  # the service ignores a larger rankWeight
MIN_PATH_WEIGHT = 0.01  # the CRD's minimum
# Files the search service converts from their bytes: sent base64-encoded, never decoded as text here.
# The two programs share no code: tests/operator/sync/test_binary_formats_contract.py pins this to the
# service's one table of formats (kbsearch.convert.formats.FORMATS, its binary ones).
BINARY_EXTENSIONS = frozenset({".pdf", ".docx"})


@dataclass(frozen=True)
class Document:
    """One file as the service should hold it. `content` is None when it was not kept."""

    path: str
    uri: str
    checksum: str
    metadata: Mapping[str, Any]
    content: str | None
    encoding: str = "utf-8"  # "base64": `content` holds a binary file's bytes (a PDF, a Word file)


def valid_path(path: str) -> bool:
    """False for paths that are not UTF-8 (kept as surrogates): they never become documents."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def checksum_of(data: bytes) -> str:
    """The service's checksum: SHA-256 of the exact UTF-8 bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def same_metadata(listed: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Equal except for keys that change on every sync."""
    return _stable(listed) == _stable(desired)


def _stable(metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k not in _VOLATILE_KEYS}


class PathWeights:
    """A source's `pathWeights`: the `rankWeight` metadata of the documents each glob matches.

    The longest matching glob wins (the most specific; a mapping's order does not survive the API
    server). InvalidSpecError for a bad glob or a weight outside [MIN_PATH_WEIGHT, MAX_PATH_WEIGHT].
    """

    def __init__(self, weights: Mapping[str, float]) -> None:
        if len(weights) > _MAX_PATH_WEIGHTS:
            raise InvalidSpecError(f"at most {_MAX_PATH_WEIGHTS} path weights")
        for pattern, weight in weights.items():
            number = isinstance(weight, int | float) and not isinstance(weight, bool)
            if not number or not MIN_PATH_WEIGHT <= weight <= MAX_PATH_WEIGHT:
                raise InvalidSpecError(
                    f"the weight of {pattern!r} must be a number from {MIN_PATH_WEIGHT:g} to {MAX_PATH_WEIGHT:g}"
                )
        ordered = sorted(weights.items(), key=lambda item: -len(item[0]))
        self._globs = [(compile_glob(pattern), float(weight)) for pattern, weight in ordered]

    def of(self, path: str) -> float | None:
        return next((weight for glob, weight in self._globs if glob.fullmatch(path)), None)


def version_pattern(pattern: str) -> LinearPattern:
    """The compiled version pattern; InvalidSpecError when it is not one with a `version` group.

    Compiled by RE2 (sync.linear), the engine `version_of` runs it with: a pattern RE2 refuses
    (a backreference, lookaround) is refused here, at spec time, with RE2's reason.
    """
    if not isinstance(pattern, str) or not pattern or len(pattern) > _MAX_VERSION_PATTERN:
        raise InvalidSpecError(
            f"the version pattern must be a regular expression of 1-{_MAX_VERSION_PATTERN} characters"
        )
    try:
        compiled = LinearPattern(pattern)
    except PatternError as exc:
        raise InvalidSpecError(
            f"the version pattern {pattern!r} is not a regular expression RE2 runs "
            f"(no backreferences or lookaround): {exc}"
        ) from None
    if "version" not in compiled.groupindex:
        raise InvalidSpecError(
            f"the version pattern {pattern!r} has no group named 'version', as in 'docs/(?P<version>[^/]+)/'"
        )
    return compiled


def version_of(pattern: LinearPattern, path: str) -> str | None:
    """The version a path names by the source's pattern; None when the pattern does not match it.

    Bound: linear in the path's length (RE2 never backtracks; the pattern is at most 512 characters).
    """
    version = pattern.search_group(path, "version")
    return version[:_MAX_VERSION] if version else None


class DocumentReader:
    """Reads matching entries of one checkout into Documents (blocking: call from a thread)."""

    def __init__(
        self,
        spec: SyncSpec,
        checkout: Any,
        path_filter: PathFilter,
        version: LinearPattern | None,
        weights: PathWeights,
    ) -> None:
        self.spec = spec
        self.checkout = checkout
        self.filter = path_filter
        self.location: RepoLocation = checkout.location
        self._base = {
            **spec.metadata,
            "sourceIdentifier": spec.source_id,
            "repository": spec.web_url or self.location.display_url,
            "ref": spec.link_ref or spec.repo.ref,
            "commit": checkout.head,
        }
        self._version = version
        self._weights = weights
        self._layout: VersionLayout | None = None

    def matches(self, entry: TreeEntry) -> bool:
        return self.filter.matches(entry.path)

    def layout(self, commit: str | None = None, entries: list[TreeEntry] | None = None) -> VersionLayout:
        """The versioned folders among the documents of a commit (default head; sync.versions), from
        its tree or from `entries` when the caller has listed them already."""
        listed = self.checkout.list_files(commit) if entries is None else entries
        return VersionLayout(e.path for e in listed if self.filter.matches(e.path) and valid_path(e.path))

    def know_tree(self, entries: list[TreeEntry]) -> None:
        """The head's entries, which the versions of its documents are read from (sync.versions)."""
        if self._version is None:
            self._layout = self.layout(entries=entries)

    def versions_moved_since(self, commit: str) -> bool:
        """Whether a folder became or stopped being a versioned copy since `commit`: an incremental
        sync would leave the files it did not change with their old version."""
        if self._version is not None:
            return False
        if self._layout is None:
            self._layout = self.layout()
        return self.layout(commit) != self._layout

    def _version_of(self, path: str) -> str | None:
        if self._version is not None:
            return version_of(self._version, path)
        if not any(affixed_version(folder) for folder in path.split("/")[:-1]):
            return None  # no folder could be a versioned copy: the tree is not listed for it
        if self._layout is None:
            self._layout = self.layout()
        return self._layout.version_of(path)

    def uri(self, path: str) -> str:
        return document_uri(
            self.location,
            self.spec.link_ref or self.spec.repo.ref,
            path,
            is_tag=self.checkout.is_tag,
            web_url=self.spec.web_url,
        )

    def metadata(self, path: str) -> dict[str, Any]:
        version = self._version_of(path)
        weight = self._weights.of(path)
        return (
            {**self._base, "path": path}
            | ({"version": version} if version else {})
            | ({"rankWeight": weight} if weight is not None else {})
        )

    def read(self, entry: TreeEntry, *, keep_content: bool = True) -> Document | FileIssue:
        """The document for a matching entry, or why it is skipped. Symlinks are never followed."""
        if not valid_path(entry.path):
            # Reported with U+FFFD in place of the bad bytes, so status and JSON stay valid UTF-8.
            shown = entry.path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            return FileIssue(shown, "path is not valid UTF-8")
        if entry.kind != "file":
            return FileIssue(entry.path, entry.kind if entry.kind != "other" else f"unsupported mode {entry.mode}")
        limit = self.spec.max_file_size
        if entry.size is not None and entry.size > limit:
            return FileIssue(entry.path, f"too large: {entry.size} bytes (limit {limit})")
        uri = self.uri(entry.path)
        if len(uri) > _MAX_URI:
            return FileIssue(entry.path, f"document URI longer than {_MAX_URI} characters")
        data = self.checkout.read_blob(entry.sha)
        if len(data) > limit:
            return FileIssue(entry.path, f"too large: {len(data)} bytes (limit {limit})")
        if posixpath.splitext(entry.path)[1].lower() in BINARY_EXTENSIONS:
            encoded = base64.b64encode(data).decode("ascii") if keep_content else None
            return Document(entry.path, uri, checksum_of(data), self.metadata(entry.path), encoded, "base64")
        if b"\0" in data:
            return FileIssue(entry.path, "binary: contains NUL bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return FileIssue(entry.path, f"not UTF-8 text (invalid byte at offset {exc.start})")
        return Document(entry.path, uri, checksum_of(data), self.metadata(entry.path), text if keep_content else None)
