"""The `keybus` command against a real broker process.

Goal: every command works end to end as a Kafka or Pulsar user expects (reads
cover every partition, --json everywhere), and every failure is one line on
stderr with the documented exit status (1 a failed call, 2 usage), worded
for users, never a traceback, and within seconds when no broker answers.
Method: run `python -m keybus ...` as a subprocess (as a user would), with
KEYBUS_BROKER pointing at a broker on 127.0.0.1; "no broker" is a closed
port on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.broker_process import REPO, BrokerProcess, free_port


def keybus(broker: BrokerProcess | None, *args: str, stdin: str = "",
           timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="80")
    if broker is not None:
        env["KEYBUS_BROKER"] = broker.address
    return subprocess.run([sys.executable, "-m", "keybus", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout_s, env=env, cwd=REPO)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The single stderr line of a failure with exit status `code`."""
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("keybus"), result.stderr
    return lines[0]


def test_read_covers_every_partition_like_the_readme(shared_broker: BrokerProcess) -> None:
    """The README's first example: a key lands on partition 2; `read` finds it."""
    ok(keybus(shared_broker, "topics", "create", "cli-orders", "--partitions", "4"))
    produced = ok(keybus(shared_broker, "produce", "cli-orders", stdin=json.dumps(
        {"key": 42, "value": "hello", "ordering_key": "customer-7"})))
    assert produced == "cli-orders/2 offset 0 scn 1\n"
    assert ok(keybus(shared_broker, "read", "cli-orders")) == \
        "cli-orders/2 offset 0 scn 1 key 42 slot 53910: hello\n"
    assert ok(keybus(shared_broker, "read", "cli-orders", "--partition", "0")) == ""
    consumed = keybus(shared_broker, "consume", "cli-orders", "-s", "all", "--start", "earliest",
                      "--max", "1")
    assert ok(consumed) == "cli-orders/2 offset 0 scn 1 key 42 slot 53910: hello\n"
    assert "1 event(s)" in consumed.stderr


def test_topics_produce_read_round_trip(shared_broker: BrokerProcess) -> None:
    ok(keybus(shared_broker, "topics", "create", "cli-trip", "--partitions", "2"))
    listed = json.loads(ok(keybus(shared_broker, "topics", "list", "--json")))
    assert "cli-trip" in [t["topic"] for t in listed]
    lines = "\n".join(json.dumps({"key": k, "value": f"v{k}", "partition": 1}) for k in range(5))
    produced = [json.loads(line) for line in ok(keybus(shared_broker, "produce", "cli-trip", "--json",
                                                       stdin=lines)).splitlines()]
    assert [p["offset"] for p in produced] == [0, 1, 2, 3, 4]
    ok(keybus(shared_broker, "produce", "cli-trip", "--key", "user-9", "--value", "hello",
              "--partition", "1"))
    read = [json.loads(line) for line in
            ok(keybus(shared_broker, "read", "cli-trip", "--partition", "1", "--json")).splitlines()]
    assert [(e["offset"], e["key"], e["value"]) for e in read] == [
        (0, 0, "v0"), (1, 1, "v1"), (2, 2, "v2"), (3, 3, "v3"), (4, 4, "v4"), (5, "user-9", "hello")]
    tail = ok(keybus(shared_broker, "read", "cli-trip", "--partition", "1", "--start", "4"))
    assert tail.splitlines()[-1] == "cli-trip/1 offset 5 scn 6 key 'user-9' slot 41085: hello"
    old_spelling = ok(keybus(shared_broker, "read", "cli-trip", "--partition", "1", "--from", "4"))
    assert old_spelling == tail
    described = json.loads(ok(keybus(shared_broker, "topics", "describe", "cli-trip", "--json")))
    assert described["partition_info"][1]["end_offset"] == 6
    # which topic of this name it is (new at every create), as the broker says
    assert len(described["incarnation"]) == 16
    text = ok(keybus(shared_broker, "topics", "describe", "cli-trip"))
    assert "cli-trip" in text and f"incarnation {described['incarnation']}" in text


def test_window_and_filters_from_cli(shared_broker: BrokerProcess) -> None:
    ok(keybus(shared_broker, "topics", "create", "cli-window"))
    lines = "\n".join(json.dumps({"key": k, "value": "x"}) for k in range(10))
    produced = [json.loads(x) for x in ok(keybus(shared_broker, "produce", "cli-window", "--window",
                                                 "--scn", "500", "--json", stdin=lines)).splitlines()]
    assert {p["scn"] for p in produced} == {500}
    even = ok(keybus(shared_broker, "read", "cli-window", "--filter", "mod:2:[0]", "--json"))
    assert [json.loads(x)["key"] for x in even.splitlines()] == [0, 2, 4, 6, 8]
    by_scn = ok(keybus(shared_broker, "read", "cli-window", "--start", "scn:500", "--max", "3"))
    assert len(by_scn.splitlines()) == 3


def test_filters_explain_worked_example() -> None:
    out = ok(keybus(None, "filters", "explain", "range:5000000:[1,3-6]"))
    assert "5,000,000..9,999,999" in out and "15,000,000..29,999,999" in out
    assert "even" in ok(keybus(None, "filters", "explain", "mod:2:[0]"))
    explained = json.loads(ok(keybus(None, "filters", "explain", "mod:2:[0]", "--json")))
    assert explained["type"] == "mod" and "even" in explained["explanation"]


def test_seek_past_the_end_is_told_in_the_seek_s_terms(shared_broker: BrokerProcess) -> None:
    """Before: the broker's words for a read's start, "start offset 99 of T/0 is past the
    end: ..." (seek has no start offset)."""
    ok(keybus(shared_broker, "topics", "create", "cli-seek"))
    ok(keybus(shared_broker, "produce", "cli-seek", "--key", "1", "--value", "x"))
    ok(keybus(shared_broker, "consume", "cli-seek", "-s", "s", "--timeout", "0.5"))
    line = one_line(keybus(shared_broker, "subscriptions", "seek", "cli-seek", "s", "--to", "99"),
                    1)
    assert line == ("keybus: error: cannot seek subscription s to offset 99: past the end of "
                    "cli-seek/0; the partition holds offsets 0..0; allowed 0..1 (the end waits "
                    "for the next event), or earliest, latest, scn:N"), line


def test_json_on_every_command(shared_broker: BrokerProcess) -> None:
    ok(keybus(shared_broker, "topics", "create", "cli-json"))
    ok(keybus(shared_broker, "consume", "cli-json", "-s", "gone", "--timeout", "0.5"))
    listed = json.loads(ok(keybus(shared_broker, "subscriptions", "list", "cli-json", "--json")))
    assert [s["subscription"] for s in listed] == ["gone"]
    assert json.loads(ok(keybus(shared_broker, "subscriptions", "delete", "cli-json", "gone",
                                "--json"))) == {"deleted": "gone", "topic": "cli-json"}
    assert json.loads(ok(keybus(shared_broker, "topics", "delete", "cli-json", "--json"))) == \
        {"deleted": "cli-json", "events": 0}


def test_deleting_a_subscription_with_consumers_names_the_force_flag(
        shared_broker: BrokerProcess) -> None:
    ok(keybus(shared_broker, "topics", "create", "cli-busy"))
    env = dict(os.environ, PYTHONPATH=str(REPO), KEYBUS_BROKER=shared_broker.address)
    consumer = subprocess.Popen([sys.executable, "-m", "keybus", "consume", "cli-busy", "-s", "busy",
                                 "--timeout", "30"], env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            listed = json.loads(ok(keybus(shared_broker, "subscriptions", "list", "cli-busy", "--json")))
            if listed and listed[0]["partitions"][0]["consumers"]:
                break
            time.sleep(0.2)
        line = one_line(keybus(shared_broker, "subscriptions", "delete", "cli-busy", "busy"), 1)
        assert "delete it anyway with --force" in line and "with force" not in line.replace(
            "with --force", "")
        ok(keybus(shared_broker, "subscriptions", "delete", "cli-busy", "busy", "--force"))
    finally:
        consumer.kill()
        consumer.wait(10)


BIG_VALUE = json.dumps({"key": 1, "value": "x" * 2_000_000})

BAD_INPUT = [
    # (args, stdin, exit status, text in the line, text that must not be in it)
    (("topics", "describe", "no-such-topic"), "", 1, "'no-such-topic' does not exist", None),
    (("topics", "delete", "no-such-topic"), "", 1,
     "does not exist, so there is nothing to delete", "create it first"),
    (("read", "no-such-topic"), "", 1, "does not exist", None),
    (("read", "cli-bad", "--start", "yesterday"), "", 2, "'yesterday' is not a position", None),
    (("topics", "list", "--token", "tok\u00e9n"), "", 2,
     "token holds '\u00e9' (at 3); a bearer token is printable ASCII", "Illegal metadata"),
    (("read", "cli-bad", "--start", "5"), "", 2, "is an offset, a position in one partition", None),
    (("read", "cli-bad", "--partition", "7"), "", 1, "allowed 0..1", None),
    (("read", "cli-bad", "--partition", "0", "--start", "9"), "", 1,
     "start offset 9 of cli-bad/0 is past the end: the partition is empty and its next event "
     "gets offset 0", "retention"),
    (("read", "cli-bad", "--filter", "mod:0:[0]"), "", 2, "numBuckets", None),
    (("read", "cli-bad", "--ranges", "9-3"), "", 2, "9-3", None),
    (("produce", "cli-bad"), "not json\n", 2, "line 1 is not JSON", None),
    (("produce", "cli-bad"), '{"key": 1, "value": "x", "colour": 2}\n', 2, "unknown field(s) colour",
     None),
    (("produce", "cli-bad", "--key", "k"), "", 2, "--key and --value go together", None),
    (("produce", "cli-bad"), BIG_VALUE, 2,
     "stdin line 1: the value is 2,000,000 bytes, over the broker's limit of 1,048,576 bytes per "
     "event (event_bytes_max); nothing was sent", "batch."),
    (("topics", "create", "bad name"), "", 2,
     "Invalid value for 'NAME': 'bad name' is not a name: allowed one or more characters from "
     "[A-Za-z0-9._-]", None),
    (("topics", "describe", "t" * 10_000), "", 1, "(10,000 characters) does not exist",
     "Stream removed"),
    (("topics", "create", "cli-huge", "--partitions", "5000"), "", 1,
     "partitions=5000 is out of range; allowed 1..1024 (the broker's partitions_max)", "config."),
    (("topics", "create", "cli-huge", "--partitions", "99999999999999999999"), "", 2,
     "'--partitions': 99999999999999999999 is not in the range 1<=x<=4294967295", None),
    (("produce", "cli-bad", "--partition", "99999999999999999999", "--key", "1", "--value", "x"),
     "", 2, "'--partition': 99999999999999999999 is not in the range 0<=x<=4294967295", None),
    (("read", "cli-bad", "--partition", "99999999999999999999"), "", 2,
     "'--partition': 99999999999999999999 is not in the range 0<=x<=4294967295", None),
    (("filters", "explain", "range:abc"), "", 2, "range", None),
    (("consume", "cli-bad", "-s", "x", "--ranges", "0-100"), "", 2,
     "are only for type='key_shared' with mode='sticky'", "sticky_ranges"),
    (("broker", "--port", "70000"), "", 2, "port=70000 is out of range; allowed 0..65535", "/0"),
    (("topics", "list", "--colour"), "", 2, "No such option '--colour'", None),
]


@pytest.fixture(scope="module")
def bad_topic(shared_broker: BrokerProcess) -> BrokerProcess:
    ok(keybus(shared_broker, "topics", "create", "cli-bad", "--partitions", "2"))
    return shared_broker


@pytest.mark.parametrize(("args", "stdin", "code", "text", "absent"), BAD_INPUT)
def test_bad_input_one_line_and_exit_status(bad_topic: BrokerProcess, args: tuple[str, ...],
                                            stdin: str, code: int, text: str,
                                            absent: str | None) -> None:
    shared_broker = bad_topic
    line = one_line(keybus(shared_broker, *args, stdin=stdin), code)
    assert text in line, line
    assert absent is None or absent not in line, line


UNREACHABLE = [
    ("topics", "list"),
    ("produce", "t", "--key", "1", "--value", "x"),
    ("read", "t"),
    ("read", "t", "--follow"),
    ("read", "t", "--start", "latest", "--follow"),
    ("consume", "t", "-s", "s", "--timeout", "2"),
    ("subscriptions", "list", "t"),
    ("bootstrap", "t"),
    ("acl", "list"),
    ("processors", "checkpoints", "t", "g"),
    ("databus", "tail", "t"),
]


@pytest.mark.parametrize("args", UNREACHABLE, ids=[" ".join(a[:2]) for a in UNREACHABLE])
def test_no_broker_is_one_line_within_seconds(args: tuple[str, ...]) -> None:
    port = free_port()  # closed: nothing listens on it
    began = time.monotonic()
    line = one_line(keybus(None, *args, "--broker", f"127.0.0.1:{port}", timeout_s=30), 1)
    assert line == (f"keybus: error: cannot reach broker at 127.0.0.1:{port}: connection refused "
                    "— is it running? (keybus broker)")
    assert time.monotonic() - began < 12


def test_broker_before_the_command_as_pulsar_admin_takes_it(shared_broker: BrokerProcess) -> None:
    """`keybus --broker H:P topics list`: the root's --broker beats KEYBUS_BROKER, and a
    command's own --broker beats the root's."""
    closed = f"127.0.0.1:{free_port()}"
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="80", KEYBUS_BROKER=closed)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "keybus", *args], capture_output=True,
                              text=True, timeout=60, env=env, cwd=REPO)

    ok(run("--broker", shared_broker.address, "topics", "create", "cli-root-broker"))
    listed = json.loads(ok(run("--broker", shared_broker.address, "topics", "list", "--json")))
    assert "cli-root-broker" in [t["topic"] for t in listed]
    line = one_line(run("--broker", shared_broker.address, "topics", "list", "--broker", closed), 1)
    assert line.startswith(f"keybus: error: cannot reach broker at {closed}")


BROKER_COMMANDS = [
    ("topics", "list"), ("topics", "create"), ("topics", "describe"), ("topics", "delete"),
    ("produce",), ("read",), ("consume",), ("subscriptions", "list"),
    ("subscriptions", "describe"), ("subscriptions", "delete"), ("subscriptions", "seek"),
    ("bootstrap",),
    ("acl", "grant"), ("acl", "revoke"), ("acl", "list"), ("acl", "whoami"),
    ("acl", "restrict"), ("acl", "unrestrict"), ("acl", "restrictions"),
    ("processors", "ownership"), ("processors", "checkpoints"), ("databus", "tail"),
    ("cluster", "status"),
]


GROUPS = ("topics", "subscriptions", "filters", "processors", "databus", "acl", "cluster")
JSON_COMMANDS = [("topics", "list"), ("read",), ("consume",), ("produce",), ("demo",),
                 ("subscriptions", "describe"), ("topics", "delete"), ("filters", "explain"),
                 ("certs",), ("cluster", "dev")]


def test_help_is_whole_and_documents_exit_status() -> None:
    asked = list(dict.fromkeys([(), *[(g,) for g in GROUPS], *JSON_COMMANDS, *BROKER_COMMANDS]))
    with ThreadPoolExecutor(4) as pool:  # each is a process: about a second of imports
        helps = dict(zip(asked, pool.map(lambda c: keybus(None, *c, "--help"), asked),
                         strict=True))
        bare = pool.submit(keybus, None, "topics").result()  # a group alone: usage (exit 2)
    root = ok(helps[()])
    assert "Exit status: 0 done; 1 a call failed" in " ".join(root.split())
    commands = root[root.index("Commands:"):root.index("Exit status")]
    assert "..." not in commands and "read " in commands  # no command's summary cut
    for group in GROUPS:
        listing = ok(helps[(group,)])
        assert "..." not in listing[listing.index("Commands:"):], listing
    assert bare.returncode == 2 and "create" in bare.stderr and "Traceback" not in bare.stderr
    assert "Say in words which keys a filter passes." in ok(helps[("filters",)])
    for command in JSON_COMMANDS:
        assert "--json" in ok(helps[command]), command
    for command in BROKER_COMMANDS:  # one set of connection options everywhere
        text = ok(helps[command])
        assert all(option in text for option in ("--json", "--broker", "--timeout", "--tls-ca")), \
            command
    assert "--broker HOST:PORT" in ok(helps[("read",)])


def test_broker_start_failures_are_one_line(tmp_path: object, shared_broker: BrokerProcess) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line(keybus(None, "broker", "--port", str(port), "--data-dir",
                               str(shared_broker.data_dir.parent / "other")), 1)
        assert line == (f"keybus broker: error: cannot listen on 127.0.0.1:{port}: the port is in "
                        "use (another Keybus broker? Pulsar's default port is 6650 too); choose "
                        "another with --port N or KEYBUS_PORT=N")
    line = one_line(keybus(None, "broker", "--port", "0", "--data-dir",
                           str(shared_broker.data_dir)), 1)
    assert f"data directory {shared_broker.data_dir} is in use by another broker" in line


def test_a_data_directory_of_a_newer_keybus_is_refused_in_one_line(tmp_path: Path) -> None:
    code = ("import sys; from broker.log.rocks_store import RocksStore; "
            "s = RocksStore(sys.argv[1], fsync=True); s.write_data_format(99); s.close()")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "log.rocksdb")], check=True,
                   env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO, timeout=60)
    line = one_line(keybus(None, "broker", "--port", "0", "--data-dir", str(tmp_path)), 1)
    assert line == (f"keybus broker: error: data directory {tmp_path} was written by a newer "
                    "Keybus (data format 99); this broker reads data format 2 and older: run a "
                    "broker of the version that wrote it, or newer")


def test_certs_json_names_the_files_and_reuses_the_ca(tmp_path: Path) -> None:
    made = json.loads(ok(keybus(None, "certs", "--dir", str(tmp_path), "--client", "alice",
                                "--json")))
    assert made["ca_made"] and Path(made["ca"]).exists()
    assert Path(made["server"]["cert"]).exists() and Path(made["clients"]["alice"]["key"]).exists()
    again = json.loads(ok(keybus(None, "certs", "--dir", str(tmp_path), "--json")))
    assert not again["ca_made"] and again["ca"] == made["ca"] and again["clients"] == {}


def test_a_ca_file_that_is_no_certificate_is_said_before_connecting(tmp_path: Path) -> None:
    """--tls-ca given a file that is not PEM certificates: one line naming the option and
    the file, exit 2, before any connection (gRPC used to log C-core errors and the
    connection failed as if the broker wanted TLS). A real CA still works (the
    secure-client tests) and its key, which is PEM too, is refused."""
    made = json.loads(ok(keybus(None, "certs", "--dir", str(tmp_path / "certs"), "--json")))
    not_pem = tmp_path / "ca.txt"
    not_pem.write_text("not a certificate\n")
    broken = tmp_path / "broken.pem"
    broken.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    closed = f"127.0.0.1:{free_port()}"
    for path, why in ((not_pem, "it has no '-----BEGIN CERTIFICATE-----' line"),
                      (broken, "a certificate block in it does not parse"),
                      (Path(made["server"]["key"]), "it has no '-----BEGIN CERTIFICATE-----'")):
        line = one_line(keybus(None, "produce", "cli", "--tls-ca", str(path), "--key", "1",
                               "--value", "a", "--broker", closed), 2)
        assert f"--tls-ca {path} is not a PEM certificate: {why}" in line, line
