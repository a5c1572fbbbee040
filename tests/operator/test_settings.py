"""Operator settings from KBOPERATOR_* variables, and the `python -m kboperator` entrypoint."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import kopf
import pytest
from pydantic import ValidationError

from kboperator import __main__ as entrypoint
from kboperator.settings import OperatorSettings


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("KBOPERATOR_"):
            monkeypatch.delenv(name)
    settings = OperatorSettings()
    assert settings.search_url == "http://127.0.0.1:8000" and settings.search_token is None
    assert settings.namespaces == [] and settings.clusterwide
    assert settings.allow_local_repositories is False
    assert settings.max_concurrent_syncs == 4 and settings.cache_dir == Path("/var/cache/kb-operator")
    assert settings.full_reconcile_interval == 86400 and settings.startup_jitter_seconds == 30
    assert settings.metrics_port == 9090 and settings.http_timeout_seconds == 60
    assert settings.min_sync_interval_seconds == 60


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KBOPERATOR_NAMESPACES", " docs, team-a ,,")
    monkeypatch.setenv("KBOPERATOR_SEARCH_TOKEN", "hunter2")
    monkeypatch.setenv("KBOPERATOR_ALLOW_LOCAL_REPOSITORIES", "true")
    monkeypatch.setenv("KBOPERATOR_LOCAL_REPOSITORIES_ROOT", "/srv/git")
    monkeypatch.setenv("KBOPERATOR_MAX_CONCURRENT_SYNCS", "8")
    monkeypatch.setenv("KBOPERATOR_MIN_SYNC_INTERVAL_SECONDS", "0.5")
    settings = OperatorSettings()
    assert settings.min_sync_interval_seconds == 0.5
    assert settings.namespaces == ["docs", "team-a"] and not settings.clusterwide
    assert settings.allow_local_repositories and settings.max_concurrent_syncs == 8
    assert settings.search_token is not None and settings.search_token.get_secret_value() == "hunter2"
    assert "hunter2" not in repr(settings)


def test_invalid_values_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KBOPERATOR_MAX_CONCURRENT_SYNCS", "0")
    with pytest.raises(ValidationError, match="max_concurrent_syncs"):
        OperatorSettings()


def test_backoff_doubles_and_is_capped() -> None:
    settings = OperatorSettings(retry_backoff_seconds=30, retry_backoff_max_seconds=300)
    assert [settings.backoff(n) for n in (1, 2, 3, 4, 5, 6, 1000)] == [30, 60, 120, 240, 300, 300, 300]


@pytest.mark.parametrize(("namespaces", "clusterwide"), [("", True), ("docs,wiki", False)])
def test_main_runs_kopf_with_the_settings(monkeypatch: pytest.MonkeyPatch, namespaces: str, clusterwide: bool) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setenv("KBOPERATOR_NAMESPACES", namespaces)
    monkeypatch.setenv("KBOPERATOR_LOG_LEVEL", "WARNING")
    monkeypatch.setattr(kopf, "run", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(kopf, "configure", lambda **kwargs: None)
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", root.level)  # main() sets it; restore it afterwards
    entrypoint.main()
    (call,) = calls
    assert call["clusterwide"] is clusterwide
    assert call["namespaces"] == ([] if clusterwide else ["docs", "wiki"])
    assert call["liveness_endpoint"] == "http://0.0.0.0:8080/healthz" and call["standalone"] is True
    # Read once: the `configure` handler takes these settings from memo rather than reading them again.
    assert call["memo"]["settings"].clusterwide is clusterwide


def test_main_serves_liveness_on_the_configured_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chart's probe calls operator.healthPort, passed as KBOPERATOR_HEALTH_PORT: kopf must listen there."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setenv("KBOPERATOR_HEALTH_PORT", "8181")
    monkeypatch.setattr(kopf, "run", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(kopf, "configure", lambda **kwargs: None)
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", root.level)
    entrypoint.main()
    (call,) = calls
    assert call["liveness_endpoint"] == "http://0.0.0.0:8181/healthz"
    monkeypatch.setenv("KBOPERATOR_HEALTH_PORT", "0")
    with pytest.raises(ValidationError, match="health_port"):
        OperatorSettings()
