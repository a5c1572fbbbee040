"""Static bearer tokens: the YAML tokens file (re-read when it changes) and the legacy env tokens.

Only the sha256 of each token is kept in memory. A file that no longer parses keeps the last
good table (and logs why, never a token); at start-up it stops the service instead.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kbsearch.errors import ConfigurationError
from kbsearch.services.access.scope import Caller, SourceScope

log = logging.getLogger(__name__)

# How often a request may look at the file's mtime and inode.
CHECK_INTERVAL_S = 1.0
_HEX = frozenset("0123456789abcdef")


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def usable_token(token: str) -> bool:
    """Printable ASCII, no surrounding whitespace: what an Authorization header can carry."""
    return bool(token) and token == token.strip() and all(0x20 <= ord(ch) < 0x7F for ch in token)


@dataclass(frozen=True, slots=True)
class TokenEntry:
    digest: bytes
    caller: Caller


class TokenTable:
    """Callers by the sha256 of their token; a lookup compares every entry in constant time."""

    def __init__(self, entries: list[TokenEntry]) -> None:
        self.entries = entries

    def __len__(self) -> int:
        return len(self.entries)

    def lookup(self, token: str) -> Caller | None:
        presented = digest(token)
        found = None
        for entry in self.entries:  # no early exit: the time taken does not say which entry matched
            if secrets.compare_digest(presented, entry.digest):
                found = entry.caller
        return found


def parse_tokens(text: str) -> list[TokenEntry]:
    """The entries of a tokens file; ValueError says what is wrong, naming entries, never tokens."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ValueError(f"not valid YAML{where}") from None
    if not isinstance(document, dict) or not isinstance(document.get("tokens"), list):
        raise ValueError("the file must be a mapping with a `tokens:` list")
    entries: list[TokenEntry] = []
    names: set[str] = set()
    for index, raw in enumerate(document["tokens"]):
        entries.append(_entry(index, raw, names))
    if len({e.digest for e in entries}) != len(entries):
        raise ValueError("two entries have the same token")
    return entries


def _entry(index: int, raw: Any, names: set[str]) -> TokenEntry:
    where = f"tokens[{index}]"
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a mapping")
    unknown = set(raw) - {"name", "token", "sha256", "write", "sources"}
    if unknown:
        raise ValueError(f"{where} has unknown keys: {', '.join(sorted(map(str, unknown)))}")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{where} needs a `name`")
    where = f"{where} ({name!r})"
    if name in names:
        raise ValueError(f"{where}: the name is used twice")
    names.add(name)
    token, hexdigest = raw.get("token"), raw.get("sha256")
    if (token is None) == (hexdigest is None):
        raise ValueError(f"{where} needs exactly one of `token` and `sha256`")
    if token is not None:
        if not isinstance(token, str) or not usable_token(token):
            raise ValueError(f"{where}: `token` must be printable ASCII without surrounding whitespace")
        value = digest(token)
    else:
        if not isinstance(hexdigest, str) or len(hexdigest) != 64 or not set(hexdigest.lower()) <= _HEX:
            raise ValueError(f"{where}: `sha256` must be 64 hex digits")
        value = bytes.fromhex(hexdigest)
    write = raw.get("write", False)
    if not isinstance(write, bool):
        raise ValueError(f"{where}: `write` must be true or false")
    sources = raw.get("sources", [])
    if not isinstance(sources, list) or not all(isinstance(s, str) and s for s in sources):
        raise ValueError(f"{where}: `sources` must be a list of non-empty patterns")
    return TokenEntry(value, Caller(name, write, SourceScope(tuple(sources))))


def legacy_entries(api_token: str | None, read_token: str | None) -> list[TokenEntry]:
    """SEARCHSVC_API_TOKEN and SEARCHSVC_READ_TOKEN as two entries that see every source."""
    entries = []
    if api_token is not None:
        entries.append(TokenEntry(digest(api_token), Caller("api-token", True, SourceScope.everything())))
    if read_token is not None:
        entries.append(TokenEntry(digest(read_token), Caller("read-token", False, SourceScope.everything())))
    return entries


class StaticTokens:
    """The current token table: the file's entries (if any) after the legacy ones.

    `table()` is called on every request; at most once per CHECK_INTERVAL_S it stats the file
    and re-reads it when its mtime, size or inode changed (a Secret volume swaps a symlink).
    """

    def __init__(
        self, path: Path | None, legacy: list[TokenEntry], *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = path
        self.legacy = legacy
        self._clock = clock
        self._lock = threading.Lock()
        self._checked = clock()
        self._stamp: tuple[int, int, int] | None = None
        self._table = TokenTable(list(legacy))
        if path is not None:
            try:
                self._reload(self._stat())
            except (OSError, ValueError) as exc:
                raise ConfigurationError(f"SEARCHSVC_TOKENS_FILE={path}: {_reason(exc)}") from None

    @property
    def configured(self) -> bool:
        """Whether any token exists at all (else the service runs open, single-tenant)."""
        return self.path is not None or bool(self.legacy)

    def table(self) -> TokenTable:
        if self.path is not None and self._clock() - self._checked >= CHECK_INTERVAL_S:
            with self._lock:
                if self._clock() - self._checked >= CHECK_INTERVAL_S:
                    self._checked = self._clock()
                    self._refresh()
        return self._table

    def _stat(self) -> tuple[int, int, int]:
        assert self.path is not None
        st = os.stat(self.path)
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _refresh(self) -> None:
        try:
            stamp = self._stat()
            if stamp == self._stamp:
                return
            self._stamp = stamp  # a bad version is reported once, not on every check
            self._reload(stamp)
            log.info("tokens file reloaded", extra={"path": str(self.path), "entries": len(self._table)})
        except (OSError, ValueError) as exc:
            # Keep serving with the last good table: one bad edit must not lock every client out.
            log.error(
                "tokens file not reloaded; the previous tokens stay in use",
                extra={"path": str(self.path), "reason": _reason(exc)},
            )

    def _reload(self, stamp: tuple[int, int, int]) -> None:
        assert self.path is not None
        entries = parse_tokens(self.path.read_text(encoding="utf-8"))
        self._table = TokenTable(self.legacy + entries)
        self._stamp = stamp


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError):
        return f"cannot read the file ({exc.strerror or type(exc).__name__})"
    if isinstance(exc, UnicodeDecodeError):
        return "the file is not UTF-8"
    return str(exc)
