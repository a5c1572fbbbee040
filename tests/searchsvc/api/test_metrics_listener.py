"""The metrics listener (kbsearch.metrics): the registry on a port of its own, closed with the block,
and a configuration that would put metrics on the API port refused at start-up."""

from __future__ import annotations

import socket

import httpx
import pytest

from kbsearch.metrics import Metrics, metrics_listener
from tests.support.service_process import free_port, run_to_exit


def test_the_listener_serves_the_registry_and_stops_when_the_block_ends() -> None:
    metrics = Metrics()
    metrics.peer_hits.labels("eu").inc()
    with metrics_listener(metrics.registry, "127.0.0.1", 0) as port:
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert response.status_code == 200
        assert 'searchsvc_peer_hits_total{peer="eu"} 1.0' in response.text
    with pytest.raises(httpx.ConnectError):  # closed with the block: nothing listens there
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_a_metrics_port_equal_to_the_api_port_or_already_taken_stops_start_up(tmp_path) -> None:
    port = free_port()
    same = run_to_exit(
        SEARCHSVC_PORT=str(port), SEARCHSVC_METRICS_PORT=str(port), SEARCHSVC_DATA_DIR=str(tmp_path / "a")
    )
    assert same.returncode == 2 and "SEARCHSVC_METRICS_PORT must differ" in same.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        child = run_to_exit(
            SEARCHSVC_PORT=str(free_port()), SEARCHSVC_METRICS_PORT=str(busy), SEARCHSVC_DATA_DIR=str(tmp_path / "b")
        )
    assert child.returncode != 0
