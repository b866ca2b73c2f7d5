"""Partition ownership in Redis (redis-py against a real redis-server).

Layout, per consumer group (the braces are a Redis Cluster hash tag, so one
group's keys share a slot and a script may touch them all):

    {prefix}:{<namespace>/<topic>/<group>}:ownership:<partition>
        hash: owner, etag, modified_ms, epoch, version
    {prefix}:{<namespace>/<topic>/<group>}:ownership
        set: the partitions that have a record

Names are percent-encoded, so any string is safe. Every record expires
`ttl_ms` after its last claim (set it to the processors'
ownership_expiration; EventProcessor refuses a shorter one: a holder
stops only once its claim is that old, so a record gone sooner would let a
second processor take the partition meanwhile): a dead processor's records
vanish with its ownership, and a flushed or restarted Redis only makes
processors balance again from scratch; checkpoints live elsewhere and are
untouched.

A claim is one Lua script (atomic in Redis) for all claims of a group: each
compares its etag (empty: the record must not exist), then writes the new
owner, a new etag, Redis's own time and the epoch, and sets the expiry. The
epoch rule: a change of owner takes max(previous epoch + 1, Redis time in ms);
so epochs keep rising after a record expired or Redis lost its data, as
long as Redis's clock does not go back, and a fencing checkpoint store
never sees an epoch reused.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from sdk import errors
from sdk.stores.records import PartitionOwnership
from sdk.stores.redis_url import check_redis_url, redact

CLAIM_SCRIPT = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl_ms = tonumber(ARGV[1])
local out = {}
for i = 2, #KEYS do
  local at = (i - 2) * 3 + 2
  local partition, owner, expected = ARGV[at], ARGV[at + 1], ARGV[at + 2]
  local current = redis.call('HMGET', KEYS[i], 'etag', 'owner', 'epoch', 'version')
  local matches
  if expected == '' then matches = (current[1] == false) else matches = (current[1] == expected) end
  if matches then
    local epoch = tonumber(current[3] or '0')
    if owner ~= '' and owner ~= (current[2] or '') then epoch = math.max(epoch + 1, now_ms) end
    local version = tonumber(current[4] or '0') + 1
    local etag = t[1] .. '.' .. t[2] .. '.' .. string.format('%.0f', version)
    redis.call('HSET', KEYS[i], 'owner', owner, 'etag', etag,
               'modified_ms', string.format('%.0f', now_ms),
               'epoch', string.format('%.0f', epoch), 'version', string.format('%.0f', version))
    redis.call('PEXPIRE', KEYS[i], ttl_ms)
    redis.call('SADD', KEYS[1], partition)
    redis.call('PEXPIRE', KEYS[1], ttl_ms)
    out[#out + 1] = {partition, etag, string.format('%.0f', now_ms), string.format('%.0f', epoch)}
  end
end
return out
"""

LIST_SCRIPT = """
local out = {}
for _, partition in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local record = redis.call('HMGET', ARGV[1] .. partition, 'owner', 'etag', 'modified_ms', 'epoch')
  if record[2] == false then
    redis.call('SREM', KEYS[1], partition)
  else
    out[#out + 1] = {partition, record[1], record[2], record[3], record[4]}
  end
end
return out
"""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisOwnershipStore:
    """`OwnershipStore` in Redis.

    Args:
        url: a redis URL, e.g. "redis://127.0.0.1:6379/0" (ignored when
            `client` is given).
        ttl_ms: how long a record lives after its last claim (default 60000,
            the processors' default ownership expiration; keep them equal:
            EventProcessor refuses a ttl_ms below its ownership_expiration_ms).
        key_prefix: first part of every key (default "keybus").
        client: a `redis.asyncio.Redis` to use (not closed by close()).
        socket_timeout_s: per command (default 5).
    Attributes:
        url: the URL with its password as *** (what every message shows).
    Raises:
        ImportError: redis-py is not installed (pip install 'keybus[redis]').
        ValueError: a bad ttl_ms, or a URL redis-py would misread (a database
            path that is not a number silently meant database 0).
    Its methods raise sdk.errors: Unauthenticated (Redis refused the
    password: a configuration error), PermissionDenied (an ACL refused a
    command), Unavailable (unreachable or timed out), KeybusError.
    """

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", *, ttl_ms: int = 60_000,
                 key_prefix: str = "keybus", client: Any = None,
                 socket_timeout_s: float = 5.0) -> None:
        try:
            import redis.asyncio as redis_asyncio
        except ImportError as e:  # pragma: no cover - the extra is installed in tests
            raise ImportError("RedisOwnershipStore needs redis-py: pip install 'keybus[redis]'") \
                from e
        if type(ttl_ms) is not int or ttl_ms <= 0:
            raise ValueError(f"ttl_ms={ttl_ms!r} is invalid: a positive number of milliseconds")
        if client is None:
            check_redis_url(url)
        self.url = redact(url)  # what messages show: never the password
        self.ttl_ms = ttl_ms
        self.key_prefix = key_prefix
        self._owns_client = client is None
        self._client = client if client is not None else redis_asyncio.Redis.from_url(
            url, socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s)
        self._claim = self._client.register_script(CLAIM_SCRIPT)
        self._list = self._client.register_script(LIST_SCRIPT)

    def _group_key(self, namespace: str, topic: str, consumer_group: str) -> str:
        tag = "/".join(quote(name, safe="") for name in (namespace, topic, consumer_group))
        return f"{self.key_prefix}:{{{tag}}}:ownership"

    async def list_ownership(self, namespace: str, topic: str,
                             consumer_group: str) -> list[PartitionOwnership]:
        """Every live record of the group (expired ones are gone), by partition.

        Raises:
            Unavailable: Redis cannot be reached; KeybusError: another Redis error.
        """
        index = self._group_key(namespace, topic, consumer_group)
        rows = await self._run(self._list, [index], [index + ":"])
        found = [PartitionOwnership(namespace, topic, consumer_group, int(_text(p)), _text(owner),
                                    _text(etag), int(_text(modified)), int(_text(epoch)))
                 for p, owner, etag, modified, epoch in rows]
        return sorted(found, key=lambda o: o.partition)

    async def claim_ownership(self, claims: Sequence[PartitionOwnership]
                              ) -> list[PartitionOwnership]:
        """Compare-and-set each claim on its etag in one script per group.

        Returns:
            The claims that won, with Redis's etag, time and epoch.
        Raises:
            ValueError: two claims for one partition of a group.
            Unavailable, KeybusError: as list_ownership.
        """
        by_group: dict[tuple[str, str, str], list[PartitionOwnership]] = defaultdict(list)
        for claim in claims:
            by_group[(claim.namespace, claim.topic, claim.consumer_group)].append(claim)
        won: list[PartitionOwnership] = []
        for (namespace, topic, consumer_group), group_claims in by_group.items():
            partitions = [c.partition for c in group_claims]
            if len(set(partitions)) != len(partitions):
                raise ValueError(f"claims name a partition twice: {sorted(partitions)}; "
                                 "send one claim per partition")
            index = self._group_key(namespace, topic, consumer_group)
            keys = [index] + [f"{index}:{c.partition}" for c in group_claims]
            arguments: list[Any] = [self.ttl_ms]
            for c in group_claims:
                arguments += [c.partition, c.owner_id, c.etag or ""]
            rows = await self._run(self._claim, keys, arguments)
            by_partition = {c.partition: c for c in group_claims}
            for partition, etag, modified, epoch in rows:
                claim = by_partition[int(_text(partition))]
                won.append(PartitionOwnership(namespace, topic, consumer_group, claim.partition,
                                              claim.owner_id, _text(etag), int(_text(modified)),
                                              int(_text(epoch))))
        return won

    async def _run(self, script: Any, keys: list[str], arguments: list[Any]) -> list[Any]:
        from redis import exceptions

        try:
            rows: list[Any] = await script(keys=keys, args=arguments)
        except exceptions.AuthenticationError as e:  # a ConnectionError subclass: first
            raise errors.Unauthenticated(
                f"redis ownership store {self.url} refused the credentials ({e}): a "
                "configuration error, not an outage; fix the user or password in the URL") \
                from None
        except exceptions.NoPermissionError as e:
            raise errors.PermissionDenied(
                f"redis ownership store {self.url} refused a command ({e}): the Redis user "
                "needs EVALSHA, EVAL, HSET, HMGET, SADD, SREM, SMEMBERS and PEXPIRE on the "
                "keybus keys") from None
        except (exceptions.ConnectionError, exceptions.TimeoutError) as e:
            raise errors.Unavailable(f"redis ownership store {self.url} is unreachable: {e}") \
                from None
        except exceptions.RedisError as e:
            raise errors.KeybusError(f"redis ownership store {self.url} failed: {e}") from None
        return rows

    async def close(self) -> None:
        """Close the client this store opened. Idempotent."""
        if self._owns_client:
            await self._client.aclose()
