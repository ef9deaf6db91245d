"""What of a sink's target may be shown: every secret in it replaced by ``***``.

Each target is read by the parser of the client that will connect with it,
never by a hand-written split:

- a PostgreSQL target (a ``postgresql://`` URI or a libpq keyword/value
  string, ``host=h dbname=db password=...``) by libpq's own
  (``psycopg.conninfo``): whatever libpq reads as ``password`` or
  ``sslpassword`` is a secret. The URI is shown with those values replaced
  where they are written, and the result is read back by libpq to check
  that only they changed; a keyword string (or a URI that check refuses) is
  shown as libpq writes the parameters it read, the secrets replaced;
- another URI (``milvus:https://root:SECRET@host``, ``qdrant:URL?api_key=``):
  the password of its user info, read widely (to the last ``@`` before the
  path, so that ``root:s3cr?et@host`` hides all of ``s3cr?et``) and as RFC
  3986 reads it (``urllib.parse``, which their clients follow), and every
  query parameter named like a secret.

:func:`shown` gives both the public form (what the command prints, records
in ``_manifest.json`` and puts in its messages) and the secrets, as written
and as decoded, that :func:`scrub` takes out of text the command did not
write (a database driver's message).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

__all__ = [
    "HIDDEN",
    "POSTGRES_SECRETS",
    "SECRET_NAMES",
    "Shown",
    "UnreadableTarget",
    "postgres_params",
    "scrub",
    "shown",
]

HIDDEN = "***"
# The libpq parameters that hold a secret (libpq's "debug display" of them
# is "*": PQconndefaults' dispchar).
POSTGRES_SECRETS = ("password", "sslpassword")
# A query parameter of another URI whose name holds one of these holds a secret.
SECRET_NAMES = ("pass", "pwd", "secret", "token", "key", "auth", "credential", "signature")


class UnreadableTarget(ValueError):
    """libpq cannot read the target. Its message never quotes the target:
    libpq's own does (``invalid percent-encoded token: "%zz..."``), and what
    it quotes may be a password."""


@dataclass(frozen=True)
class Shown:
    public: str  # the target, every secret replaced by HIDDEN
    secrets: tuple[str, ...]  # as written and as decoded, longest first


def postgres_params(target: str) -> dict[str, str]:
    """The parameters libpq reads in ``target``, or :class:`UnreadableTarget`."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(target)
    except psycopg.ProgrammingError:
        raise UnreadableTarget(
            "libpq cannot read it as a connection URI or a keyword/value string"
        ) from None
    return {k: str(v) for k, v in params.items()}


def shown(target: str, postgres: bool) -> Shown:
    """``target``'s public form and its secrets (``postgres``: read by libpq)."""
    return _postgres(target) if postgres else _url(target)


def scrub(text: str, secrets: tuple[str, ...] | list[str]) -> str:
    """``text`` with each of ``secrets`` (longest first) replaced by ``***``."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    return text


def _mask_query(query: str, secret: Callable[[str], bool]) -> tuple[str, list[str]]:
    """A URI's query (``a=1&b=2``, as written) with the value of each
    parameter whose name ``secret`` takes replaced, and those values."""
    items, found = [], []
    for item in query.split("&") if query else []:
        name, eq, value = item.partition("=")
        if eq and secret(name):
            found.append(value)
            items.append(f"{name}={HIDDEN}")
        else:
            items.append(item)
    return "&".join(items), found


def _ordered(found: list[str]) -> tuple[str, ...]:
    """The secrets, each also percent-decoded (a driver may quote either),
    without repeats, longest first."""
    every = found + [unquote(s) for s in found]
    return tuple(sorted({s for s in every if s}, key=len, reverse=True))


# -- PostgreSQL: libpq's reading ---------------------------------------------


def _postgres(target: str) -> Shown:
    from psycopg.conninfo import make_conninfo

    params = postgres_params(target)
    secrets = [params[k] for k in POSTGRES_SECRETS if params.get(k)]
    if "://" in target:
        for public, raw in _uri_maskings(target):
            if _only_secrets_differ(params, public):
                return Shown(public, _ordered(secrets + raw))
    masked = {k: HIDDEN if k in POSTGRES_SECRETS else v for k, v in params.items()}
    return Shown(make_conninfo("", **masked), _ordered(secrets))


def _only_secrets_differ(params: dict[str, str], public: str) -> bool:
    """Whether libpq reads ``public`` as ``params`` with every secret (an
    empty password too) replaced by HIDDEN, and nothing else changed."""
    try:
        again = postgres_params(public)
    except UnreadableTarget:
        return False
    kept = {k: v for k, v in params.items() if k not in POSTGRES_SECRETS}
    return (
        {k: v for k, v in again.items() if k not in POSTGRES_SECRETS} == kept
        and all(again.get(k) == HIDDEN for k in POSTGRES_SECRETS if k in params)
        and all(again[k] == HIDDEN for k in POSTGRES_SECRETS if k in again)
    )


def _uri_maskings(uri: str) -> list[tuple[str, list[str]]]:
    """Candidate public forms of a libpq URI, each with the raw text it
    replaced: the user info ends at one of the ``@`` (libpq's reading
    decides which; :func:`_only_secrets_differ` checks each), and the query
    parameters named ``password`` or ``sslpassword`` are replaced."""
    scheme, sep, rest = uri.partition("://")
    ends = [i for i, ch in enumerate(rest) if ch == "@"]
    candidates: list[tuple[str, list[str]]] = []
    for end in [*ends, None]:
        userinfo, after = ("", rest) if end is None else (rest[:end], rest[end + 1 :])
        raw: list[str] = []
        user, colon, password = userinfo.partition(":")
        if colon:
            userinfo = f"{user}:{HIDDEN}"
            raw.append(password)
        before_query, q, query = after.partition("?")
        query, in_query = _mask_query(query, lambda name: unquote(name) in POSTGRES_SECRETS)
        raw += in_query
        at = "" if end is None else "@"
        candidates.append((scheme + sep + userinfo + at + before_query + q + query, raw))
    return candidates


# -- other URIs: RFC 3986's reading -------------------------------------------


def _secret_name(name: str) -> bool:
    name = unquote(name).lower()
    return any(word in name for word in SECRET_NAMES)


def _url(target: str) -> Shown:
    """Masked wide: the user info ends at the last ``@`` before the path
    (so a ``?`` or ``#`` in a password is masked with it, as libpq would
    read it), a superset of what RFC 3986 reads as the password, which is a
    secret too (a client that reads it so may quote it in a message)."""
    scheme, sep, rest = target.partition("://")
    if not sep:  # a path: nothing in it is a secret
        return Shown(target, ())
    found: list[str] = []
    authority, slash, path = rest.partition("/")
    userinfo, at, hostport = authority.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        if colon:  # an empty password too: whether there is one is not shown either
            # and its part before a ? or #, where RFC 3986 ends the authority
            found += [password, password.split("?")[0].split("#")[0]]
            userinfo = f"{user}:{HIDDEN}"
        rfc_password = urlsplit(target).password
        if rfc_password:
            found.append(rfc_password)
    after = hostport + slash + path
    before_query, q, query = after.partition("?")
    query, in_query = _mask_query(query, _secret_name)
    found += in_query
    public = scheme + sep + userinfo + at + before_query + q + query
    return Shown(public, _ordered(found))
