"""Derived fields checked by the broker, the request guard's decoder, and the
client security settings.

Goal: settle_slots accepts exactly the slots of the shared rule (full or
broadcast column) and fills in an absent column; SlotCache gives the same
slots as slots_of across batches and when it starts over; the guard's
decoder turns bad bytes and oversize requests into refusals, never an
exception; ClientSecurity refuses a token in plain text to a non-loopback
host and a CA file that holds no PEM certificate. Method: pure functions with hypothesis over keys.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.derived import settle_slots
from broker.errors import BrokerError
from broker.rpc.guard import Refused, safe_decoder
from broker.security import certs
from sdk.core.hashing import SlotCache, slots_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.security import ClientSecurity, read_ca_file

KEYS = st.lists(st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(min_size=1, max_size=8)),
                min_size=1, max_size=30)


@given(st.lists(KEYS, min_size=1, max_size=4), st.integers(1, 40))
def test_slot_cache_equals_slots_of(batches: list[list[int | str]], entries_max: int) -> None:
    cache = SlotCache(entries_max)
    for keys in batches:
        assert cache.slots(keys) == slots_of(keys)


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=2, max_size=20), st.data())
def test_settle_slots_refuses_any_wrong_slot(keys: list[int], data: st.DataObject) -> None:
    slots = slots_of(keys)
    batch = pb.EventBatch(count=len(keys), key_ints=keys, values=[b""] * len(keys))
    settle_slots(batch, SlotCache())
    assert list(batch.slots) == slots  # filled in
    wrong_at = data.draw(st.integers(0, len(keys) - 1))
    wrong = list(slots)
    wrong[wrong_at] = (wrong[wrong_at] + data.draw(st.integers(1, 65535))) % 65536
    bad = pb.EventBatch(count=len(keys), key_ints=keys, slots=wrong, values=[b""] * len(keys))
    with pytest.raises(BrokerError, match=f"event {wrong_at} has slot") as refused:
        settle_slots(bad, SlotCache())
    assert refused.value.code.name == "INVALID_ARGUMENT"


def test_settle_slots_broadcast_slot_must_fit_every_key() -> None:
    same = pb.EventBatch(count=2, key_ints=[1, 2], ordering_keys=["k"], slots=slots_of(["k"]),
                         values=[b"", b""])
    settle_slots(same, SlotCache())
    differ = pb.EventBatch(count=2, key_ints=[1, 2], slots=slots_of([1]), values=[b"", b""])
    with pytest.raises(BrokerError, match="event 1 has slot"):
        settle_slots(differ, SlotCache())


def test_safe_decoder_refuses_instead_of_raising() -> None:
    decode = safe_decoder(pb.ReadRequest.FromString, "ReadRequest", 64)
    assert isinstance(decode(pb.ReadRequest(topic="t").SerializeToString()), pb.ReadRequest)
    bad = decode(b"\x0a\xff\xff\xff\x0f")
    assert isinstance(bad, Refused) and bad.error.code.name == "INVALID_ARGUMENT"
    big = decode(pb.ReadRequest(topic="t" * 100).SerializeToString())
    assert isinstance(big, Refused) and big.error.code.name == "RESOURCE_EXHAUSTED"
    assert "limit of 64 bytes" in big.error.message and isinstance(big.message, pb.ReadRequest)


def test_client_security_rules(tmp_path: pytest.TempPathFactory) -> None:
    with pytest.raises(ValueError, match="together"):
        ClientSecurity(cert_file="c.pem")
    token = ClientSecurity(token="t")
    with pytest.raises(ValueError, match=r"plain text to broker\.invalid"):
        token.channel_credentials("broker.invalid")
    assert token.channel_credentials("127.0.0.1") is not None  # local credentials
    assert ClientSecurity().channel_credentials("broker.invalid") is None
    assert ClientSecurity.from_env({}) is None
    assert ClientSecurity.from_env({"KEYBUS_TOKEN": "x"}) == ClientSecurity(token="x")


def test_a_ca_file_must_hold_pem_certificates(tmp_path: Path) -> None:
    """Checked when read, before gRPC sees it (gRPC takes any bytes and the connection
    then fails as if the broker had closed it)."""
    ca = certs.make_ca()
    certs.write_pair(tmp_path, "ca", ca)
    good = str(tmp_path / "ca.pem")
    assert read_ca_file(good).startswith(b"-----BEGIN CERTIFICATE-----")
    assert ClientSecurity(ca_file=good).channel_credentials("localhost") is not None
    (tmp_path / "plain.txt").write_text("hello\n")
    (tmp_path / "broken.pem").write_text(
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    for name, why in (("plain.txt", "it has no '-----BEGIN CERTIFICATE-----' line"),
                      ("ca.key", "it has no '-----BEGIN CERTIFICATE-----' line"),
                      ("broken.pem", "a certificate block in it does not parse")):
        path = str(tmp_path / name)
        with pytest.raises(ValueError) as raised:
            ClientSecurity(ca_file=path).channel_credentials("localhost")
        assert str(raised.value).startswith(f"ca_file {path} is not a PEM certificate: {why}")
    with pytest.raises(ValueError, match=r"^--tls-ca .*missing\.pem: No such file"):
        read_ca_file(str(tmp_path / "missing.pem"), "--tls-ca")


def test_a_token_that_cannot_travel_in_a_header_is_named(tmp_path: Path) -> None:
    """gRPC refused it with a bare 'Illegal metadata' (and C-core lines on stderr)."""
    assert ClientSecurity(token="abc.DEF-1_2 x").bearer_token() == "abc.DEF-1_2 x"
    with pytest.raises(ValueError, match=r"^token holds 'é' \(at 3\); a bearer token is printable"):
        ClientSecurity(token="tokéen").bearer_token()
    (tmp_path / "token").write_text("abc\x01\n")
    with pytest.raises(ValueError, match=r"token file .*token holds '\\x01' \(at 3\)"):
        ClientSecurity(token_file=str(tmp_path / "token")).bearer_token()
