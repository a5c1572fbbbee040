"""A real Kubernetes control plane for the tests: etcd, kube-apiserver and kube-controller-manager.

The binaries are built from source by `make kube-tools` (hack/build-kube-tools.sh) into
.tools/kube; `KB_KUBE_TOOLS` points elsewhere. Nothing runs as a pod (there is no kubelet): the
operator and the search service run as local processes that talk to this API server.

Every child starts in its own process group and dies with the test process (PR_SET_PDEATHSIG),
so even a pytest killed with SIGKILL leaves no etcd behind; `stop()` kills the groups.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import ipaddress
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

__all__ = ["ControlPlane", "control_plane", "running_control_plane", "tools_dir"]

REPO = Path(__file__).resolve().parents[2]
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")
#: The issuer (and so the default audience) of the ServiceAccount tokens this API server signs.
ISSUER = "https://kubernetes.default.svc.cluster.local"
_PR_SET_PDEATHSIG = 1


def tools_dir() -> Path:
    """Where the control plane's binaries are; a missing one fails the test run, never skips it."""
    tools = Path(os.environ.get("KB_KUBE_TOOLS") or REPO / ".tools" / "kube")
    missing = [name for name in BINARIES if not os.access(tools / name, os.X_OK)]
    if missing:
        pytest.fail(
            f"no {', '.join(missing)} in {tools}: run `make kube-tools` (builds them from source with Go)",
            pytrace=False,
        )
    return tools


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _die_with_parent(parent: int) -> None:
    """In the child before exec: SIGKILL when the test process dies, however it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


# --- certificates -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _KeyPair:
    cert: Path
    key: Path


def _write_key(path: Path, key: rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _name(common: str, org: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if org:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(parts)


class _Pki:
    """A throw-away CA, made at start, that signs the serving and client certificates."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        now = datetime.datetime.now(datetime.UTC)
        self._ca = (
            x509.CertificateBuilder()
            .subject_name(_name("kb-test-ca"))
            .issuer_name(_name("kb-test-ca"))
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca = folder / "ca.crt"
        self.ca.write_bytes(self._ca.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, common: str, *, org: str | None = None, server: bool = False) -> _KeyPair:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common, org))
            .issuer_name(self._ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server:
            sans: list[x509.GeneralName] = [
                x509.DNSName("localhost"),
                x509.DNSName("kubernetes.default.svc"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            ]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
            usage = x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
        else:
            usage = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        pair = _KeyPair(self.folder / f"{name}.crt", self.folder / f"{name}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(pair.key, key)
        return pair

    def service_account_keys(self) -> tuple[Path, Path]:
        """The key pair kube-apiserver signs ServiceAccount tokens with (and checks them against)."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private, public = self.folder / "sa.key", self.folder / "sa.pub"
        _write_key(private, key)
        public.write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        return private, public


# --- processes ----------------------------------------------------------------------------------


class _Child:
    """One control-plane process in its own process group, with its output in a log file.

    `env` and `cwd` default to the tests' own (tests/support/qdrant.py gives its servers theirs).
    """

    def __init__(
        self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        self.name, self.argv, self.log = name, argv, log
        self.env, self.cwd = env, cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        parent = os.getpid()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=lambda: _die_with_parent(parent),
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 25) -> str:
        text = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(text[-lines:])

    def check_running(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; its log ({self.log}):\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL the whole process group and reap it."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on free loopback ports under `root`.

    `apiserver_args` adds (or overrides) kube-apiserver flags; `controller_manager=False` starts
    no kube-controller-manager (for a plane whose test needs no namespace or garbage collection)."""

    def __init__(
        self, root: Path, tools: Path, *, apiserver_args: tuple[str, ...] = (), controller_manager: bool = True
    ) -> None:
        self.root, self.tools = root, tools
        self.apiserver_args, self.with_controller_manager = apiserver_args, controller_manager
        root.mkdir(parents=True, exist_ok=True)
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.api_port, self.kcm_port = free_port(), free_port()
        self.server = f"https://127.0.0.1:{self.api_port}"
        self.kubeconfig = root / "admin.kubeconfig"
        self.started_in: float = 0.0
        self._children: list[_Child] = []

    # The admin kubeconfig belongs to system:masters: it is the test's own hand, never the operator's.
    def start(self, timeout_s: float = 120) -> ControlPlane:
        begin = time.monotonic()
        taken = [p for p in (self.etcd_port, self.etcd_peer_port, self.api_port, self.kcm_port) if not _port_is_free(p)]
        if taken:
            raise RuntimeError(f"loopback ports already taken: {taken}")
        pki = _Pki(self.root / "pki")
        self.ca = pki.ca
        serving = pki.issue("apiserver", "kube-apiserver", server=True)
        admin = pki.issue("admin", "kb-test-admin", org="system:masters")
        sa_key, sa_pub = pki.service_account_keys()
        self._write_kubeconfig(self.kubeconfig, {"client-certificate": str(admin.cert), "client-key": str(admin.key)})

        self.etcd = self._child("etcd", [
            "--name=kb-test",
            f"--data-dir={self.root / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{self.etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{self.etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{self.etcd_peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{self.etcd_peer_port}",
            f"--initial-cluster=kb-test=http://127.0.0.1:{self.etcd_peer_port}",
            "--unsafe-no-fsync",  # a test cluster's data dies with it: skip the fsyncs
            "--log-level=warn",
        ])  # fmt: skip
        self.apiserver = self._child("kube-apiserver", [
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            "--endpoint-reconciler-type=none",  # the kubernetes Service may not point at loopback
            f"--secure-port={self.api_port}",
            f"--cert-dir={self.root / 'apiserver-certs'}",
            f"--tls-cert-file={serving.cert}",
            f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={pki.ca}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={sa_pub}",
            f"--service-account-signing-key-file={sa_key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--enable-priority-and-fairness=false",
            "--v=1",
            *self.apiserver_args,
        ])  # fmt: skip
        self.controller_manager = self._child("kube-controller-manager", [
            f"--kubeconfig={self.kubeconfig}",
            "--controllers=namespace-controller,garbage-collector-controller",
            "--leader-elect=false",
            "--use-service-account-credentials=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.kcm_port}",
            f"--cert-dir={self.root / 'kcm-certs'}",
            "--v=1",
        ])  # fmt: skip
        try:
            self.etcd.start()
            self._wait(self.etcd, self._etcd_healthy, timeout_s)
            self.apiserver.start()
            self._wait(self.apiserver, self._apiserver_ready, timeout_s)
            if self.with_controller_manager:
                self.controller_manager.start()
                self._wait(self.controller_manager, self._controller_manager_up, timeout_s)
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - begin
        return self

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    def stop(self) -> None:
        for child in reversed(self._children):
            child.kill()

    def restart_apiserver(self, timeout_s: float = 120) -> None:
        """kill -9 the API server and start it again on the same port (etcd keeps the data)."""
        self.apiserver.kill()
        self.apiserver.start()
        self._wait(self.apiserver, self._apiserver_ready, timeout_s)

    # --- clients --------------------------------------------------------------------------------

    def kubectl(
        self, *args: str, input: str | None = None, kubeconfig: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl as the admin (or with `kubeconfig`); raise with its stderr on failure."""
        done = subprocess.run(
            [str(self.tools / "kubectl"), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return done

    def explain(self, field: str, timeout_s: float = 120) -> str:
        """`kubectl explain field`, waiting for the schema to be published.

        A CRD is Established before the API server's OpenAPI controller publishes its schema, so
        an explain right after an install can fail with "couldn't find resource" for a while.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            done = self.kubectl("explain", field, check=False)
            if done.returncode == 0:
                return done.stdout
            if time.monotonic() > deadline:
                raise AssertionError(f"kubectl explain {field} failed ({done.returncode}):\n{done.stderr}")
            time.sleep(0.5)

    def get(self, *args: str) -> dict:
        """`kubectl get ... -o yaml` as a dict."""
        loaded: dict = yaml.safe_load(self.kubectl("get", *args, "-o", "yaml").stdout)
        return loaded

    def token(self, service_account: str, namespace: str, *, audience: str | None = None) -> str:
        """A TokenRequest token of a ServiceAccount (what a projected volume would hold)."""
        args = ["create", "token", service_account, "-n", namespace, "--duration=1h"]
        if audience:
            args.append(f"--audience={audience}")
        return self.kubectl(*args).stdout.strip()

    def token_kubeconfig(self, path: Path, token: str, namespace: str = "default") -> Path:
        """A kubeconfig that authenticates with a bearer token: the API server judges it by RBAC."""
        self._write_kubeconfig(path, {"token": token}, namespace)
        return path

    def _write_kubeconfig(self, path: Path, user: dict[str, str], namespace: str = "default") -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "kb-test", "cluster": {"server": self.server, "certificate-authority": str(self.ca)}}
            ],
            "users": [{"name": "user", "user": user}],
            "contexts": [
                {"name": "kb-test", "context": {"cluster": "kb-test", "user": "user", "namespace": namespace}}
            ],
            "current-context": "kb-test",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)

    # --- start-up -------------------------------------------------------------------------------

    def _child(self, name: str, args: list[str]) -> _Child:
        child = _Child(name, [str(self.tools / name), *args], self.root / f"{name}.log")
        self._children.append(child)
        return child

    def _wait(self, child: _Child, ready: object, timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            child.check_running()
            if ready():  # type: ignore[operator]
                return
            time.sleep(0.1)
        raise RuntimeError(f"{child.name} not ready within {timeout_s:.0f}s; its log ({child.log}):\n{child.tail()}")

    def _etcd_healthy(self) -> bool:
        return _get(f"{self.etcd_url}/health") == 200

    def _apiserver_ready(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.root / "pki" / "admin.crt"), str(self.root / "pki" / "admin.key"))
        return _get(f"{self.server}/readyz", context) == 200

    def _controller_manager_up(self) -> bool:
        # /healthz of kube-controller-manager is open to anyone (--authorization-always-allow-paths).
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return _get(f"https://127.0.0.1:{self.kcm_port}/healthz", context) == 200


def _get(url: str, context: ssl.SSLContext | None = None) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ssl.SSLError):
        return 0


@contextlib.contextmanager
def running_control_plane(root: Path, **options: Any) -> Iterator[ControlPlane]:
    """A started control plane (options as ControlPlane takes them), stopped and its data removed after."""
    plane = ControlPlane(root, tools_dir(), **options)
    try:
        plane.start()
    except RuntimeError as exc:
        pytest.fail(f"the test control plane did not start: {exc}", pytrace=False)
    try:
        yield plane
    finally:
        plane.stop()
        shutil.rmtree(plane.root / "etcd", ignore_errors=True)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """One control plane for the whole test session, torn down at its end."""
    with running_control_plane(tmp_path_factory.mktemp("controlplane")) as plane:
        yield plane
