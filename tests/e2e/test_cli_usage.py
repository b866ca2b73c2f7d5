"""Bad usage the `keybus` command says in one line with exit 2, before any connection.

Goal: what a new user mistypes (a missing choice, a broker address that does not
parse, a certificate name no certificate can hold, a filter) gets one line naming
the option and exit 2 (usage), as the README's exit statuses promise; a failure to
write is one line in words, exit 1. None of these needs a broker.
Method: run `python -m keybus ...` as a subprocess, as test_cli.py does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from keybus.cli.main import main
from sdk import security
from tests.e2e.test_cli import keybus, one_line
from tests.support.broker_process import free_port


def test_a_missing_choice_is_one_line() -> None:
    """click lists a Choice's values one per line; the CLI's errors are one line."""
    line = one_line(keybus(None, "acl", "grant", "bob", "orders", "--broker",
                           f"127.0.0.1:{free_port()}"), 2)
    assert "Missing argument '{produce|consume|admin}...'. Choose from: produce, consume, " \
           "admin (see keybus acl grant --help)" in line, line


BAD_ADDRESSES = [
    # (args, text in the line)
    (("topics", "list", "--broker", "127.0.0.1:99999"),
     "Invalid value for '--broker': broker address '127.0.0.1:99999' has port '99999'; the "
     "port is an integer in 1..65535 (see keybus topics list --help)"),
    (("--broker", "127.0.0.1:99999", "topics", "list"),
     "Invalid value for '--broker': broker address '127.0.0.1:99999' has port '99999'"),
    (("read", "t", "--broker", "127.0.0.1:6650,"),
     "Invalid value for '--broker': broker address '' is empty"),
    (("produce", "t", "--key", "1", "--value", "x", "--broker", ""),
     "Invalid value for '--broker': broker address '' is empty; use HOST:PORT"),
]


@pytest.mark.parametrize(("args", "text"), BAD_ADDRESSES, ids=[" ".join(a[:2]) for a, _ in
                                                               BAD_ADDRESSES])
def test_a_broker_address_that_does_not_parse_is_usage(args: tuple[str, ...], text: str) -> None:
    assert text in one_line(keybus(None, *args), 2)


@pytest.mark.parametrize("args", [("topics", "list"), ("subscriptions", "list", "t"),
                                  ("acl", "list"), ("bootstrap", "t", "--no-follow"),
                                  ("bootstrap", "t", "--partition", "0", "--no-follow"),
                                  ("databus", "tail", "t")], ids=lambda a: " ".join(a))
def test_several_brokers_for_a_command_that_talks_to_one_is_usage(args: tuple[str, ...]) -> None:
    # produce, read, consume and the topic commands follow a topic's leader; these do not.
    brokers = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    assert "lists several brokers; this call talks to one" in \
        one_line(keybus(None, *args, "--broker", brokers), 2)


# The refusal comes before any connection. Every test names 127.0.0.1 only, so the
# check is told 127.0.0.1 is not a loopback address (sdk.security.is_loopback), in
# process, and each command is given a closed port there.
@pytest.mark.parametrize("args", [
    ("topics", "list", "--broker", "127.0.0.1:1", "--token", "t0k"),
    ("produce", "t", "--key", "1", "--value", "x", "--broker", "127.0.0.1:1", "--token", "t0k"),
    ("read", "t", "--broker", "127.0.0.1:1,127.0.0.1:2", "--token", "t0k"),
], ids=["topics list", "produce", "read several brokers"])
def test_a_token_for_a_plain_text_remote_address_is_usage(
        args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A value the command cannot use, said before any connection: exit 2, not 1."""
    monkeypatch.setattr(security, "is_loopback", lambda host: False)
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    line = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(line.splitlines()) == 1, line
    assert "refusing to send a token in plain text to 127.0.0.1: give a CA file (TLS), or " \
           "connect to a loopback address" in line, line


def test_a_bad_keybus_broker_variable_says_where_it_came_from(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYBUS_BROKER", "127.0.0.1:0")
    line = one_line(keybus(None, "topics", "list"), 2)
    assert "has port '0'; the port is an integer in 1..65535 (from KEYBUS_BROKER)" in line, line


@pytest.mark.parametrize(("args", "text"), [
    (("--client", ""), "Invalid value for '--client': '' is empty"),
    (("--client", "a/b"), "Invalid value for '--client': 'a/b' holds '/'"),
    (("--client", "x" * 65), "has 65 characters; a certificate's common name has at most 64"),
    (("--server-name", ""), "Invalid value for '--server-name': '' is empty"),
])
def test_certs_refuses_a_name_no_certificate_holds_before_writing(
        tmp_path: Path, args: tuple[str, ...], text: str) -> None:
    """Before: cryptography's "Attribute's length must be >= 1 and <= 64" (exit 1,
    naming no option) or "[Errno 2] ...client-a/b.pem", after the CA was written."""
    directory = tmp_path / "certs"
    assert text in one_line(keybus(None, "certs", "--dir", str(directory), *args), 2)
    assert not directory.exists()


def test_certs_into_a_directory_it_cannot_make_says_so_in_words(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    line = one_line(keybus(None, "certs", "--dir", str(blocker / "certs")), 1)
    assert line.startswith(f"keybus: error: cannot write certificates to {blocker / 'certs'}: "
                           "Not a directory"), line


def test_filters_explain_names_its_argument() -> None:
    line = one_line(keybus(None, "filters", "explain", "bogus"), 2)
    assert line.startswith("keybus: error: Invalid value for 'EXPRESSION': filter 'bogus':"), line


@pytest.mark.parametrize(("args", "text"), [
    (("topics", "create", "or/ders"), "Invalid value for 'NAME': 'or/ders' is not a name"),
    (("produce", "a b", "--key", "1", "--value", "x"), "Invalid value for 'TOPIC': 'a b'"),
    (("consume", "orders", "-s", "s:1"), "Invalid value for '--subscription' / '-s': 's:1'"),
    (("subscriptions", "seek", "orders", "", "--to", "0"), "Invalid value for 'SUBSCRIPTION': ''"),
    (("read", "ordérs"), "Invalid value for 'TOPIC': 'ordérs' is not a name: allowed one or "
                         "more characters from [A-Za-z0-9._-]"),
])
def test_a_name_the_broker_would_refuse_is_usage(args: tuple[str, ...], text: str) -> None:
    """Before: the broker's INVALID_ARGUMENT, exit 1 (and a connection first)."""
    assert text in one_line(keybus(None, *args, "--broker", f"127.0.0.1:{free_port()}"), 2)


@pytest.mark.parametrize(("args", "text"), [
    (("acl", "grant", "bob", "or/ders", "produce"),
     "Invalid value for 'TOPIC': topic pattern 'or/ders' is invalid; allowed: a topic name, a "
     "prefix ending in * (e.g. orders.*), or * for every topic"),
    (("acl", "revoke", "bob", "a*b", "consume"), "Invalid value for 'TOPIC': topic pattern 'a*b'"),
    (("acl", "grant", "", "orders", "produce"),
     "Invalid value for 'PRINCIPAL': principal is empty or over 1024 characters"),
    (("acl", "list", "--topic", "orders.*"),
     "Invalid value for '--topic': 'orders.*' is not a name: allowed one or more characters"),
    (("bootstrap", "or/ders"), "Invalid value for 'TOPIC': 'or/ders' is not a name"),
    (("processors", "ownership", "orders", "g 1"), "Invalid value for 'GROUP': 'g 1' is not a name"),
    (("processors", "checkpoints", "", "g"), "Invalid value for 'TOPIC': '' is not a name"),
    (("processors", "checkpoints", "orders", "g", "--namespace", "a\tb"),
     "Invalid value for '--namespace': 'a\\tb' is not a namespace: allowed 0..255 bytes of "
     "printable UTF-8 text"),
    (("databus", "tail", "ordérs"), "Invalid value for 'TOPIC': 'ordérs' is not a name"),
], ids=["acl grant topic", "acl revoke topic", "acl grant principal", "acl list --topic",
        "bootstrap", "processors group", "processors topic", "processors namespace", "databus"])
def test_names_of_acl_bootstrap_processors_and_databus_are_usage(args: tuple[str, ...],
                                                                  text: str) -> None:
    """Before: a connection first, then the broker's INVALID_ARGUMENT (or here, with no
    broker, `cannot reach broker`), exit 1."""
    assert text in one_line(keybus(None, *args, "--broker", f"127.0.0.1:{free_port()}"), 2)


def test_acl_list_filters_may_be_left_empty() -> None:
    """'' is the filters' default (every principal, every topic): not bad usage."""
    line = one_line(keybus(None, "acl", "list", "--principal", "", "--topic", "", "--broker",
                           f"127.0.0.1:{free_port()}"), 1)
    assert "cannot reach broker" in line, line


def test_an_scn_past_the_signed_64_bit_range_is_usage() -> None:
    """--scn took 1..2**64-1, but a supplied SCN is at most 2**63-1 (docs/architecture.md,
    "SCNs"): 2**63 passed the option, the command connected, then the SDK refused it (exit 1)."""
    line = one_line(keybus(None, "produce", "t", "--window", "--scn", str(2**63), "--broker",
                           f"127.0.0.1:{free_port()}", stdin='{"key": 1, "value": "a"}\n'), 2)
    assert "Invalid value for '--scn': 9223372036854775808 is not in the range " \
           "1<=x<=9223372036854775807" in line, line
