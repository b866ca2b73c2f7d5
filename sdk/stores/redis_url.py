"""Redis URLs as RedisOwnershipStore and `keybus processors --redis` take them.

Two jobs, pure (no I/O, no redis-py):
- `redact`: the URL with its password as `***`, for every message, title
  and log line (the password is in the userinfo, `redis://:PASS@host/0`, or
  in the query, `?password=PASS`);
- `check_redis_url`: refuse what redis-py would take silently or wrongly:
  a database path that is not a number (`/abc` silently meant database 0),
  an unknown scheme, a bad port.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

SCHEMES = ("redis", "rediss", "unix")
HIDDEN = "***"
_NUMBER = re.compile(r"[0-9]+")


def redact(url: str) -> str:
    """The URL with any password replaced by *** (the rest as given)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(an unparsable URL)"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        # A lone user part is hidden too: it may be a password written without its colon.
        netloc = f"{user}:{HIDDEN}@{hostport}" if colon else f"{HIDDEN}@{hostport}"
    query = parts.query
    if "password" in query.lower():
        query = urlencode([(k, HIDDEN if k.lower() == "password" else v)
                           for k, v in parse_qsl(query, keep_blank_values=True)], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def check_redis_url(url: object) -> None:
    """Refuse a URL redis-py would misread.

    Raises:
        ValueError: naming the URL (password hidden), what is wrong and what is allowed.
    """
    if not isinstance(url, str) or not url:
        raise ValueError(f"redis URL {url!r} is invalid: give redis://[:PASSWORD@]HOST:PORT/DB")
    shown = redact(url)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not 0..65535
    except ValueError as e:
        raise ValueError(f"redis URL {shown!r} is invalid: {e}; give "
                         "redis://[:PASSWORD@]HOST:PORT/DB") from None
    if parts.scheme not in SCHEMES:
        raise ValueError(f"redis URL {shown!r} is invalid: the scheme must be one of "
                         f"{', '.join(s + '://' for s in SCHEMES)}, e.g. redis://127.0.0.1:6379/0")
    db_path = parts.path.strip("/") if parts.scheme != "unix" else ""
    if db_path and not _NUMBER.fullmatch(db_path):
        raise ValueError(f"redis URL {shown!r} is invalid: the path /{db_path} is not a "
                         "database number; use e.g. redis://127.0.0.1:6379/0 (or no path: "
                         "database 0)")
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "db" and not _NUMBER.fullmatch(value):
            raise ValueError(f"redis URL {shown!r} is invalid: db={value!r} is not a database "
                             "number; use e.g. ?db=0")
