"""SSH host keys are configuration: checked strictly against the configured known_hosts.

The real ssh binary reads every GIT_SSH_COMMAND here (`ssh -G` prints the options it would
connect with), so these tests check what ssh does, not how the command line looks.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kboperator.git.auth import HostKeys, git_call
from kboperator.kube.context import OperatorContext
from kboperator.models import Credentials
from kboperator.repourl import parse_repo_url
from kboperator.settings import OperatorSettings
from tests.support.git import ssh_config

LOCATION = parse_repo_url("git@git.example.com:org/repo.git", allow_local=False)
KEY = "-----BEGIN KEY-----\nabc\n-----END KEY-----"
LINE = "git.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


@pytest.fixture
def configured(tmp_path: Path) -> Path:
    """The operator's known_hosts, as the chart mounts it from its ConfigMap."""
    path = tmp_path / "etc" / "known_hosts"
    path.parent.mkdir()
    path.write_text(LINE + "\n")
    return path


def options(tmp_path: Path, creds: Credentials, host_keys: HostKeys) -> dict[str, str]:
    with git_call(LOCATION, creds, pinned_known_hosts=tmp_path / "pinned", host_keys=host_keys) as call:
        return ssh_config(call.env["GIT_SSH_COMMAND"])


def test_the_configured_known_hosts_are_checked_strictly(tmp_path: Path, configured: Path) -> None:
    config = options(tmp_path, Credentials(ssh_private_key=KEY), HostKeys(configured, trust_on_first_use=False))
    assert config["stricthostkeychecking"] == "true"  # ssh's spelling of "yes": unknown hosts are refused
    assert config["userknownhostsfile"] == str(configured)
    assert config["globalknownhostsfile"] == os.devnull  # the image's /etc/ssh plays no part
    assert not (tmp_path / "pinned").exists()  # nothing is pinned in the (ephemeral) cache


def test_without_any_known_hosts_every_host_is_unknown_and_refused(tmp_path: Path) -> None:
    config = options(tmp_path, Credentials(ssh_private_key=KEY), HostKeys(None, trust_on_first_use=False))
    assert config["stricthostkeychecking"] == "true"
    assert config["userknownhostsfile"] == os.devnull


def test_a_secrets_known_hosts_adds_to_the_configured_ones(tmp_path: Path, configured: Path) -> None:
    creds = Credentials(ssh_private_key=KEY, known_hosts="other.example.com ssh-ed25519 AAAA")
    config = options(tmp_path, creds, HostKeys(configured, trust_on_first_use=False))
    first, second = config["userknownhostsfile"].split()
    assert Path(first).name == "known_hosts" and second == str(configured)
    assert config["stricthostkeychecking"] == "true"


def test_the_configuration_applies_without_a_key_too(tmp_path: Path, configured: Path) -> None:
    config = options(tmp_path, Credentials(), HostKeys(configured, trust_on_first_use=False))
    assert config["stricthostkeychecking"] == "true" and config["userknownhostsfile"] == str(configured)


def test_trust_on_first_use_pins_only_hosts_the_configuration_does_not_know(tmp_path: Path, configured: Path) -> None:
    config = options(tmp_path, Credentials(ssh_private_key=KEY), HostKeys(configured, trust_on_first_use=True))
    # ssh pins a new key in the first file, and refuses one that contradicts any of them.
    assert config["stricthostkeychecking"] == "accept-new"
    assert config["userknownhostsfile"].split() == [str(tmp_path / "pinned"), str(configured)]


def test_the_operator_refuses_unknown_hosts_unless_told_otherwise(tmp_path: Path, configured: Path) -> None:
    assert OperatorSettings().ssh_trust_on_first_use is False
    settings = OperatorSettings(cache_dir=tmp_path / "cache", ssh_known_hosts_file=configured)
    services = OperatorContext(settings, secrets=None)  # type: ignore[arg-type]  # no Secret is read here
    assert services.repos.host_keys == HostKeys(configured, trust_on_first_use=False)
