"""What of a sink's URI may be shown: every secret in it replaced by ``***``.

A URI holds secrets in two places: the password of its user info
(``postgresql://u:SECRET@host/db``, ``milvus:https://root:SECRET@host``) and
query parameters named like one (libpq's ``?password=SECRET``, a
``?token=`` or ``?api_key=``). :func:`public_uri` is the form the command
prints, records in ``_manifest.json`` and puts in its messages;
:func:`scrub` takes the same secrets, raw and percent-decoded, out of text
the command did not write (a database driver's error message).
"""

from __future__ import annotations

from urllib.parse import unquote

__all__ = ["HIDDEN", "public_uri", "scrub", "secrets_of"]

HIDDEN = "***"
# A query parameter whose name holds one of these holds a secret.
SECRET_NAMES = ("pass", "pwd", "secret", "token", "key", "auth", "credential", "signature")


def _parts(uri: str) -> tuple[str, str, str, str] | None:
    """(scheme://, user info, rest of the authority and path, query) of a
    URI, or None for what is not one (a path)."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return None
    before_query, q, query = rest.partition("?")
    userinfo, at, authority = before_query.rpartition("@")
    if not at:
        return scheme + sep, "", before_query, q + query
    return scheme + sep, userinfo + at, authority, q + query


def _secret_name(name: str) -> bool:
    name = unquote(name).lower()
    return any(word in name for word in SECRET_NAMES)


def _query_pairs(query: str) -> list[tuple[str, str | None]]:
    """The query's name=value pairs as written (value None for a bare name)."""
    pairs: list[tuple[str, str | None]] = []
    for item in query.removeprefix("?").split("&"):
        name, eq, value = item.partition("=")
        pairs.append((name, value if eq else None))
    return pairs


def secrets_of(uri: str) -> list[str]:
    """The secrets ``uri`` holds, as written and percent-decoded."""
    parts = _parts(uri)
    if parts is None:
        return []
    _, userinfo, _, query = parts
    found: list[str] = []
    _, colon, password = userinfo.removesuffix("@").partition(":")
    if colon and password:
        found.append(password)
    found += [v for n, v in _query_pairs(query) if v and _secret_name(n)] if query else []
    decoded = [unquote(s) for s in found]
    return sorted({s for s in found + decoded if s}, key=len, reverse=True)


def public_uri(uri: str) -> str:
    """``uri`` with its password and secret query values replaced by ``***``."""
    parts = _parts(uri)
    if parts is None:
        return uri
    scheme, userinfo, authority, query = parts
    user, colon, _ = userinfo.removesuffix("@").partition(":")
    if colon:  # an empty password too: whether there is one is not shown either
        userinfo = f"{user}:{HIDDEN}@"
    if query:
        query = "?" + "&".join(
            name if value is None else f"{name}={HIDDEN if _secret_name(name) else value}"
            for name, value in _query_pairs(query)
        )
    return scheme + userinfo + authority + query


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with each of ``secrets`` (longest first) replaced by ``***``."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    return text
