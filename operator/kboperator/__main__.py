"""`python -m kboperator`: run the operator (the equivalent of `kopf run` with our settings)."""

from __future__ import annotations

import logging

import kopf

from kboperator.settings import OperatorSettings


def liveness_endpoint(port: int) -> str:
    """kopf's liveness endpoint on all interfaces: the chart's probe calls it on this port."""
    return f"http://0.0.0.0:{port}/healthz"


def main() -> None:
    settings = OperatorSettings()
    kopf.configure(log_format=kopf.LogFormat.FULL)
    logging.getLogger().setLevel(settings.log_level.upper())
    import kboperator.kube.handlers  # noqa: F401  # registers the handlers with kopf

    kopf.run(
        clusterwide=settings.clusterwide,
        namespaces=settings.namespaces,
        memo=kopf.Memo(settings=settings),  # read once, here: the `configure` handler takes it from memo
        # Peering (several replicas, one working) is configured in the `configure` startup handler.
        standalone=not settings.peering_name,
        liveness_endpoint=liveness_endpoint(settings.health_port),
    )


if __name__ == "__main__":
    main()
