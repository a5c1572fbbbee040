"""The installed package's version, for --version."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from kboperator import __version__

DISTRIBUTION = "kb-knowledge-base"


def package_version() -> str:
    """The version pip installed; the source tree's own when run from a checkout that is not installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return __version__
