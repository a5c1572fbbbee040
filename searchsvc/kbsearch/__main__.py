"""`python -m kbsearch`: serve the API with uvicorn on the configured address."""

from __future__ import annotations

import logging
import sys

from pydantic import ValidationError


def main() -> int:
    from kbsearch.app import create_app
    from kbsearch.logging import configure_logging
    from kbsearch.server import build_server
    from kbsearch.settings import Settings, describe

    try:
        settings = Settings()
    except ValidationError as exc:
        # describe() names each variable and never echoes a value: a token must not reach the log.
        sys.stderr.write(f"invalid SEARCHSVC_* configuration:\n{describe(exc)}\n")
        return 2
    configure_logging(settings.http.log_level)
    log = logging.getLogger(__name__)
    if settings.auth.writes_open:
        log.warning(
            "writes are open: none of SEARCHSVC_API_TOKEN, SEARCHSVC_TOKENS_FILE or Kubernetes mode is set",
            extra={"host": settings.http.host},
        )
    log.info(
        "starting", extra={"host": settings.http.host, "port": settings.http.port, "store": settings.storage.store}
    )
    build_server(settings.http, create_app(settings)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
