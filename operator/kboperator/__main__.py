"""`python -m kboperator`: run the operator (the equivalent of `kopf run` with our settings)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import kopf

from kboperator.settings import OperatorSettings
from kboperator.version import package_version


def liveness_endpoint(port: int) -> str:
    """kopf's liveness endpoint on all interfaces: the chart's probe calls it on this port."""
    return f"http://0.0.0.0:{port}/healthz"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kboperator",
        description="Run the knowledge-base operator: it watches KnowledgeSource resources and mirrors each "
        "source's git repository into the search service. It takes no options: every setting is a "
        "KBOPERATOR_* environment variable (for example KBOPERATOR_SEARCH_URL, KBOPERATOR_NAMESPACES); "
        "docs/operations/configuration.md lists them. It needs a Kubernetes cluster (in-cluster, or a kubeconfig); "
        "to sync one repository without one, use knowledge-sync.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    return parser


def main(argv: Sequence[str] = ()) -> None:
    build_parser().parse_args(argv)  # --help and --version exit here, before kopf starts
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
    main(sys.argv[1:])
