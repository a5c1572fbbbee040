"""Fixtures every test folder may use, registered once as plugins.

Registering them here (rather than re-importing them into each conftest) also lets pytest rewrite
the assertions inside these helper modules, so a failing check in a helper shows its values.
"""

# Imported (so assertion-rewritten) at start-up, not by Hypothesis's plugin in the terminal summary
# of a run that collected no property test: that late rewrite met CPython 3.11.7's "AST constructor
# recursion depth mismatch" SystemError after the service tests' teardown, failing a green run.
import hypothesis  # noqa: F401

pytest_plugins = [
    "tests.support.kube",  # kube, kubeconfig: the emulated API server (kmock), for fast unit tests
    "tests.support.controlplane",  # control_plane: the real etcd + kube-apiserver (tests/kube)
    "tests.support.githttp",  # served: git's own http-backend over tmp_path/served
    "tests.support.qdrant",  # qdrant_server: one real Qdrant node for the session (`make qdrant`)
    "tests.operator.search_service",  # service, search_client: the real service app, in-process
    "tests.operator.world",  # world: the operator's end-to-end world
    "tests.searchsvc.api_fixtures",  # api: the service over each store kind
]
