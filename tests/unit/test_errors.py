"""The error catalogue's messages stay small whatever a client sends.

Goal: a status message travels in a gRPC header, and past 8 KiB gRPC drops
the reply for "Stream removed" (a 10,000-character topic name, echoed twice,
made 20 KiB); so every client string a template quotes is shortened to its
first 64 characters, "…" and its length, and every message is cut at 2 KiB.
Method: fill every catalogue entry's fields with 10,000-character strings
and check the message's size and wording; short names are quoted whole.
"""

from __future__ import annotations

import string

import pytest

from broker.errors import CATALOGUE, MESSAGE_BYTES_MAX, BrokerError, cap_message, quote

LONG = "t" * 10_000


def _fields(template: str, quoted: bool) -> set[str]:
    """The template's fields quoted with `!r` (client strings), or all of them."""
    return {field for _, field, _, conversion in string.Formatter().parse(template)
            if field and (conversion == "r" or not quoted)}


def test_quote_keeps_short_strings_and_shortens_long_ones() -> None:
    assert quote("orders") == "'orders'"
    assert quote("x" * 64) == repr("x" * 64)
    assert quote(LONG) == f"'{'t' * 64}…' (10,000 characters)"
    assert quote(b"k" * 100) == f"b'{'k' * 64}…' (100 bytes)"
    assert quote("it's" * 20).startswith('"it\'s') and quote("it's" * 20).endswith('…" (80 characters)')


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_quoted_client_string_is_shortened(name: str) -> None:
    template = CATALOGUE[name].template
    params = dict.fromkeys(_fields(template, quoted=False), "7")
    params.update(dict.fromkeys(_fields(template, quoted=True), LONG))
    message = BrokerError(name, **params).message
    assert len(message.encode()) <= MESSAGE_BYTES_MAX, (name, len(message))
    assert LONG[:65] not in message
    if "!r}" in template:
        assert "(10,000 characters)" in message, message


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_message_is_cut_whatever_its_fields_hold(name: str) -> None:
    fields = _fields(CATALOGUE[name].template, quoted=False)
    message = BrokerError(name, **dict.fromkeys(fields, LONG)).message
    assert len(message.encode()) <= MESSAGE_BYTES_MAX, (name, len(message))


def test_the_unknown_topic_names_the_long_name_shortened_both_times() -> None:
    message = BrokerError("topic_not_found", topic=LONG).message
    assert message == (f"topic '{'t' * 64}…' (10,000 characters) does not exist; create it first "
                       f"(keybus topics create {'t' * 64}… (10,000 characters))")


def test_a_long_valid_name_is_whole_in_the_command_to_copy() -> None:
    name = "orders-" + "x" * 200  # within the default topic_name_bytes_max (249)
    message = BrokerError("topic_not_found", topic=name).message
    assert message.endswith(f"(keybus topics create {name})"), message
    assert message.startswith(f"topic '{name[:64]}…' (207 characters) does not exist")


def test_short_names_are_quoted_whole() -> None:
    assert BrokerError("topic_not_found", topic="orders").message == \
        "topic 'orders' does not exist; create it first (keybus topics create orders)"
    assert BrokerError("processor_name_invalid", field="owner_id", value="o" * 64,
                       allowed="use 0..256 bytes").message == \
        f"owner_id={'o' * 64!r} is invalid: use 0..256 bytes"


def test_a_long_detail_is_cut_with_a_note_at_a_character_boundary() -> None:
    message = BrokerError("batch_invalid", detail="é" * 5000).message
    assert len(message.encode()) <= MESSAGE_BYTES_MAX
    assert message.endswith("… (message cut from 10,000 bytes)")
    assert cap_message("short") == "short"
