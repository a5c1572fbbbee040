"""What `python -m kbsearch` checks and says before it serves: one clear line when it cannot start.

uvicorn binds its port only after the app's start-up, which opens the store and loads the model:
a busy port was found after the log said "ready", in uvicorn's own words. The socket is bound
here first, and handed to uvicorn, so the port is held from the first moment and a busy one is
named with the variable that moves it. A ConfigurationError raised during the app's start-up
(a data directory another process holds, say) reaches the log as uvicorn's traceback; the
filter below turns that record into its message.
"""

from __future__ import annotations

import logging
import socket

from kbsearch.errors import ConfigurationError
from kbsearch.settings import HttpSettings

_CONFIGURATION_ERROR = f"{ConfigurationError.__module__}.{ConfigurationError.__qualname__}: "


def listening_socket(http: HttpSettings) -> socket.socket:
    """A socket bound to SEARCHSVC_HOST:SEARCHSVC_PORT as uvicorn binds it; ConfigurationError when it cannot be."""
    family = socket.AF_INET6 if ":" in http.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a restart need not wait for TIME_WAIT
    try:
        sock.bind((http.host, http.port))
    except OSError as exc:
        sock.close()
        where = f"{http.host}:{http.port}"
        if exc.errno in (98, 48):  # EADDRINUSE on Linux, macOS
            raise ConfigurationError(
                f"port {http.port} is already in use on {http.host}: another process (another knowledge-search?) "
                f"listens there; stop it, or set SEARCHSVC_PORT to a free port"
            ) from None
        raise ConfigurationError(
            f"cannot listen on {where}: {exc.strerror or exc}; check SEARCHSVC_HOST and SEARCHSVC_PORT"
        ) from None
    sock.set_inheritable(True)
    return sock


class ConfigurationErrorsInOneLine(logging.Filter):
    """On uvicorn's logger: the traceback of a ConfigurationError that stopped start-up becomes its message."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        last = message.rstrip().rpartition("\n")[2]
        if message.startswith("Traceback (most recent call last)") and last.startswith(_CONFIGURATION_ERROR):
            record.msg, record.args = f"cannot start: {last.removeprefix(_CONFIGURATION_ERROR)}", ()
            record.exc_info = record.exc_text = None
        return True
