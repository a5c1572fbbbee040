"""The conversion child's sandbox: whatever a parser is talked into, it reads no file and no secret.

A converter should never open a file (each drops images, includes and raw passthrough itself), but
a parser's feature we do not know of must not turn a document into a read of the server's files.
So the child, after its limits and before it parses a byte, enters these layers:

- an empty working directory of its own (relative paths resolve to nothing);
- an empty environment (`os.environ` cleared: no token reaches a parser through it);
- `PR_SET_NO_NEW_PRIVS`: no set-uid program could give it back what it gives up;
- Landlock (Linux 5.13+), when the kernel has it: no file or directory may be opened at all
  (read, write, execute, list), no TCP connection or bind (ABI 4+), no abstract UNIX socket or
  signal outside the child (ABI 6+). Everything the parsers import is imported by the forkserver
  beforehand (worker.py), so the child needs no file. Already open descriptors (the pipe to the
  parent) keep working; `/proc/self/environ` and the service's own files do not open;
- seccomp: no new socket of any family (`socket(2)` fails with EPERM), so not even UDP.

`probe()` tells, once at startup, which layers this kernel gives; the worker logs what is missing.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["SandboxError", "SandboxSupport", "enter", "probe"]

_SYSCALLS = {  # landlock_create_ruleset, landlock_add_rule, landlock_restrict_self: the same on both
    "x86_64": (444, 445, 446),
    "aarch64": (444, 445, 446),
}
_SOCKET = {"x86_64": 41, "aarch64": 198}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
_PR_SET_NO_NEW_PRIVS = 38
_PR_GET_SECCOMP = 21
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

# Filesystem access rights, by the ABI that introduced them.
_FS_ABI1 = (1 << 13) - 1  # execute, write, read file; read dir; remove; make char/dir/reg/sock/fifo/block/sym
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_FS_IOCTL_DEV = 1 << 15  # ABI 5
_FS_READ_FILE, _FS_READ_DIR = 1 << 2, 1 << 3
_RULE_PATH_BENEATH = 1
_NET_BIND_CONNECT_TCP = (1 << 0) | (1 << 1)  # ABI 4
_SCOPE_ABSTRACT_UNIX_SIGNAL = (1 << 0) | (1 << 1)  # ABI 6

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


class SandboxError(Exception):
    """A layer the startup probe found available could not be entered: the child must not convert."""


@dataclass(frozen=True, slots=True)
class SandboxSupport:
    landlock_abi: int  # 0: no Landlock on this kernel (or a container profile forbids it)
    seccomp: bool
    missing: tuple[str, ...]  # what the startup warning names

    def in_force(self) -> dict[str, bool]:
        """Each layer and whether a child enters it here (the first three always do)."""
        return {
            "empty-workdir": True,
            "empty-environment": True,
            "no-new-privs": True,
            "landlock": self.landlock_abi > 0,
            "seccomp": self.seccomp,
        }


def _arch() -> str:
    return platform.machine().lower().replace("arm64", "aarch64").replace("amd64", "x86_64")


def _landlock_abi() -> tuple[int, str]:
    numbers = _SYSCALLS.get(_arch())
    if numbers is None:
        return 0, f"Landlock: unknown system call numbers on {_arch()}"
    abi = _libc.syscall(numbers[0], None, ctypes.c_size_t(0), ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    if abi < 0:
        code = ctypes.get_errno()
        why = {errno.ENOSYS: "not in this kernel", errno.EOPNOTSUPP: "disabled at boot (lsm=)"}.get(
            code, os.strerror(code)
        )
        return 0, f"Landlock: {why}"
    return int(abi), ""


def probe() -> SandboxSupport:
    """Which layers this kernel gives. Cheap: one system call, no state changed."""
    abi, why = _landlock_abi()
    missing = [why] if why else []
    seccomp = _arch() in _SOCKET and _libc.prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) >= 0  # EINVAL: not in the kernel
    if not seccomp:
        missing.append(f"seccomp: not available on this kernel ({_arch()})")
    return SandboxSupport(abi, seccomp, tuple(missing))


def _landlock(abi: int, readable: Sequence[str]) -> None:
    create, add_rule, restrict = _SYSCALLS[_arch()]
    fs = _FS_ABI1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    fs |= _FS_IOCTL_DEV if abi >= 5 else 0
    # struct landlock_ruleset_attr grew a field with ABI 4 (net) and 6 (scoped): send what this ABI reads.
    attr = struct.pack("=QQQ", fs, _NET_BIND_CONNECT_TCP if abi >= 4 else 0, _SCOPE_ABSTRACT_UNIX_SIGNAL)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    buffer = ctypes.create_string_buffer(attr[:size], size)
    ruleset = _libc.syscall(create, buffer, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise SandboxError(f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}")
    try:  # nothing may be opened but the files beneath `readable`, read-only
        for path in readable:
            _allow_reading(add_rule, ruleset, path)
        if _libc.syscall(restrict, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            raise SandboxError(f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)


def _allow_reading(add_rule: int, ruleset: int, path: str) -> None:
    """A path-beneath rule: read the files and list the folders under `path`, nothing else."""
    try:
        parent = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_DIRECTORY)
    except OSError:
        return  # a parser's data folder that is not installed: nothing to allow
    try:
        # struct landlock_path_beneath_attr is packed: __u64 allowed_access, __s32 parent_fd.
        attr = ctypes.create_string_buffer(struct.pack("=Qi", _FS_READ_FILE | _FS_READ_DIR, parent), 12)
        if (
            _libc.syscall(add_rule, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), attr, ctypes.c_uint32(0))
            < 0
        ):
            raise SandboxError(f"landlock_add_rule failed: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(parent)


class _SockFilter(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32))


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter)))


_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_JGE_K, _BPF_RET_K = 0x20, 0x15, 0x35, 0x06
_SECCOMP_RET_ALLOW, _SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
_X32_SYSCALL_BIT = 0x40000000


def _seccomp() -> None:
    """socket(2) fails with EPERM; so does any system call of a foreign ABI (i386 socketcall, x32)."""
    deny = _SECCOMP_RET_ERRNO | errno.EPERM
    program = [
        (_BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (_BPF_JEQ_K, 1, 0, _AUDIT_ARCH[_arch()]),
        (_BPF_RET_K, 0, 0, deny),
        (_BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
        (_BPF_JGE_K, 2, 0, _X32_SYSCALL_BIT),
        (_BPF_JEQ_K, 1, 0, _SOCKET[_arch()]),
        (_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW),
        (_BPF_RET_K, 0, 0, deny),
    ]
    filters = (_SockFilter * len(program))(*(_SockFilter(*op) for op in program))
    fprog = _SockFprog(len(program), ctypes.cast(filters, ctypes.POINTER(_SockFilter)))
    if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        raise SandboxError(f"seccomp filter refused: {os.strerror(ctypes.get_errno())}")


def enter(workdir: str, support: SandboxSupport, readable: Sequence[str] = ()) -> None:
    """Make this process (a single-threaded conversion child) a sandbox; raise SandboxError if a probed layer fails.

    `readable`: folders of a parser's own data (pdfminer's character maps) it may read, and only those.
    """
    try:
        os.chdir(workdir)
    except OSError as exc:
        raise SandboxError(f"cannot enter the working directory: {exc.strerror}") from None
    os.environ.clear()
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SandboxError(f"PR_SET_NO_NEW_PRIVS failed: {os.strerror(ctypes.get_errno())}")
    if support.seccomp:
        _seccomp()
    if support.landlock_abi:
        _landlock(support.landlock_abi, readable)
