"""`python -m kbsearch`: serve the API with uvicorn on the configured address."""

from __future__ import annotations

import logging
import sys

from pydantic import ValidationError


def main() -> int:
    import uvicorn

    from kbsearch.app import create_app
    from kbsearch.logging import configure_logging
    from kbsearch.settings import Settings

    try:
        settings = Settings()
    except ValidationError as exc:
        sys.stderr.write(f"invalid SEARCHSVC_* configuration:\n{exc}\n")
        return 2
    configure_logging(settings.log_level)
    logging.getLogger(__name__).info(
        "starting", extra={"host": settings.host, "port": settings.port, "store": settings.store}
    )
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_config=None, access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
