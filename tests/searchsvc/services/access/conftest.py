"""The `reviews` fixture of Kubernetes mode (tests/support/kubernetes_mode.py), for this folder's tests."""

from tests.support.kubernetes_mode import reviews  # noqa: F401  # a fixture, found by name
