"""Redis URLs (sdk/stores/redis_url.py): the password never shows, and a URL
redis-py would misread is refused.

Goal: every message and title that names a Redis ownership store shows its
URL with the password as ***, wherever the URL carries it (userinfo or
query); a database path that is not a number (redis-py silently used
database 0), an unknown scheme or a bad port is a ValueError naming the URL
(password hidden) and what is allowed.
Method: the pure functions, then RedisOwnershipStore's constructor (it
connects to nothing).
"""

from __future__ import annotations

import pytest

from sdk.stores import RedisOwnershipStore
from sdk.stores.redis_url import check_redis_url, redact

SECRET = "s3cret-Pa55"


@pytest.mark.parametrize(("url", "shown"), [
    (f"redis://:{SECRET}@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
    (f"rediss://app:{SECRET}@cache:6380/2", "rediss://app:***@cache:6380/2"),
    (f"redis://{SECRET}@127.0.0.1/0", "redis://***@127.0.0.1/0"),
    (f"redis://127.0.0.1:6379/0?password={SECRET}&db=1",
     "redis://127.0.0.1:6379/0?password=***&db=1"),
    (f"unix://:{SECRET}@/run/redis.sock?db=0", "unix://:***@/run/redis.sock?db=0"),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
])
def test_the_password_is_hidden(url: str, shown: str) -> None:
    assert redact(url) == shown
    check_redis_url(url)


@pytest.mark.parametrize(("url", "message"), [
    ("redis://127.0.0.1:6379/abc", r"'redis://127.0.0.1:6379/abc' is invalid: the path /abc "
                                   r"is not a database number; use e.g. redis://"),
    (f"redis://:{SECRET}@127.0.0.1:6379/abc", r"'redis://:\*\*\*@127.0.0.1:6379/abc'"),
    ("redis://127.0.0.1:6379/0?db=x", "db='x' is not a database number"),
    ("nonsense", "'nonsense' is invalid: the scheme must be one of redis://, rediss://, "
                 "unix://"),
    (f"redis://:{SECRET}@127.0.0.1:99999/0", r"'redis://:\*\*\*@127.0.0.1:99999/0' is "
                                            r"invalid: Port out of range"),
    ("", "give redis://"),
])
def test_a_url_redis_would_misread_is_refused(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as refused:
        check_redis_url(url)
    assert SECRET not in str(refused.value)
    with pytest.raises(ValueError, match=message):
        RedisOwnershipStore(url)


def test_the_store_shows_its_url_without_the_password() -> None:
    store = RedisOwnershipStore(f"redis://:{SECRET}@127.0.0.1:1/0")
    assert store.url == "redis://:***@127.0.0.1:1/0"
