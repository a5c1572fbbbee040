"""A real small filesystem, mounted in a private mount namespace, that tests can fill up.

The mount exists only inside a namespace held by one `unshare` process: the host never sees
it, and if the test dies the namespace (and its loop device) goes with that process. Programs
run inside with `SmallDisk.inside(argv)`; the test reaches the files through
/proc/<holder>/root. Needs root, `unshare`, `nsenter`, and `mkfs.ext4` for an ext4 disk.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

MIB = 1024 * 1024


class SmallDisk:
    """`kind` is "ext4" (a loop-mounted image, like a PersistentVolume) or "tmpfs"."""

    def __init__(self, workdir: Path, *, kind: str, size_mb: int) -> None:
        self.kind = kind
        self.size_mb = size_mb
        self.mountpoint = workdir / "disk"
        self._image = workdir / "disk.img"
        self._holder: subprocess.Popen | None = None
        self._fillers: list[Path] = []

    def __enter__(self) -> SmallDisk:
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        if self.kind == "ext4":
            with open(self._image, "wb") as image:
                image.truncate(self.size_mb * MIB)
            # -m 0: no blocks reserved for root, so root (the tests) sees the same space as the service.
            subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(self._image)], check=True)
            mount = f'mount -o loop {self._image} "$1"'
        elif self.kind == "tmpfs":
            mount = f'mount -t tmpfs -o size={self.size_mb}M tmpfs "$1"'
        else:
            raise ValueError(self.kind)
        # `cat` holds the namespace open until we close its stdin (or this process dies).
        self._holder = subprocess.Popen(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                f"{mount} && echo mounted && exec cat",
                "sh",
                str(self.mountpoint),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self._holder.stdout.readline().strip() != "mounted":
            self._holder.kill()
            self._holder.wait()
            raise RuntimeError(f"could not mount a {self.kind} at {self.mountpoint}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._holder is None:
            return
        subprocess.run(self.inside(["umount", "--lazy", str(self.mountpoint)]), check=False)
        self._holder.stdin.close()
        self._holder.wait(timeout=30)
        self._holder = None
        self._image.unlink(missing_ok=True)

    def inside(self, argv: list[str]) -> list[str]:
        """`argv` run in the namespace that sees the mount."""
        return ["nsenter", f"--mount=/proc/{self._holder.pid}/ns/mnt", "--", *argv]

    def host_path(self, path: Path) -> Path:
        """The path through which this process reaches `path` (a path under the mountpoint)."""
        return Path(f"/proc/{self._holder.pid}/root") / Path(path).relative_to("/")

    def free_bytes(self) -> int:
        st = os.statvfs(self.host_path(self.mountpoint))
        return st.f_bavail * st.f_frsize

    def fill(self, *, leave_bytes: int = 0) -> int:
        """Take all free space but about `leave_bytes` with a filler file; return its size.

        With leave_bytes=0 the filesystem ends up answering ENOSPC to any new block.
        """
        filler = self.host_path(self.mountpoint / f"filler-{len(self._fillers)}")
        self._fillers.append(filler)
        size = 0  # a failed fallocate may still keep some blocks; fstat has the truth
        with open(filler, "wb") as f:
            # Top up until there is no more to take: the file's own extent blocks count too,
            # so one exact fallocate can fail with ENOSPC; a smaller step then still fits.
            while (want := (self.free_bytes() - leave_bytes) // 4096 * 4096) >= 4096:
                step = want
                while step >= 4096:
                    try:
                        os.posix_fallocate(f.fileno(), size, step)
                    except OSError:
                        step = step // 2 // 4096 * 4096
                        continue
                    size += step
                    break
                else:
                    break  # not even one block fits
            return os.fstat(f.fileno()).st_size

    def free_all(self) -> None:
        """Remove every filler file."""
        for filler in self._fillers:
            filler.unlink(missing_ok=True)
        self._fillers.clear()
