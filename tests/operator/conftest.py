"""Fixtures for the operator tests: the emulated Kubernetes API, and the end-to-end world."""

from tests.operator.search_service import search_client, service  # noqa: F401  # fixtures
from tests.operator.world import world  # noqa: F401  # fixture
from tests.support.kube import kube, kubeconfig  # noqa: F401  # fixtures
