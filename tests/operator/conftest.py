"""Fixtures for the operator tests: the emulated Kubernetes API, and the end-to-end world."""

from tests.operator.e2e_support import world  # noqa: F401  # fixture
from tests.operator.kmock_support import kube, kubeconfig  # noqa: F401  # fixtures
from tests.operator.servicefixtures import search_client, service  # noqa: F401  # fixtures
