"""The peers file: which other knowledge-base services to ask, with which token, for which callers.

YAML, validated by pydantic; each peer's token is read from its `tokenFile` (a mounted Secret),
never from the YAML, and kept as a SecretStr so no log or repr shows it.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from kbsearch.errors import ConfigurationError

log = logging.getLogger(__name__)

# A peer's name is a Prometheus label and a store name in every response.
PEER_NAME = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
MAX_PEERS = 32
MAX_TOKEN_BYTES = 8192
# How often a search may stat a token file for a rotated Secret.
TOKEN_CHECK_INTERVAL_S = 1.0


class PeerConfig(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    name: Annotated[str, Field(pattern=PEER_NAME)]
    url: Annotated[str, Field(min_length=1, max_length=2048)]
    token_file: Path
    # The local source patterns a caller's scope must cover, every one, to reach this peer.
    scopes: Annotated[list[Annotated[str, Field(min_length=1, max_length=512)]], Field(min_length=1, max_length=64)]
    timeout_seconds: Annotated[float, Field(gt=0, le=60)] | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("url must be an http or https URL with a host")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError("url must carry no credentials, query or fragment (the token comes from tokenFile)")
        return url.rstrip("/")


class PeersFile(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    peers: Annotated[list[PeerConfig], Field(max_length=MAX_PEERS)] = Field(default_factory=list)

    @field_validator("peers")
    @classmethod
    def _unique(cls, peers: list[PeerConfig]) -> list[PeerConfig]:
        names = [p.name for p in peers]
        if len(set(names)) != len(names):
            raise ValueError("two peers have the same name")
        return peers


class TokenFile:
    """A peer's token from its file, re-read when the file changes (the kubelet swaps a rotated Secret in).

    At most every TOKEN_CHECK_INTERVAL_S a search stats the file; a file that no longer holds a usable
    token keeps the last good one (and logs why, never the token).
    """

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.path, self._clock = path, clock
        self._seen = self._stamp()
        self._token = read_token(path)
        self._checked = clock()

    def __repr__(self) -> str:
        return f"TokenFile({str(self.path)!r})"

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_ino, stat.st_size

    def value(self) -> SecretStr:
        if self._clock() - self._checked >= TOKEN_CHECK_INTERVAL_S:
            self._checked = self._clock()
            stamp = self._stamp()
            if stamp is not None and stamp != self._seen:
                try:
                    self._token = read_token(self.path)
                    self._seen = stamp
                except ConfigurationError as exc:
                    log.warning("peer token file unusable; the last good token stays", extra={"reason": str(exc)})
        return self._token


@dataclass(frozen=True, slots=True)
class Peer:
    config: PeerConfig
    token: TokenFile = field(repr=False)

    @property
    def name(self) -> str:
        return self.config.name


def parse_peers(text: str) -> PeersFile:
    """The peers file's content, validated; ValueError says what is wrong (a peers file holds no token)."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ValueError("not valid YAML" + (f" at line {mark.line + 1}" if mark is not None else "")) from None
    try:
        return PeersFile.model_validate(document if document is not None else {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "file"
        raise ValueError(f"{where}: {first.get('msg', 'invalid')}") from None


def read_token(path: Path) -> SecretStr:
    """A peer's token from its file (one line, surrounding whitespace dropped); the message never shows it."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise ConfigurationError(f"peer token file {path} cannot be read: {os.strerror(exc.errno or 0)}") from None
    token = raw.decode("ascii", errors="replace").strip()
    if len(raw) > MAX_TOKEN_BYTES or not token or not re.fullmatch(r"[\x21-\x7e]+", token):
        raise ConfigurationError(f"peer token file {path} must hold one printable ASCII token")
    return SecretStr(token)


def load_peers(path: Path, local_store: str) -> list[Peer]:
    """Every peer of the file at `path`, each with its token; ConfigurationError stops start-up."""
    try:
        parsed = parse_peers(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"peers file {path} cannot be read: {os.strerror(exc.errno or 0)}") from None
    except ValueError as exc:
        raise ConfigurationError(f"peers file {path}: {exc}") from None
    if any(p.name == local_store for p in parsed.peers):
        raise ConfigurationError(f"peers file {path}: a peer is named {local_store!r}, the local store's name")
    return [Peer(p, TokenFile(p.token_file)) for p in parsed.peers]
