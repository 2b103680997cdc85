"""Where a callback may go: checked at submit (the URL) and again at delivery (the address).

At submit (`callback_url_check`): https (http only with JOBS_CALLBACK_ALLOW_HTTP), a host, no
userinfo, no fragment, at most MAX_URL_LENGTH characters, and a literal address only if it is
allowed. At delivery (`destination_resolve`): the host is resolved and the first allowed
address is the one the sender connects to (jobs.callbacks.transport), so a name that
resolves elsewhere between the check and the connect (DNS rebinding) changes nothing.
Allowed: a public (global unicast) address, or one inside JOBS_CALLBACK_ALLOWED_NETWORKS.
Refused: loopback, private, link-local (169.254.169.254 among them), multicast, reserved,
unspecified and shared addresses, v4 or v6, and a v6 address that embeds a refused v4 one
(v4-mapped, 6to4, NAT64). Per tenant (`host_allowed`, JOBS_CALLBACK_ALLOWED_HOSTS): the
hosts its callbacks may name, checked at submit (jobs.callbacks.services) and at each send
(jobs.callbacks.delivery).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import SplitResult, urlsplit

from jobs.conf import jobs_settings
from jobs.exceptions import InvalidCallbackUrl

MAX_URL_LENGTH = 2048
_LABEL = r"[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# What `POST /api/jobs/` takes (its OpenAPI pattern, checked first): http(s), a host NAME
# (no address literal), a port 1-9999, a path and query of printable ASCII without `#`. Every
# URL it matches passes `callback_url_check` but for the scheme (http needs
# JOBS_CALLBACK_ALLOW_HTTP); `jobs.submit` also takes public address literals.
_PATH_CHAR = '[!"$-~]'  # printable ASCII, no space, no `#` (ECMA: no escape needed)
API_URL_PATTERN = (
    rf"\Ahttps?://{_LABEL}(?:\.{_LABEL})*(?::[1-9][0-9]{{0,3}})?(?:[/?]{_PATH_CHAR}*)?\Z"
)
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_HOST_NAME = re.compile(r"^([A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?\.?)+$")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class RefusedDestination(Exception):
    """A callback's host resolves to no address the sender may reach."""


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a v6 one carries (v4-mapped, 6to4, NAT64), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _in_allowed_networks(ip: IPAddress) -> bool:
    for text in jobs_settings.CALLBACK_ALLOWED_NETWORKS:
        network = ipaddress.ip_network(text, strict=False)
        if ip.version == network.version and ip in network:
            return True
    return False


def address_allowed(ip: IPAddress) -> bool:
    """Whether a callback may connect to `ip` (module docstring)."""
    if _in_allowed_networks(ip):
        return True
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_v4(ip)
        if inner is not None:
            return address_allowed(inner)
    return ip.is_global and not ip.is_multicast and not ip.is_reserved


def _literal_address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


def _split(url: str) -> SplitResult:
    if not isinstance(url, str) or not url:
        raise InvalidCallbackUrl("callback_url must be a non-empty string")
    if len(url) > MAX_URL_LENGTH:
        raise InvalidCallbackUrl(f"callback_url is longer than {MAX_URL_LENGTH} characters")
    if not url.isascii() or not url.isprintable() or any(c.isspace() for c in url):
        raise InvalidCallbackUrl(
            "callback_url must be printable ASCII without spaces (percent-encode the rest, "
            "punycode the host)"
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as exc:
        raise InvalidCallbackUrl(f"callback_url is not a valid URL: {exc}") from None
    return parts


def url_host(url: str) -> str:
    """The host a callback URL names (checked by `callback_url_check` first)."""
    return _split(url).hostname or ""


def callback_url_check(url: str) -> str:
    """The URL if a callback may be sent to it (module docstring), else InvalidCallbackUrl."""
    parts = _split(url)
    schemes = {"https", "http"} if jobs_settings.CALLBACK_ALLOW_HTTP else {"https"}
    if parts.scheme.lower() not in schemes:
        allowed = " or ".join(sorted(schemes, reverse=True))
        raise InvalidCallbackUrl(f"callback_url must be an {allowed} URL")
    if "@" in parts.netloc:
        raise InvalidCallbackUrl("callback_url must not carry a user name or password")
    if parts.fragment or url.endswith("#"):
        raise InvalidCallbackUrl("callback_url must not have a fragment")
    host = parts.hostname
    if not host:
        raise InvalidCallbackUrl("callback_url must name a host")
    literal = _literal_address(host)
    if literal is not None:
        if not address_allowed(literal):
            raise InvalidCallbackUrl(
                f"callback_url points at {literal}, an address callbacks may not reach "
                "(loopback, private, link-local, multicast or reserved)"
            )
    elif not _HOST_NAME.match(host):
        raise InvalidCallbackUrl("callback_url has an invalid host name")
    return url


def host_allowed(host: str, tenant_name: str | None) -> bool:
    """May callbacks of `tenant_name`'s jobs (None: without a tenant) go to `host`?
    JOBS_CALLBACK_ALLOWED_HOSTS: a tenant with an entry only to its hosts ('.example.com':
    the domain and its subdomains); one without an entry to any host."""
    allowed = jobs_settings.CALLBACK_ALLOWED_HOSTS.get(tenant_name or "")
    if allowed is None:
        return True
    name = host.lower().rstrip(".")
    for entry in allowed:
        entry = entry.lower().rstrip(".")
        if name == entry.lstrip(".") or (entry.startswith(".") and name.endswith(entry)):
            return True
    return False


def destination_resolve(host: str, port: int) -> str:
    """The address to connect to: the first allowed one `host` resolves to (RefusedDestination
    when there is none). A literal address is checked as it is."""
    literal = _literal_address(host)
    if literal is not None:
        candidates = [literal]
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise ConnectionError(f"cannot resolve {host}: {exc}") from None
        candidates = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    for ip in candidates:
        if address_allowed(ip):
            return str(ip)
    shown = ", ".join(sorted({str(ip) for ip in candidates})) or "nothing"
    raise RefusedDestination(f"{host} resolves to {shown}: not an address callbacks may reach")
