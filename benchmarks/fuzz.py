"""Fuzz every Keybus method over a real gRPC connection to a real broker.

`python -m benchmarks fuzz --examples N` starts a broker (static tokens on,
so authentication is fuzzed too), stores reference data, then runs N
hypothesis examples: each picks a method, credentials (superuser, a
principal with few rights, none) and one to three requests drawn by
`fuzz_strategies.py`, sends them and checks the answer:

* the only status codes allowed are the documented ones, each with a
  message; never UNKNOWN or INTERNAL (a Python exception escaping);
* every call ends within HANG_S (10 s), except a follow Read, a follow
  Bootstrap (its ONLINE phase is a follow read) or an open Subscribe, which
  may wait by design: those are given a short deadline and
  DEADLINE_EXCEEDED is allowed for them only;
* Produce answers each request in the stream, with a documented code.

After the run the broker must still serve (health check, ListTopics) and
the reference data must read back byte for byte. The suite runs a bounded
number of examples (tests/integration/test_fuzz.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from benchmarks.fuzz_strategies import PROTECTED_TOPIC, SERVICE, message_class, payloads
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc

HANG_S = 10.0
WAITING_DEADLINE_S = 0.5  # follow reads and open subscriptions: they wait by design
ALLOWED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
           grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.FAILED_PRECONDITION,
           grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.RESOURCE_EXHAUSTED,
           grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED}
ALLOWED_VALUES = {code.value[0] for code in ALLOWED}
SUPERUSER = "root"
TOKENS = {SUPERUSER: "fuzz-root-token-0123456789", "alice": "fuzz-alice-token-0123456789"}
BROKER_ARGS = ("--partitions-max", "8", "--subscriptions-per-topic-max", "50",
               "--auth-superusers", SUPERUSER)
METHODS = sorted(SERVICE.methods_by_name)


@dataclass
class Tally:
    examples: int = 0
    by_code: Counter[str] = field(default_factory=Counter)
    slowest_s: float = 0.0
    failures: list[str] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        return {"examples": self.examples, "codes": dict(sorted(self.by_code.items())),
                "slowest_call_s": round(self.slowest_s, 3), "failures": self.failures[:20]}


def token_file(directory: Path) -> Path:
    path = directory / "fuzz-tokens.toml"
    path.write_text("[tokens]\n" + "".join(f'{p} = "{t}"\n' for p, t in TOKENS.items()))
    return path


def _waits_by_design(method: str, payload: bytes) -> bool:
    """An open Subscribe, or a request with `follow` set (the contract's Read and
    Bootstrap: whichever request message has that field, read from the proto)."""
    if method == "Subscribe":
        return True
    descriptor = SERVICE.methods_by_name[method].input_type
    if "follow" not in descriptor.fields_by_name:
        return False
    try:
        request: Any = message_class(descriptor).FromString(payload)
        return bool(request.follow)
    except Exception:
        return False


class Fuzzer:
    """Sends fuzzed requests on one channel per credential and checks answers."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.channels = {who: self._channel(token) for who, token in
                         (("root", TOKENS[SUPERUSER]), ("alice", TOKENS["alice"]), ("none", ""))}
        self.tally = Tally()
        self.progress_every = 0  # print a line to stderr every this many examples

    def _channel(self, token: str) -> grpc.Channel:
        if not token:
            return grpc.insecure_channel(self.address)
        credentials = grpc.composite_channel_credentials(
            grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP),
            grpc.access_token_call_credentials(token))
        return grpc.secure_channel(self.address, credentials)

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()

    def check(self, method: str, who: str, requests: list[bytes]) -> None:
        """One example: send, time, and record what is wrong (raises AssertionError)."""
        if method == "DeleteTopic":  # the reference data must survive the run
            requests = [r for r in requests if PROTECTED_TOPIC.encode() not in r] or [b""]
        waits = any(_waits_by_design(method, r) for r in requests)
        began = time.monotonic()
        code, problems = self._send(self.channels[who], method, requests, waits)
        took = time.monotonic() - began
        self.tally.examples += 1
        if self.progress_every and self.tally.examples % self.progress_every == 0:
            print(f"fuzz: {self.tally.examples} examples, {dict(self.tally.by_code)}",
                  file=sys.stderr, flush=True)
        self.tally.by_code[code.name] += 1
        self.tally.slowest_s = max(self.tally.slowest_s, took)
        if took > HANG_S:
            problems.append(f"took {took:.1f}s")
        if code == grpc.StatusCode.DEADLINE_EXCEEDED and not waits:
            problems.append("hung until the deadline")
        elif code not in ALLOWED and not (waits and code in (grpc.StatusCode.DEADLINE_EXCEEDED,
                                                              grpc.StatusCode.CANCELLED)):
            problems.append(f"status {code.name}")
        if problems:
            failure = f"{method} as {who} with {[r.hex() for r in requests]}: {problems}"
            self.tally.failures.append(failure)
            raise AssertionError(failure)

    def _send(self, channel: grpc.Channel, method: str, requests: list[bytes],
              waits: bool) -> tuple[grpc.StatusCode, list[str]]:
        path = f"/keybus.v1.Keybus/{method}"
        descriptor = SERVICE.methods_by_name[method]
        timeout = WAITING_DEADLINE_S if waits else HANG_S + 1
        problems: list[str] = []
        try:
            if method == "Produce":
                answers = list(channel.stream_stream(
                    path, response_deserializer=pb.ProduceResponse.FromString)(
                        iter(requests), timeout=timeout))
                problems += _produce_problems(answers, len(requests))
            elif descriptor.client_streaming:
                _first_answer(channel.stream_stream(path), requests, timeout)
            elif descriptor.server_streaming:
                for _ in channel.unary_stream(path)(requests[0], timeout=timeout):
                    pass
            else:
                channel.unary_unary(path)(requests[0], timeout=timeout)
        except grpc.RpcError as e:
            if not e.details():
                problems.append(f"{e.code()} without a message")
            code: grpc.StatusCode = e.code()
            return code, problems
        return grpc.StatusCode.OK, problems


def _produce_problems(answers: list[pb.ProduceResponse], sent: int) -> list[str]:
    problems = [] if len(answers) == sent else [f"{len(answers)} answers to {sent} requests"]
    for answer in answers:
        if answer.error_code and (answer.error_code not in ALLOWED_VALUES
                                  or not answer.error_message):
            problems.append(f"answer {answer.error_code} {answer.error_message!r}")
    return problems


def _first_answer(call_of: Any, requests: list[bytes], timeout: float) -> None:
    """A bidi stream (Subscribe): send, wait for the first answer or the end."""
    done = threading.Event()

    def stream() -> Iterator[bytes]:
        yield from requests
        done.wait(timeout)

    call = call_of(stream(), timeout=timeout)
    try:
        next(call, None)
    finally:
        done.set()
        call.cancel()


def prepare(address: str) -> list[bytes]:
    """Topics and reference data; returns the reference records' bytes."""
    root = Fuzzer(address).channels["root"]
    stub = pb_grpc.KeybusStub(root)
    for topic in ("fuzz-a", "fuzz-b", PROTECTED_TOPIC):
        stub.CreateTopic(pb.CreateTopicRequest(topic=topic), timeout=10)
    batch = pb.EventBatch(count=3, key_ints=[1, 2, 3], values=[b"a", b"b", b"c"])
    for topic in ("fuzz-a", PROTECTED_TOPIC):
        list(stub.Produce(iter([pb.ProduceRequest(topic=topic, batch=batch)] * 5), timeout=10))
    stub.GrantPermissions(pb.GrantPermissionsRequest(entries=[pb.AclEntry(
        principal="alice", topic="fuzz-a", permission=pb.PERMISSION_CONSUME)]), timeout=10)
    return reference(address)


def reference(address: str) -> list[bytes]:
    stub = pb_grpc.KeybusStub(Fuzzer(address).channels["root"])
    request = pb.ReadRequest(topic=PROTECTED_TOPIC, start=pb.StartPosition(earliest=True),
                             stop_offset=15)
    return [r.SerializeToString() for response in stub.Read(request, timeout=10)
            for r in response.records]


def still_serves(address: str) -> None:
    channel = Fuzzer(address).channels["root"]
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    pb_grpc.KeybusStub(channel).ListTopics(pb.ListTopicsRequest(), timeout=10)


def run(address: str, examples: int, seed: int | None = None, progress_every: int = 0) -> Tally:
    """Run `examples` hypothesis examples against the broker at `address`."""
    fuzzer = Fuzzer(address)
    fuzzer.progress_every = progress_every
    example = st.sampled_from(METHODS).flatmap(lambda m: st.tuples(
        st.just(m), st.sampled_from(["root", "root", "alice", "none"]),
        st.lists(payloads(m), min_size=1, max_size=3)))

    @settings(max_examples=examples, deadline=None, database=None, derandomize=seed is None,
              phases=(Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck))
    @given(example)
    def one(case: tuple[str, str, list[bytes]]) -> None:
        fuzzer.check(*case)

    if seed is not None:
        one = __import__("hypothesis").seed(seed)(one)
    try:
        one()
    finally:
        fuzzer.close()
    return fuzzer.tally


def main(argv: list[str]) -> int:
    from benchmarks.broker import running_broker

    parser = argparse.ArgumentParser(prog="python -m benchmarks fuzz", description=__doc__)
    parser.add_argument("--examples", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default fixed)")
    options = parser.parse_args(argv)
    import tempfile

    with tempfile.TemporaryDirectory() as directory, running_broker(
            *BROKER_ARGS, "--auth-token-file", str(token_file(Path(directory)))) as (address, _):
        before = prepare(address)
        began = time.monotonic()
        tally: Tally | None = None
        try:
            tally = run(address, options.examples, options.seed, progress_every=10_000)
        finally:
            still_serves(address)
            assert reference(address) == before, "reference data changed"
        report = {"command": "python -m benchmarks fuzz --examples " + str(options.examples),
                  "seconds": round(time.monotonic() - began, 1), **tally.report()}
    print(json.dumps(report, indent=2))
    return 0
