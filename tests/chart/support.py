"""Helpers shared by the chart tests: the operator's settings from rendered manifests, the CRD schema."""

from __future__ import annotations

import os

import pytest
import yaml

from kboperator.settings import OperatorSettings
from tests.chart.helmchart import OPERATOR, REPO, container, env_of


def operator_settings(manifests, monkeypatch: pytest.MonkeyPatch) -> OperatorSettings:
    """The settings the operator would start with, from the rendered env (Secret refs left out)."""
    for name in list(os.environ):
        if name.startswith("KBOPERATOR_"):
            monkeypatch.delenv(name)
    for name, env in env_of(container(manifests, "Deployment", OPERATOR, "operator")).items():
        if name.startswith("KBOPERATOR_") and "value" in env:
            monkeypatch.setenv(name, env["value"])
    return OperatorSettings()


def crd_schema() -> dict:
    crd = yaml.safe_load((REPO / "crds" / "knowledgesources.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return version["schema"]["openAPIV3Schema"]
