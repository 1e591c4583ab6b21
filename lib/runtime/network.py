"""A service's host, as a tracker's client meets it: can it be reached from here, and does
~/.netrc hold a login for it (where `wandb login` keeps its key). No data is sent."""

from __future__ import annotations

import os
import socket
import urllib.parse


def reachable(url: str, timeout: float = 3.0) -> bool:
    """True when a TCP connection to `url`'s host opens (or a proxy is set: it decides)."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy")):
        return True
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
    except (OSError, TypeError):
        return False
    return True


def netrc_has(host: str) -> bool:
    """True when ~/.netrc holds a login for `host` (where `wandb login` keeps the key)."""
    import netrc

    try:
        return netrc.netrc().authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False
