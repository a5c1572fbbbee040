"""Git object records and the parsers for `ls-tree -z` / `diff-tree -z --raw` output.

Paths are kept byte-exact (undecodable bytes as surrogates), whatever they contain.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

_KIND_BY_MODE = {"100644": "file", "100755": "file", "120000": "symlink", "160000": "submodule"}


def decode_path(raw: bytes) -> str:
    """Git paths are bytes; undecodable ones keep their bytes (surrogateescape) and are skipped later."""
    return raw.decode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class TreeEntry:
    """One entry of a tree: `kind` is file, symlink, submodule (or other for odd modes)."""

    path: str
    sha: str
    mode: str
    size: int | None = None

    @property
    def kind(self) -> str:
        return _KIND_BY_MODE.get(self.mode, "other")


@dataclass(frozen=True)
class Change:
    """One entry of a diff. status: A, M, D, T (type change) or R (rename, `old.path != new.path`)."""

    status: str
    old: TreeEntry | None
    new: TreeEntry | None

    def with_sizes(self, sizes: dict[str, int]) -> Change:
        """A copy whose file entries carry their blob sizes."""

        def sized(entry: TreeEntry | None) -> TreeEntry | None:
            return replace(entry, size=sizes.get(entry.sha)) if entry is not None and entry.kind == "file" else entry

        return replace(self, old=sized(self.old), new=sized(self.new))


def parse_ls_tree(out: bytes) -> list[TreeEntry]:
    """Parse `git ls-tree -r -l -z`: `<mode> <type> <sha> <size>\\t<path>\\0`."""
    entries = []
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, _type, sha, *size = meta.decode().split()  # without -l: no size
        known = size[0] if size and size[0].isdigit() else None
        entries.append(TreeEntry(decode_path(path), sha, mode, int(known) if known else None))
    return entries


def parse_diff(out: bytes) -> list[Change]:
    """Parse `git diff-tree -r -z --raw`: `:<m1> <m2> <sha1> <sha2> <status>\\0<path>\\0[<path2>\\0]`."""
    fields = out.split(b"\0")
    changes = []
    i = 0
    while i < len(fields) and fields[i].startswith(b":"):
        old_mode, new_mode, old_sha, new_sha, status = fields[i][1:].decode().split()
        letter = status[0]
        paths = [decode_path(fields[i + 1])]
        i += 2
        if letter in "RC":
            paths.append(decode_path(fields[i]))
            i += 1
        old = None if letter == "A" else TreeEntry(paths[0], old_sha, old_mode)
        new = None if letter == "D" else TreeEntry(paths[-1], new_sha, new_mode)
        if letter == "C":  # a copy leaves the source in place: it is an addition
            letter, old = "A", None
        changes.append(Change(letter, old, new))
    return changes
