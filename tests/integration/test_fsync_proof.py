"""Fsync before ack, proven from the system calls the broker makes.

Goal: the broker never answers a produce request before the RocksDB WAL
write that holds it is synced to disk. Kill -9 tests cannot show this (a
process crash loses nothing the OS has), so they pass with --no-fsync too.
Method: run a real broker under `strace -f` (Debian package `strace`,
installed when missing), send produce requests one at a time, each with
its own request id and keys, and read the trace in order: for every
request, between the read of its bytes (recvmsg) and the write of its
answer (sendmsg, found by the answer's serialized request id and topic), an
fsync/fdatasync of a WAL file (`*.log` in the RocksDB directory) must have
returned. The bytes of each socket are joined in order before they
are searched (gRPC may read one request in several calls, and strace shows
a call's data on its `resumed` line when another thread interleaved). The same check run against a broker started with --no-fsync must
fail, so the test can fail.
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sdk.core.pb import keybus_pb2 as pb
from tests.support.broker_process import BrokerProcess
from tests.support.debian import ensure_program
from tests.support.wire import create_topic, int_batch, stub

REQUESTS = 8
TOPIC = "fsync-proof"
LINE = re.compile(r"^(\d+)\s+(.*)$")
ESCAPED = re.compile(r"\\x([0-9a-f]{2})")
IO_CALL = re.compile(r"^(recvmsg|sendmsg)\((\d+)<")
IO_RESUMED = re.compile(r"^<\.\.\. (recvmsg|sendmsg) resumed>")


def _bytes_of(text: str) -> bytes:
    """The bytes of strace's -xx output (every byte as \\xNN)."""
    return bytes(int(h, 16) for h in ESCAPED.findall(text))


@dataclass
class Stream:
    """The bytes one socket received (or sent), in order, each chunk with its line."""

    chunks: list[tuple[int, bytes]] = field(default_factory=list)

    def line_of(self, needle: bytes, at_end: bool) -> int | None:
        """The line whose chunk holds the needle's last byte (at_end) or first byte.

        gRPC may read one message in several recvmsg calls, so the needle is
        looked for in the joined stream, never in one chunk alone."""
        joined = b"".join(data for _, data in self.chunks)
        index = joined.find(needle)
        if index < 0:
            return None
        wanted = index + len(needle) - 1 if at_end else index
        position = 0
        for line, data in self.chunks:
            position += len(data)
            if wanted < position:
                return line
        raise AssertionError("unreachable: the needle lies inside the stream")


@dataclass
class Trace:
    """The events of a trace that the proof needs, by line number."""

    synced_wal: list[int] = field(default_factory=list)  # lines where a WAL sync returned 0
    received: dict[str, Stream] = field(default_factory=dict)  # by socket fd
    sent: dict[str, Stream] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Trace:
        trace = cls()
        pending_sync: dict[str, bool] = {}  # pid -> an unfinished sync is of a WAL file
        pending_io: dict[str, tuple[str, str]] = {}  # pid -> (call, fd) of an unfinished one
        for number, raw in enumerate(text.splitlines()):
            match = LINE.match(raw)
            if not match:
                continue
            pid, body = match.groups()
            if body.startswith(("fsync(", "fdatasync(")):
                is_wal = _bytes_of(body.split(">", 1)[0]).endswith(b".log")
                if "<unfinished" in body:
                    pending_sync[pid] = is_wal
                elif is_wal and body.endswith("= 0"):
                    trace.synced_wal.append(number)
            elif body.startswith(("<... fsync resumed", "<... fdatasync resumed")):
                if pending_sync.pop(pid, False) and body.endswith("= 0"):
                    trace.synced_wal.append(number)
            elif io := IO_CALL.match(body):
                call, fd = io.groups()
                if "<unfinished" in body:
                    pending_io[pid] = (call, fd)
                trace._add(call, fd, number, _bytes_of(body.split(">", 1)[1]))
            elif (resumed := IO_RESUMED.match(body)) and pid in pending_io:
                call, fd = pending_io.pop(pid)
                assert call == resumed.group(1)
                trace._add(call, fd, number, _bytes_of(body))
        return trace

    def _add(self, call: str, fd: str, line: int, data: bytes) -> None:
        """A recvmsg's bytes are printed when it returns (the resumed line), a
        sendmsg's when it starts (the unfinished line): each line adds what it shows."""
        if data:
            streams = self.received if call == "recvmsg" else self.sent
            streams.setdefault(fd, Stream()).chunks.append((line, data))

    @staticmethod
    def first(streams: dict[str, Stream], needle: bytes, at_end: bool) -> int:
        lines = [line for stream in streams.values()
                 if (line := stream.line_of(needle, at_end)) is not None]
        assert lines, f"{needle.hex()} not found in the trace"
        return min(lines)

    def acked_before_sync(self, requests: list[bytes], answers: list[bytes]) -> list[int]:
        """Indexes of the requests answered without a WAL sync returning in between:
        from the line where a request's last byte was read to the line where its
        answer's first byte was sent."""
        unsynced = []
        for i, (request, answer) in enumerate(zip(requests, answers, strict=True)):
            received = self.first(self.received, request, at_end=True)
            sent = self.first(self.sent, answer, at_end=False)
            assert received < sent
            if not any(received < line < sent for line in self.synced_wal):
                unsynced.append(i)
        return unsynced


def traced_run(tmp_path: Path, *broker_args: str) -> tuple[Trace, list[bytes], list[bytes]]:
    out = tmp_path / "strace.out"
    prefix = ("strace", "-f", "-y", "-xx", "-s", "65536", "-o", str(out),
              "-e", "trace=fsync,fdatasync,recvmsg,sendmsg")
    broker = BrokerProcess(tmp_path / "data", *broker_args, prefix=prefix)
    broker.start(timeout_s=60)
    try:
        client = stub(broker.address)
        create_topic(client, TOPIC)
        requests, answers = [], []
        for i in range(REQUESTS):  # one at a time: each answer is awaited
            request = pb.ProduceRequest(topic=TOPIC, request_id=0x5EED00 + i,
                                        batch=int_batch([7_000_000 + i]))
            (answer,) = client.Produce(iter([request]), timeout=60)
            assert answer.error_code == 0
            requests.append(request.SerializeToString())
            answers.append(pb.ProduceResponse(request_id=request.request_id,
                                              topic=TOPIC).SerializeToString())
    finally:
        _stop_traced(broker)
    return Trace.parse(out.read_text()), requests, answers


def _stop_traced(broker: BrokerProcess) -> None:
    """SIGTERM the broker under strace (strace then exits); strace itself
    would detach and leave the broker running."""
    assert broker.process is not None
    children = Path(f"/proc/{broker.process.pid}/task/{broker.process.pid}/children")
    for pid in children.read_text().split() if children.exists() else []:
        os.kill(int(pid), signal.SIGTERM)
    try:
        broker.process.wait(20)
    except Exception:
        broker.kill()


@pytest.fixture(scope="module")
def strace_ready() -> None:
    reason = ensure_program("strace", "strace")
    if reason:
        pytest.skip(f"SKIPPED LOUDLY: cannot prove fsync before ack without strace: {reason}")


def test_every_ack_follows_a_wal_sync(strace_ready: None, tmp_path: Path) -> None:
    trace, requests, answers = traced_run(tmp_path)
    assert trace.synced_wal, "no WAL sync in the trace at all"
    assert trace.acked_before_sync(requests, answers) == []


def test_the_proof_fails_without_fsync(strace_ready: None, tmp_path: Path) -> None:
    trace, requests, answers = traced_run(tmp_path, "--no-fsync")
    assert trace.acked_before_sync(requests, answers) == list(range(REQUESTS))

