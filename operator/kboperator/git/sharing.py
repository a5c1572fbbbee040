"""Which cached clone a source uses, who uses it, and when a fetch or ls-remote can be skipped.

Sources share one clone when they fetch the same URL and ref with the same credentials: the
clone's name is an HMAC of (URL, ref, username, token, SSH key, known hosts) under a random key
kept in the cache (`.clone-key`, 0600), so equal Secret contents are compared by a digest, and a
folder name never lets anyone test a guessed token. Sources with different credentials never
share: a source cannot read a private repository through another source's token.

Each clone records its users (`<name>.users/<hash of the source id>`); a clone is removed when its
last user lets go (deleted, or moved to another URL, ref or credentials).

`Coalescer`: one answer (a fetch or an ls-remote) serves every caller that asked before it
*started*, so no caller ever gets an answer older than its own request.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from kboperator.models import RepoSpec

T = TypeVar("T")

_KEY_FILE = ".clone-key"
_USERS = ".users"


class CloneNames:
    """Names of the shared clones under `root`, and the record of which sources use each."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._secret: bytes | None = None
        self._guard = threading.Lock()

    def name(self, repo: RepoSpec) -> str:
        """The clone folder's name: equal for equal URL, ref and credentials, and for nothing else."""
        creds = repo.credentials
        fields: list[str | None] = [repo.url, repo.ref]
        fields += [creds.username, creds.token, creds.ssh_private_key, creds.known_hosts] if creds else [None] * 4
        material = json.dumps(fields).encode()  # unambiguous, whatever the values hold
        return hmac.new(self._key(), material, hashlib.sha256).hexdigest()[:32]

    def add_user(self, name: str, source_id: str) -> None:
        users = self.root / f"{name}{_USERS}"
        users.mkdir(parents=True, exist_ok=True)
        (users / _user(source_id)).touch()

    def used_by(self, source_id: str) -> list[str]:
        """The clones `source_id` is recorded as using."""
        marker = _user(source_id)
        if not self.root.is_dir():
            return []
        return sorted(
            entry.name.removesuffix(_USERS)
            for entry in self.root.iterdir()
            if entry.name.endswith(_USERS) and (entry / marker).exists()
        )

    def remove_user(self, name: str, source_id: str) -> bool:
        """Forget that `source_id` uses the clone; True when nobody uses it any more."""
        users = self.root / f"{name}{_USERS}"
        (users / _user(source_id)).unlink(missing_ok=True)
        try:
            return not any(users.iterdir())
        except FileNotFoundError:
            return True

    def _key(self) -> bytes:
        with self._guard:
            if self._secret is None:
                self._secret = self._load_or_create()
            return self._secret

    def _load_or_create(self) -> bytes:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / _KEY_FILE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            key = path.read_bytes()
            if len(key) == 32:
                return key
            path.unlink()  # a half-written key from a crash: the clones named by it are only refetched
            return self._load_or_create()
        key = secrets.token_bytes(32)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key)
        return key


def _user(source_id: str) -> str:
    return hashlib.sha256(source_id.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class _Answer(Generic[T]):
    started: float
    value: T


class Coalescer(Generic[T]):
    """Runs `work` for one name at a time; a caller reuses an answer that started after it asked.

    Callers who arrive while the work runs wait for it, then the first of them runs it again and
    the others take that answer: a burst of N callers costs at most two runs, each caller's
    answer is at least as new as its request, and a failure is never shared.
    """

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._answers: dict[str, _Answer[T]] = {}
        self._guard = threading.Lock()
        self.runs = 0
        self.shared = 0

    def lock(self, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(name, threading.Lock())

    def recent(self, name: str, asked: float) -> T | None:
        """The answer that started at or after `asked`, if any (call with the name's lock held)."""
        answer = self._answers.get(name)
        if answer is not None and answer.started >= asked:
            self.shared += 1
            return answer.value
        return None

    def run(self, name: str, work: Callable[[], T]) -> T:
        """Run `work` and keep its answer (call with the name's lock held)."""
        started = time.monotonic()
        self.runs += 1
        value = work()
        self._answers[name] = _Answer(started, value)
        return value

    def forget(self, name: str) -> None:
        self._answers.pop(name, None)
