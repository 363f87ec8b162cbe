"""Which URLs a webhook may reach: http or https, at an address that is global.

A webhook is the one place where a tenant makes the control plane open a connection of its choosing, so
every address its host resolves to must be global: loopback, private (RFC 1918, IPv6 ULA fc00::/7),
link-local, shared (100.64/10), reserved and unspecified addresses are refused, as is a name resolving
to one, unless the deployment allows them (SMARTUNE_WEBHOOK_ALLOW_PRIVATE, or the networks in
SMARTUNE_WEBHOOK_ALLOW_CIDRS); multicast always. The check runs at registration and again before each
delivery, which then connects to the address checked (service.notify.deliver): a name whose DNS answer
changes after registration cannot lead a delivery inside. The resolver is a seam (`Resolver`): the unit
tests answer names from a table.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from service.config import Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]  # (host, port) -> its addresses, as text
ALLOW_HINT = "unless the deployment allows it (SMARTUNE_WEBHOOK_ALLOW_PRIVATE, SMARTUNE_WEBHOOK_ALLOW_CIDRS)"


class UrlRefused(ValueError):
    """The URL may not be a webhook's; the message says why."""


@dataclass(frozen=True)
class Target:
    """A checked URL and the addresses its host resolved to, each allowed (a delivery uses the first)."""

    url: httpx.URL
    addresses: tuple[IPAddress, ...]


def system_resolve(host: str, port: int) -> list[str]:
    """The host's addresses from the system's resolver, in its order, each once."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def kind_refused(ip: IPAddress, settings: Settings) -> str | None:
    """What kind of address `ip` is when a webhook may not reach it ("loopback", ...), else None."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    if ip.is_multicast:
        return "multicast"
    if settings.webhook_allow_private or any(ip in net for net in settings.webhook_allow_cidrs):
        return None
    for kind, flagged in (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("private", ip.is_private),
        ("non-global", not ip.is_global),  # shared 100.64/10 and the other special-purpose blocks
    ):
        if flagged:
            return kind
    return None


def parse(url: str) -> httpx.URL:
    """`url` as an http(s) URL with a host; UrlRefused otherwise."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, UnicodeError) as err:
        raise UrlRefused(f"not a URL: {err}") from None
    if parsed.scheme not in ("http", "https"):
        raise UrlRefused("only http and https URLs are accepted")
    if not parsed.raw_host:
        raise UrlRefused("the URL names no host")
    return parsed


def check(url: str, settings: Settings, resolve: Resolver = system_resolve) -> Target:
    """Parse `url` and resolve its host once; UrlRefused, naming the address, if any is not allowed."""
    parsed = parse(url)
    host = parsed.raw_host.decode("ascii")  # IDNA-encoded; an IPv6 literal without its brackets
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        addresses: list[IPAddress] = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            found = resolve(host, port)
            addresses = [ipaddress.ip_address(a.split("%")[0]) for a in found]  # fe80::1%eth0: no scope
        except (OSError, UnicodeError, ValueError) as err:
            raise UrlRefused(f"the host {host} does not resolve ({err})") from None
    if not addresses:
        raise UrlRefused(f"the host {host} resolves to no address")
    for ip in addresses:
        if kind := kind_refused(ip, settings):
            named = f"{ip}" if str(ip) == host else f"the host {host} resolves to {ip}, which"
            hint = "" if kind == "multicast" else f" {ALLOW_HINT}"
            raise UrlRefused(f"{named} is a {kind} address: a webhook may not reach it{hint}")
    return Target(parsed, tuple(addresses))
