"""Where a credential may go: URLs are compared parsed, never as string prefixes."""

from __future__ import annotations

import pytest

from kboperator.errors import InvalidSpecError
from kboperator.repourl import parse_repo_url
from kboperator.settings import OperatorSettings
from kboperator.urlscope import ServicePolicy, parse_repository_prefix, parse_service_url, repository_endpoint

POLICY = ServicePolicy(
    "http://kb-search.kb-system.svc:8000", ["https://allowed.example/kb", "http://team.example:9000"]
)


@pytest.mark.parametrize(
    "url",
    [
        "http://kb-search.kb-system.svc:8000",
        "http://KB-Search.kb-system.svc.:8000/",  # case, trailing dot and slash do not matter
        "https://allowed.example/kb",
        "https://allowed.example:443/kb/",
        "https://allowed.example/kb/team-a",
        "http://team.example:9000/any/path",
    ],
)
def test_allowed_urls(url: str) -> None:
    POLICY.target(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://allowed.example",  # another scheme than the allowed https
        "https://allowed.example",  # above the allowed path
        "https://allowed.example/kb-evil",  # a string prefix, not a path prefix
        "https://allowed.example/kbx/team",
        "https://allowed.example.evil/kb",  # a string prefix of the host
        "https://evil.example/kb",
        "https://allowed.example:8443/kb",  # another port
        "http://team.example/x",  # port 80, not 9000
        "http://kb-search.kb-system.svc:8001",
    ],
)
def test_urls_off_the_list_are_refused(url: str) -> None:
    with pytest.raises(InvalidSpecError, match="not one of the search services"):
        POLICY.target(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://allowed.example@evil.example/kb",  # user info: the real host is evil.example
        "https://allowed.example:443@evil.example/kb",
        "https://allowed.example/kb/../../evil",
        "https://allowed.example/kb/%2e%2e/evil",
        "https://allowed.example/kb/./x",
        "https://allowed.example/kb?x=1",
        "https://allowed.example/kb#frag",
        "https://allowed.example\\@evil.example/kb",
        "https://allowed.example:99999/kb",
        "https://allowed.example:port/kb",
        "https:///kb",
        "ftp://allowed.example/kb",
        " https://allowed.example/kb",
    ],
)
def test_tricks_are_not_urls_at_all(url: str) -> None:
    with pytest.raises(InvalidSpecError, match="cannot be used"):
        POLICY.target(url)


def test_the_default_url_is_always_allowed_and_recognised() -> None:
    policy = ServicePolicy("http://kb-search:8000")
    assert policy.target(None) == policy.default == parse_service_url("http://KB-search:8000/")
    assert policy.is_default(None) and policy.is_default("http://kb-search:8000/")
    assert not policy.is_default("http://kb-search:8000/other") and not policy.is_default("not a url")
    with pytest.raises(InvalidSpecError):
        policy.target("http://kb-search.evil:8000")


def test_canonical_form() -> None:
    assert str(parse_service_url("HTTPS://Allowed.Example:443/kb/")) == "https://allowed.example/kb"
    assert str(parse_service_url("http://[::1]:8000")) == "http://[::1]:8000"


def test_settings_take_a_comma_separated_list_and_refuse_bad_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KBOPERATOR_ALLOWED_SEARCH_URLS", "https://a.example/kb/, http://b.example:9000")
    settings = OperatorSettings()
    assert settings.allowed_search_urls == ["https://a.example/kb", "http://b.example:9000"]
    settings.service_policy.target("https://a.example/kb/x")
    monkeypatch.setenv("KBOPERATOR_ALLOWED_SEARCH_URLS", "https://a.example@evil.example")
    with pytest.raises(ValueError, match="user info"):
        OperatorSettings()


@pytest.mark.parametrize(
    ("repository", "prefix", "within"),
    [
        ("https://github.com/acme/docs.git", "https://github.com/acme", True),
        ("https://github.com/acme/docs", "https://github.com/acme/docs.git", True),
        ("https://github.com/acme/docs", "https://github.com/", True),
        ("https://github.com/acme-evil/docs", "https://github.com/acme", False),
        ("https://github.com.evil.example/acme/docs", "https://github.com/acme", False),
        ("http://github.com/acme/docs", "https://github.com/acme", False),
        ("https://git.example.com:8443/acme/docs", "https://git.example.com/acme", False),
        ("git@github.com:acme/docs.git", "ssh://git@github.com/acme", True),
        ("ssh://git@github.com:22/acme/docs", "git@github.com:acme", True),
        ("git@github.com:acme/docs.git", "https://github.com/acme", False),
        ("ssh://git@github.com:2222/acme/docs", "git@github.com:acme", False),
    ],
)
def test_repository_prefixes(repository: str, prefix: str, within: bool) -> None:
    endpoint = repository_endpoint(parse_repo_url(repository, allow_local=False))
    assert endpoint is not None and endpoint.within(parse_repository_prefix(prefix)) is within


@pytest.mark.parametrize(
    "prefix", ["https://user:pw@github.com/acme", "https://github.com@evil/acme", "file:///srv", ""]
)
def test_bad_repository_prefixes(prefix: str) -> None:
    with pytest.raises(InvalidSpecError):
        parse_repository_prefix(prefix)
