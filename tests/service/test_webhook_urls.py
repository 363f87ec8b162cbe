"""Which URLs a webhook may reach (service.notify.urls): http(s) only, and every address the host resolves to
global, unless the deployment allows private networks or names them. Names resolve through a table here
(the resolver seam); tests/integration/test_webhooks_server.py registers and delivers for real."""

from __future__ import annotations

import socket

import pytest

from service.config import Settings
from service.notify import urls

NAMES = {
    "hooks.example.com": ["93.184.215.14"],
    "v6.example.com": ["2606:2800:21f:cb07:6820:80da:af6b:8b2c"],
    "intranet.example.com": ["10.1.2.3"],
    "localhost.example.com": ["127.0.0.1"],
    "metadata.example.com": ["169.254.169.254"],
    "ula.example.com": ["fd12:3456:789a::1"],
    "scoped.example.com": ["fe80::1%eth0"],
    "mixed.example.com": ["93.184.215.14", "192.168.1.10"],  # one bad address spoils the name
    "lan.example.com": ["10.20.0.7"],
}


def resolve(host: str, port: int) -> list[str]:
    if host in NAMES:
        return NAMES[host]
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def settings(**changes: object) -> Settings:
    return Settings(bootstrap_admin=False, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://127.0.0.1:8080/hook", "loopback"),
        ("http://127.3.4.5/", "loopback"),
        ("http://[::1]/hook", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),  # an IPv4-mapped loopback
        ("http://10.0.0.5/", "private"),
        ("http://172.16.9.9/", "private"),
        ("https://192.168.1.1/", "private"),
        ("http://[fd00::1]/", "private"),  # IPv6 unique local
        ("http://169.254.169.254/latest/meta-data", "link-local"),  # the clouds' metadata service
        ("http://[fe80::1]/", "link-local"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://100.64.0.1/", "non-global"),  # carrier-grade NAT, shared
        ("http://224.0.0.1/", "multicast"),
        ("http://[ff02::1]/", "multicast"),
    ],
)
def test_non_global_address_literals_are_refused(url: str, kind: str) -> None:
    with pytest.raises(urls.UrlRefused, match=f"is a {kind} address"):
        urls.check(url, settings(), resolve)


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("intranet.example.com", "10.1.2.3"),
        ("localhost.example.com", "127.0.0.1"),
        ("metadata.example.com", "169.254.169.254"),
        ("ula.example.com", "fd12:3456:789a::1"),
        ("scoped.example.com", "fe80::1"),
        ("mixed.example.com", "192.168.1.10"),
    ],
)
def test_names_resolving_to_a_non_global_address_are_refused(host: str, address: str) -> None:
    with pytest.raises(urls.UrlRefused, match=f"the host {host} resolves to {address}, which is a"):
        urls.check(f"https://{host}/hook", settings(), resolve)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://hooks.example.com/x", "only http and https"),
        ("file:///etc/passwd", "only http and https"),
        ("gopher://hooks.example.com/", "only http and https"),
        ("hooks.example.com/x", "only http and https"),
        ("http:///x", "names no host"),
        ("https://nowhere.example.com/x", "does not resolve"),
        ("http://[::1/", "not a URL"),
    ],
)
def test_other_schemes_and_unresolvable_hosts_are_refused(url: str, why: str) -> None:
    with pytest.raises(urls.UrlRefused, match=why):
        urls.check(url, settings(), resolve)


def test_global_addresses_pass_with_what_they_resolved_to() -> None:
    target = urls.check("https://hooks.example.com:8443/a?b=1", settings(), resolve)
    assert [str(a) for a in target.addresses] == ["93.184.215.14"] and target.url.port == 8443
    assert [str(a) for a in urls.check("http://v6.example.com/", settings(), resolve).addresses] == [
        NAMES["v6.example.com"][0]
    ]
    assert str(urls.check("http://93.184.215.14/", settings(), resolve).addresses[0]) == "93.184.215.14"


def test_the_deployment_may_allow_private_addresses_or_some_networks() -> None:
    everything = settings(webhook_allow_private=True)
    for url in ("http://127.0.0.1:9/", "http://intranet.example.com/", "http://[fd00::1]/"):
        urls.check(url, everything, resolve)
    with pytest.raises(urls.UrlRefused, match="multicast address: a webhook may not reach it$"):
        urls.check("http://224.0.0.1/", everything, resolve)  # never: no TCP receiver listens there
    some = settings(webhook_allow_cidrs="10.20.0.0/16, fd00::/8")
    urls.check("http://lan.example.com/", some, resolve)
    urls.check("http://[fd00::7]/", some, resolve)
    with pytest.raises(urls.UrlRefused, match="10.1.2.3, which is a private address"):
        urls.check("http://intranet.example.com/", some, resolve)
    with pytest.raises(urls.UrlRefused, match="SMARTUNE_WEBHOOK_ALLOW_PRIVATE"):
        urls.check("http://127.0.0.1/", some, resolve)  # the refusal says how to allow it
