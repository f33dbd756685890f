"""The gateway smoke's URLs and secrets: the base URL taken apart (the doubled /v1 that tools add), credentials in URLs
hidden, the key masked in everything that leaves the module, local addresses told from remote ones."""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from typing import Any

MASK = "********"


V1_SUFFIX = re.compile(r"/v1(/chat/completions|/models)?/*$")


class Masker:
    """Replaces the key (as given and stripped) in any text that leaves the module."""

    def __init__(self, key: str) -> None:
        self.secrets = sorted({s for s in (key, key.strip(), key.strip("'\" \t")) if len(s) >= 4}, key=len)[::-1]

    def __call__(self, text: Any) -> Any:
        if not isinstance(text, str):
            return text
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        return text


def key_state(key: str) -> str:
    """missing, whitespace (around or inside), quoted (quote characters around it) or present."""
    if not key.strip():
        return "missing"
    if re.search(r"\s", key):
        return "whitespace"
    if key[0] in "'\"" or key[-1] in "'\"":
        return "quoted"
    return "present"


def hide_userinfo(url: str) -> str:
    """A URL without the password of its user info (proxy URLs may carry credentials)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:{MASK}@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def is_local(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def split_base(base_url: str) -> tuple[str, urllib.parse.SplitResult | None, str]:
    """The base URL without trailing slashes, its parts, and what is wrong with its form ('' when nothing)."""
    raw = base_url
    base = raw.strip().rstrip("/")
    if not base:
        return base, None, "empty"
    if raw != raw.strip() or re.search(r"\s", base):
        return base, None, "holds whitespace"
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https"):
        return base, None, f"scheme {parts.scheme or '(none)'!r} is not http or https"
    if not parts.hostname:
        return base, None, "has no host"
    try:
        valid_port = parts.port is None or parts.port > 0
    except ValueError:  # not a number, or out of range
        valid_port = False
    if not valid_port:
        return base, None, "has an invalid port"
    if parts.query or parts.fragment:
        return base, None, "has a query or a fragment"
    if parts.username or parts.password:
        return base, None, "holds credentials (the key goes into the Authorization header, not the URL)"
    return base, parts, ""
