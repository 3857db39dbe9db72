"""URL facts the configuration checks without loading the HTTP client."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit, urlunsplit


def display_url(url: str) -> str:
    """The URL without user:password, query or fragment: safe for logs and stats."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def insecure_remote(url: str) -> bool:
    """Plain http to another machine: keys and code would cross the network in clear."""
    return url.startswith("http:") and not is_loopback(urlsplit(url).hostname or "")
