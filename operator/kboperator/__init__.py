"""kboperator: mirrors git repositories into the knowledge-base search service."""

__version__ = "0.1.0"
