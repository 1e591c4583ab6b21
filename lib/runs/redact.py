"""Passwords and tokens out of what the run says and writes: a URI (a tracking URI kept in
trackers.json) or an error line quoting one, with its user info and every credential in its
query or fragment replaced by ***. Parsed with urllib.parse, not matched by a pattern of the
whole URI, so a password with "@" or "/" in it and a token in the query are both caught."""

from __future__ import annotations

import re
import urllib.parse

# A query or fragment key whose value is a credential: ?token=, ?access_token=, ?api_key=,
# ?X-Amz-Signature=, ?password=, ?sig= (Azure SAS), ?client_secret=... (a key that merely
# contains one of these is taken as one too: hiding a harmless value costs nothing).
SECRET_KEY = re.compile(r"token|key|secret|passw|pwd|auth|credential|signature|^sig$|session",
                        re.IGNORECASE)
_URI = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()]+")
# key=value outside a URI that parses (an error line quoting a query string on its own)
_PAIR = re.compile(r"([\w.-]+)=([^&\s'\"<>()]+)")


def redact(text: str) -> str:
    """`text` (a URI, or an error line quoting any) without a password or token it carries:
    a URI's user info, whatever its characters (scheme://user:p@ss/w0rd@host ->
    scheme://***@host), and the value of every query or fragment key that names a
    credential (?token=..., ?access_token=..., ?api_key=... -> ***)."""
    text = _URI.sub(lambda m: _redact_uri(m.group()), text)
    return _PAIR.sub(lambda m: f"{m[1]}=***" if SECRET_KEY.search(m[1]) else m[0], text)


def _redact_uri(uri: str) -> str:
    scheme, rest = uri.split("://", 1)
    # The user info ends at the last "@" before the query: a password may hold "@" or "/",
    # which urllib would take for the host's or the path's start.
    authority = re.split(r"[?#]", rest, maxsplit=1)[0]
    if "@" in authority and not rest.startswith("/"):  # "/": a path (file:///a@b), no host
        rest = "***" + rest[authority.rindex("@"):]
    parts = urllib.parse.urlsplit(f"{scheme}://{rest}")
    hidden = parts._replace(query=_redact_pairs(parts.query),
                            fragment=_redact_pairs(parts.fragment))
    # urlunsplit would drop an empty host's "//" (sqlite:////a -> sqlite://a): only when needed
    return f"{scheme}://{rest}" if hidden == parts else urllib.parse.urlunsplit(hidden)


def _redact_pairs(query: str) -> str:
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    if not any(SECRET_KEY.search(k) for k, _ in pairs):
        return query
    return urllib.parse.urlencode([(k, "***" if SECRET_KEY.search(k) else v) for k, v in pairs],
                                  safe="*/:")
