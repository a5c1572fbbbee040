"""The Secure flag behind a TLS-terminating proxy: X-Forwarded-Proto counts only from SEARCHSVC_TRUSTED_PROXIES."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml

from tests.support.console import csrf_in
from tests.support.service_process import ServiceProcess

READER = "proxy-reader-token"


def sign_in_cookies(service: ServiceProcess) -> list[str]:
    """The Set-Cookie headers of a sign-in that came through a proxy which terminated https.

    Cookies are carried by hand: a client speaking plain http to the service would keep a Secure
    one to itself, where the browser, speaking https to the proxy, sends it.
    """
    url = f"http://127.0.0.1:{service.port}/ui/login"
    proxied = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}
    form = httpx.get(url, headers=proxied)
    csrf = csrf_in(form.text)
    # Over https the cookie is `__Host-kb_console_csrf`: carry it under the name the service set.
    name = next(c.split("=", 1)[0] for c in form.headers.get_list("set-cookie") if "kb_console_csrf=" in c)
    cookie = {"Cookie": f"{name}={csrf}"}
    response = httpx.post(url, data={"token": READER, "csrf_token": csrf}, headers=proxied | cookie)
    assert response.status_code == 303, response.text
    return form.headers.get_list("set-cookie") + response.headers.get_list("set-cookie")


@pytest.mark.parametrize(("trusted", "secure"), [("127.0.0.1", True), ("192.0.2.1", False)])
def test_cookies_are_secure_only_when_a_trusted_proxy_says_https(tmp_path: Path, trusted: str, secure: bool) -> None:
    (tmp_path / "tokens.yaml").write_text(yaml.safe_dump({"tokens": [{"name": "r", "token": READER, "sources": []}]}))
    env = {
        "SEARCHSVC_DATA_DIR": str(tmp_path / "data"),
        "SEARCHSVC_TOKENS_FILE": str(tmp_path / "tokens.yaml"),
        "SEARCHSVC_TRUSTED_PROXIES": trusted,
    }
    service = ServiceProcess(tmp_path / "service.log", env).start()
    try:
        service.wait_ready()
        cookies = sign_in_cookies(service)
        assert len(cookies) == 3 and all(("; secure" in c.lower()) is secure for c in cookies), cookies
        assert all(c.startswith("__Host-") is secure for c in cookies), cookies
    finally:
        service.stop()
