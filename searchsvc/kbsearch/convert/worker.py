"""Runs each conversion in a child process with its own memory and CPU limits.

Parsers of PDF, Word and notebooks meet hostile files: a zip bomb, a PDF whose object graph loops,
megabytes of notebook output. Each conversion therefore runs in a fresh child forked from a
forkserver that has the parser libraries loaded (a few ms per child, not an interpreter start),
with RLIMIT_AS (address space) and RLIMIT_CPU set before it reads a byte, and a wall-clock
deadline after which the parent kills it (SIGKILL). Before it parses, the child also enters the
sandbox of sandbox.py (its own empty directory, no environment, no new privileges, and where the
kernel has them Landlock and seccomp: no file opened, no socket), so a parser feature nobody
thought of cannot read the server's files or tokens into a document. Whatever the child does, the service process
keeps its memory, and the caller gets a ConversionError with a code:

- CONVERSION_LIMIT_EXCEEDED: out of memory, out of CPU time, or past the deadline;
- CONVERSION_CRASHED: the child died otherwise (a signal from outside, a crash in native code);
- CONVERSION_SANDBOX_FAILED (500): a sandbox layer found at startup could not be entered; nothing is converted;
- the converter's own codes (CORRUPT_DOCUMENT, ENCRYPTED_DOCUMENT, NO_TEXT_LAYER, ARCHIVE_BOMB...).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import resource
import signal
import tempfile
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from kbsearch.convert import sandbox
from kbsearch.convert.base import Anchor, ConversionError, Converted
from kbsearch.convert.pdf import data_dirs as parser_data_dirs
from kbsearch.errors import ServiceError

__all__ = ["ConversionLimits", "ConversionWorker", "child_context"]

log = logging.getLogger(__name__)

# Loaded once by the forkserver, so no child pays for them: the converters and every module of
# their parsers (docutils and pdfminer import many lazily on a first document). The child may open no
# file (Landlock), so all a parser reads from disk on first use (modules, nbformat's schemas) is
# read there, by `warmup`.
# The chunker's children (services/documents/chunk_processes.py) fork from the same forkserver: one
# process-wide server, whose preload list must be the same whoever starts it first.
_PRELOAD = [
    "kbsearch.convert.formats",
    "kbsearch.convert.sandbox",
    "kbsearch.convert.warmup",
    "kbsearch.chunker",
    "kbsearch.aio.deadline",
]


def child_context() -> multiprocessing.context.ForkServerContext:
    """The forkserver context every child of the service forks from, its modules preloaded."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    return context


@dataclass(frozen=True, slots=True)
class ConversionLimits:
    memory_bytes: int  # RLIMIT_AS of the child: its whole address space, libraries included
    cpu_seconds: int  # RLIMIT_CPU: SIGXCPU at this many seconds, SIGKILL one second later
    wall_seconds: float  # the parent kills the child after this long, CPU-bound or not


def _limit_exceeded(what: str, limits: ConversionLimits) -> ConversionError:
    return ConversionError(
        f"converting the document {what}; it is too large or too complex to convert",
        code="CONVERSION_LIMIT_EXCEEDED",
        details={
            "memoryBytes": limits.memory_bytes,
            "cpuSeconds": limits.cpu_seconds,
            "wallSeconds": limits.wall_seconds,
        },
    )


# The child's exit status when it ran out of memory even for reporting so.
_EXIT_OUT_OF_MEMORY = 3


def _child(
    fmt: str,
    data: bytes,
    limits: ConversionLimits,
    support: sandbox.SandboxSupport,
    workdir: str,
    conn: Connection,
    readable: tuple[str, ...] = (),
) -> None:
    """The child's whole life: limits and sandbox first, then the conversion, then one message to the parent."""
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
    try:
        sandbox.enter(workdir, support, readable)
    except sandbox.SandboxError as exc:
        conn.send(("sandbox", str(exc)))
        conn.close()
        return
    try:
        conn.send(_converted(fmt, data))
        conn.close()
    except MemoryError:
        os._exit(_EXIT_OUT_OF_MEMORY)  # no unwinding: it would need memory too


def _converted(fmt: str, data: bytes) -> tuple[Any, ...]:
    from kbsearch.convert.formats import CONVERTERS  # preloaded by the forkserver: no import cost

    try:
        converted = CONVERTERS[fmt].convert(data)
        return ("ok", converted.text, [(a.offset, a.page, a.cell) for a in converted.anchors])
    except ConversionError as exc:
        return ("error", exc.code, exc.message, exc.details)
    except MemoryError:
        return ("memory",)  # returned after the except: the parser's frames are released by then
    except RecursionError:
        return ("error", "CORRUPT_DOCUMENT", "the document is nested too deeply to convert", {})
    # A parser meeting a hostile file raises whatever its code hit; every such failure is this
    # file's problem, reported with the parser's words, and must not look like a crash.
    except Exception as exc:  # noqa: BLE001
        return ("error", "CONVERSION_FAILED", f"the {fmt} converter failed: {type(exc).__name__}: {exc}", {})


class ConversionWorker:
    """Converts documents in limited child processes, at most `concurrency` at a time (blocking calls)."""

    def __init__(self, limits: ConversionLimits, concurrency: int = 2) -> None:
        self.limits = limits
        self.concurrency = concurrency
        self.sandbox = sandbox.probe()
        self.readable = parser_data_dirs()
        if self.sandbox.missing:
            log.warning(
                "the conversion sandbox lacks layers this kernel does not give; the others still apply",
                extra={"missing": list(self.sandbox.missing), "landlockAbi": self.sandbox.landlock_abi},
            )
        else:
            log.info("the conversion sandbox has every layer", extra={"landlockAbi": self.sandbox.landlock_abi})
        self._context = child_context()
        self._slots = threading.BoundedSemaphore(concurrency)
        self.last_pid: int | None = None  # the most recent child: tests kill it to see a crash handled

    def convert(self, fmt: str, data: bytes) -> Converted:
        with self._slots:
            return self._convert(fmt, data)

    def _convert(self, fmt: str, data: bytes) -> Converted:
        with tempfile.TemporaryDirectory(prefix="kb-convert-", ignore_cleanup_errors=True) as workdir:
            return self._convert_in(fmt, data, workdir)

    def _convert_in(self, fmt: str, data: bytes, workdir: str) -> Converted:
        receiver, sender = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=_child,
            args=(fmt, data, self.limits, self.sandbox, workdir, sender, self.readable),
            name=f"convert-{fmt}",
            daemon=True,
        )
        try:
            process.start()
            self.last_pid = process.pid
            sender.close()
            if not receiver.poll(self.limits.wall_seconds):
                process.kill()
                process.join()
                raise _limit_exceeded(f"took longer than {self.limits.wall_seconds:g} s", self.limits)
            try:
                message = receiver.recv()
            except EOFError:  # the child died without a word
                process.join()
                raise self._died(process.exitcode) from None
        finally:
            if process.is_alive():
                process.kill()
            process.join()
            receiver.close()
            sender.close()
        kind = message[0]
        if kind == "ok":
            anchors = tuple(Anchor(offset, page=page, cell=cell) for offset, page, cell in message[2])
            return Converted(message[1], anchors)
        if kind == "sandbox":
            log.error("a conversion child could not enter its sandbox", extra={"reason": message[1]})
            raise ServiceError(
                f"the conversion sandbox could not be entered: {message[1]}", code="CONVERSION_SANDBOX_FAILED"
            )
        if kind == "memory":
            raise _limit_exceeded(f"needed more than {self.limits.memory_bytes // 1_048_576} MiB", self.limits)
        _, code, text, details = message
        raise ConversionError(text, code=code, details=details)

    def _died(self, exitcode: int | None) -> ConversionError:
        if exitcode == -signal.SIGXCPU:
            return _limit_exceeded(f"used more than {self.limits.cpu_seconds} s of CPU", self.limits)
        if exitcode == _EXIT_OUT_OF_MEMORY:
            return _limit_exceeded(f"needed more than {self.limits.memory_bytes // 1_048_576} MiB", self.limits)
        log.warning("a conversion child died", extra={"exitcode": exitcode})
        return ConversionError(
            f"the conversion process died (exit code {exitcode}); the file may be too large or too complex",
            code="CONVERSION_CRASHED",
            details={"exitcode": exitcode},
        )
