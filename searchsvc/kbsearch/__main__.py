"""`python -m kbsearch` (`knowledge-search`): serve the API with uvicorn on the configured address."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from pydantic import ValidationError


def build_parser() -> argparse.ArgumentParser:
    from kbsearch.version import package_version

    parser = argparse.ArgumentParser(
        prog="knowledge-search",
        description="Serve the knowledge base's search service: the HTTP API at /api/v1, MCP at /mcp, the "
        "console at /ui/. It takes no options: every setting is a SEARCHSVC_* environment variable, "
        "for example SEARCHSVC_HOST (default 127.0.0.1), SEARCHSVC_PORT (default 8000) and "
        "SEARCHSVC_DATA_DIR (default ./data); docs/operations/configuration.md lists them all.",
        epilog="Exit status: 0 after a clean shutdown, 2 an invalid setting or a port in use, "
        "3 the start-up failed (the log line says why).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    build_parser().parse_args(argv)  # --help and --version exit here, before anything starts
    from kbsearch.app import create_app
    from kbsearch.errors import ConfigurationError
    from kbsearch.logging import configure_logging
    from kbsearch.server import build_server
    from kbsearch.settings import Settings, describe
    from kbsearch.startup import ConfigurationErrorsInOneLine, listening_socket

    try:
        settings = Settings()
    except ValidationError as exc:
        # describe() names each variable and never echoes a value: a token must not reach the log.
        sys.stderr.write(f"invalid SEARCHSVC_* configuration:\n{describe(exc)}\n")
        return 2
    configure_logging(settings.http.log_level)
    logging.getLogger("uvicorn.error").addFilter(ConfigurationErrorsInOneLine())
    log = logging.getLogger(__name__)
    if settings.auth.writes_open:
        log.warning(
            "writes are open: none of SEARCHSVC_API_TOKEN, SEARCHSVC_TOKENS_FILE or Kubernetes mode is set",
            extra={"host": settings.http.host},
        )
    try:
        sock = listening_socket(settings.http)  # before the store and the model: a busy port is said first
    except ConfigurationError as exc:
        log.error("cannot start: %s", exc)
        return 2
    with sock:
        try:
            app = create_app(settings)
        except ConfigurationError as exc:  # a malformed tokens file, say
            log.error("cannot start: %s", exc)
            return 2
        log.info(
            "starting", extra={"host": settings.http.host, "port": settings.http.port, "store": settings.storage.store}
        )
        build_server(settings.http, app).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
