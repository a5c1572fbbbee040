"""`python -m kboperator`: run the operator (the equivalent of `kopf run` with our settings)."""

from __future__ import annotations

import logging

import kopf

from kboperator.settings import OperatorSettings

LIVENESS_ENDPOINT = "http://0.0.0.0:8080/healthz"


def main() -> None:
    settings = OperatorSettings()
    kopf.configure(log_format=kopf.LogFormat.FULL)
    logging.getLogger().setLevel(settings.log_level.upper())
    import kboperator.handlers  # noqa: F401  # registers the handlers with kopf

    kopf.run(
        clusterwide=settings.clusterwide,
        namespaces=settings.namespaces,
        standalone=True,
        liveness_endpoint=LIVENESS_ENDPOINT,
    )


if __name__ == "__main__":
    main()
