"""What every section of the settings shares: the variables' prefix, the base class, two helpers."""

from __future__ import annotations

import ipaddress

from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["ENV_PREFIX", "LOOPBACK_HOSTS", "Section", "is_loopback", "names"]

ENV_PREFIX = "SEARCHSVC_"
# Host header values of this machine, with any port: the MCP endpoint's default.
LOOPBACK_HOSTS = "127.0.0.1,127.0.0.1:*,localhost,localhost:*,[::1],[::1]:*"


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach `host`; a name other than localhost may resolve anywhere."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def names(value: str | None) -> list[str]:
    """The items of a comma-separated setting."""
    return [item.strip() for item in (value or "").split(",") if item.strip()]


class Section(BaseSettings):
    # Errors never show the input: a token's value must not reach a log or a terminal. A section
    # alone reads its own variables (`StoreSettings()`); inside Settings it is given them.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", hide_input_in_errors=True)
