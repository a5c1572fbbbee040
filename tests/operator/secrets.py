"""Secrets as the operator wants them: labelled for one use (kb.knowledgebase.dev/secret-type)."""

from __future__ import annotations

import base64

from tests.support.kube import KubeApi

SECRET_TYPE_LABEL = "kb.knowledgebase.dev/secret-type"  # the contract, spelled out (see kboperator.kube.secrets)


async def create_secret(api: KubeApi, name: str, data: dict[str, str], secret_type: str | None) -> None:
    """A Secret in the api's namespace; `secret_type` None: without the opt-in label."""
    labels = {SECRET_TYPE_LABEL: secret_type} if secret_type else {}
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": api.namespace, "labels": labels},
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
    }
    response = await api.kube.post(f"/api/v1/namespaces/{api.namespace}/secrets", json=body)
    assert response.status < 300, await response.text()


async def delete_secret(api: KubeApi, name: str) -> None:
    response = await api.kube.delete(f"/api/v1/namespaces/{api.namespace}/secrets/{name}")
    assert response.status < 300, await response.text()
