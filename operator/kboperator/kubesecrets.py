"""Reading the Secrets a KnowledgeSource names, through the Kubernetes API.

kopf ships no API client for handlers, so this uses the official `kubernetes` client (the same
configuration kopf's own login uses: in-cluster first, then kubeconfig), in a worker thread so
that the event loop never blocks. Only the Secret named in the spec, in the object's own
namespace, is ever read.
"""

from __future__ import annotations

import asyncio
import base64
import binascii

import kubernetes.client
import kubernetes.config
from kubernetes.client.rest import ApiException

from kboperator.errors import SyncError
from kboperator.models import Credentials


class SecretError(SyncError):
    """A Secret or one of its keys is missing or unreadable: fixed by changing the Secret."""


class KubernetesUnavailableError(SyncError):
    """The Kubernetes API did not answer; trying again later can help."""

    transient = True


class SecretReader:
    """Fetches and decodes Secrets; values never appear in messages."""

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self._api = kubernetes.client.CoreV1Api(api_client)
        self._api_client = api_client

    @classmethod
    def from_environment(cls) -> SecretReader:
        """Configure like kopf's own login: the service account in a pod, else kubeconfig."""
        configuration = kubernetes.client.Configuration()
        try:
            kubernetes.config.load_incluster_config(client_configuration=configuration)
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config(client_configuration=configuration)
        return cls(kubernetes.client.ApiClient(configuration))

    def close(self) -> None:
        """Release the connection pool."""
        self._api_client.close()

    async def read(self, namespace: str, name: str) -> dict[str, str]:
        """The Secret's decoded data (stringData is folded into data by the API server)."""
        return await asyncio.to_thread(self._read, namespace, name)

    def _read(self, namespace: str, name: str) -> dict[str, str]:
        try:
            secret = self._api.read_namespaced_secret(name, namespace, _request_timeout=30)
        except ApiException as exc:
            if exc.status == 404:
                raise SecretError(f"Secret {namespace}/{name} does not exist") from None
            if exc.status in (401, 403):
                raise SecretError(f"the operator may not read Secret {namespace}/{name}") from None
            raise KubernetesUnavailableError(
                f"reading Secret {namespace}/{name} failed: HTTP {exc.status}"
            ) from None
        except Exception as exc:  # no answer at all (urllib3's connection and timeout errors)
            raise KubernetesUnavailableError(
                f"reading Secret {namespace}/{name} failed: {type(exc).__name__}"
            ) from None
        decoded: dict[str, str] = {}
        for key, value in (secret.data or {}).items():
            try:
                decoded[key] = base64.b64decode(value or "").decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                raise SecretError(f"Secret {namespace}/{name} key {key!r} is not UTF-8 text") from None
        return decoded


async def repository_credentials(
    reader: SecretReader, namespace: str, name: str, *, ssh: bool
) -> Credentials:
    """Credentials from a Secret: `token` (+`username`) for https, `ssh-privatekey` (+`known_hosts`)."""
    data = await reader.read(namespace, name)
    needed = "ssh-privatekey" if ssh else "token"
    if not data.get(needed, "").strip():
        raise SecretError(f"Secret {namespace}/{name} has no {needed!r} key")
    if ssh:
        return Credentials(ssh_private_key=data[needed], known_hosts=data.get("known_hosts") or None)
    return Credentials(username=data.get("username") or None, token=data[needed].strip())


async def service_token(reader: SecretReader, namespace: str, name: str, key: str) -> str:
    """The search service token from a Secret key."""
    data = await reader.read(namespace, name)
    token = data.get(key, "").strip()
    if not token:
        raise SecretError(f"Secret {namespace}/{name} has no {key!r} key")
    return token
