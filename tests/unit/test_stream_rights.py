"""Open streams end when their token expires or their right is revoked (pure parts).

Goal: a JWT's identity carries its expiry (exp plus the leeway, the instant the
broker refuses it at open); a stream's re-check says UNAUTHENTICATED at that
instant and PERMISSION_DENIED, naming principal, topic and permission, once
the right of its opening request is revoked; superusers and per-request
checked streams (Produce) re-decide nothing; `StreamRights` ends a
registered task by its timer and by a sweep, and stops sweeping when no
stream is open. The SDK reads a token file at every call and reopens only
on UNAUTHENTICATED (rule 6).
Method: providers and checks in-process with pyjwt-made tokens; real asyncio
tasks with a fake wall clock; the SDK's metadata plugin called directly.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import grpc
import jwt
import pytest

from broker.log.rocks_store import RocksStore
from broker.rpc.acl_servicer import AclServicer
from broker.rpc.auth import CallCheck
from broker.rpc.stream_rights import StreamRights
from broker.security.acl_store import AclStore
from broker.security.permissions import AccessTable, Grant, Permission, rule_for
from broker.security.providers import Authenticator, Credentials, JwtTokens, StaticTokens
from sdk.core.pb import keybus_pb2 as pb
from sdk.reconnect import reauthenticates
from sdk.security import ClientSecurity, TokenFileReader

SECRET = b"a-secret-of-more-than-32-bytes-0123456789"
GRANT = Grant("alice", "orders", Permission.CONSUME)


def read_check(table: AccessTable, principal: str = "alice",
               expires_s: float | None = None) -> CallCheck:
    check = CallCheck("Read", rule_for("Read"), table, principal, expires_s)
    check.opening = pb.ReadRequest(topic="orders", follow=True)
    return check


def test_a_jwt_identity_expires_at_exp_plus_the_leeway() -> None:
    now = time.time()
    token = jwt.encode({"sub": "alice", "exp": int(now + 60)}, SECRET, algorithm="HS256")
    identity = Authenticator((JwtTokens({"HS256": SECRET}, leeway_s=2.0),)).identify(
        Credentials(token), now)
    assert (identity.principal, identity.expires_s) == ("alice", int(now + 60) + 2.0)
    static = StaticTokens({})
    assert static.identify("x" * 16, now) is None
    assert Authenticator(certificate_principal=True).identify(
        Credentials(certificate_name="bob"), now).expires_s is None


def test_recheck_ends_at_the_expiry_and_on_a_revoke() -> None:
    table = AccessTable(frozenset({"root"}))
    table.add(GRANT)
    check = read_check(table, expires_s=100.0)
    assert check.recheck(99.9) is None
    expired = check.recheck(100.0)
    assert expired is not None and expired.code == grpc.StatusCode.UNAUTHENTICATED
    assert "Read: token expired; get a new one" in expired.message
    no_expiry = read_check(table)
    assert no_expiry.recheck(1e12) is None
    table.remove(GRANT)
    denied = no_expiry.recheck(0)
    assert denied is not None and denied.code == grpc.StatusCode.PERMISSION_DENIED
    assert ("principal 'alice' lacks the consume permission on topic 'orders' needed for Read"
            in denied.message)
    assert read_check(table, "root").recheck(0) is None  # a superuser keeps every right
    produce = CallCheck("Produce", rule_for("Produce"), table, "alice")  # checked per request
    assert produce.recheck(0) is None


def test_stream_rights_end_streams_by_timer_and_by_sweep() -> None:
    async def go() -> None:
        table = AccessTable()
        table.add(GRANT)
        rights = StreamRights(interval_ms=60_000)
        registered = asyncio.Event()

        async def serve(check: CallCheck) -> None:
            rights.opened(check)
            registered.set()
            await asyncio.Event().wait()  # a stream waiting for events

        expiring = asyncio.create_task(serve(read_check(table, expires_s=time.time() + 0.05)))
        await registered.wait()
        registered.clear()
        revoked = asyncio.create_task(serve(read_check(table)))
        await registered.wait()
        assert len(rights.streams) == 2
        done, _ = await asyncio.wait({expiring}, timeout=10)  # its timer ends it
        assert expiring in done and expiring.cancelled()
        assert rights.sweep() == 0  # the other still holds its right
        table.remove(GRANT)
        assert rights.sweep() == 1
        with pytest.raises(asyncio.CancelledError):
            await revoked
        assert not rights.streams
        sweeper: Any = rights._sweeper
        sweeper.cancel()
    asyncio.run(go())


def test_the_sdk_reads_a_token_file_at_every_call(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first-token-0123456789\n")
    reader = TokenFileReader(ClientSecurity(token_file=str(path)))
    sent: list[tuple[Any, Any]] = []
    reader(None, lambda metadata, error: sent.append((metadata, error)))
    path.write_text("second-token-0123456789\n")
    reader(None, lambda metadata, error: sent.append((metadata, error)))
    assert [m for m, _ in sent] == [(("authorization", "Bearer first-token-0123456789"),),
                                    (("authorization", "Bearer second-token-0123456789"),)]
    path.unlink()
    reader(None, lambda metadata, error: sent.append((metadata, error)))
    assert isinstance(sent[-1][1], ValueError) and "token file" in str(sent[-1][1])


class _Ended(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


def test_only_an_unauthenticated_end_reopens() -> None:
    assert reauthenticates(_Ended(grpc.StatusCode.UNAUTHENTICATED))
    assert not reauthenticates(_Ended(grpc.StatusCode.PERMISSION_DENIED))
    assert not reauthenticates(_Ended(grpc.StatusCode.UNAVAILABLE))


def test_a_revoke_ends_the_streams_it_concerns_at_once() -> None:
    async def go() -> None:
        table = AccessTable()
        table.add(GRANT)
        rights = StreamRights(interval_ms=3_600_000)  # the periodic sweep never comes
        table.revoke_listeners.append(rights.sweep)  # as AuthInterceptor does
        registered = asyncio.Event()

        async def serve(check: CallCheck) -> None:
            rights.opened(check)
            registered.set()
            await asyncio.Event().wait()

        stream = asyncio.create_task(serve(read_check(table)))
        await registered.wait()
        table.remove(GRANT)
        table.revoked()  # what the ACL servicer calls once the revoke is stored
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(stream, 5)
        assert not rights.streams
        sweeper: Any = rights._sweeper
        sweeper.cancel()
    asyncio.run(go())


def test_the_acl_servicer_runs_the_revoke_listeners_once_a_revoke_is_stored(
        tmp_path: Path) -> None:
    async def go() -> None:
        store = RocksStore(str(tmp_path / "db"), fsync=False)
        table = AccessTable()
        acls = AclStore(store, table)
        acls.open([GRANT])
        heard: list[int] = []
        table.revoke_listeners.append(lambda: heard.append(len(table.grants())))
        servicer = AclServicer(acls, enforced=True)
        entry = pb.AclEntry(principal=GRANT.principal, topic=GRANT.topic,
                            permission=int(GRANT.permission))  # type: ignore[arg-type]
        nothing = pb.AclEntry(principal="nobody", topic="t", permission=pb.PERMISSION_CONSUME)
        await servicer.RevokePermissions(pb.RevokePermissionsRequest(entries=[nothing]), None)
        assert heard == [], "nothing was revoked: nothing to re-check"
        await servicer.RevokePermissions(pb.RevokePermissionsRequest(entries=[entry]), None)
        assert heard == [0], "the listeners run after the grant is gone"
        store.close()
    asyncio.run(go())
