"""What security costs: produce and Key_Shared end to end, TLS + tokens against
plain text, in one run; and the broker's slot check per event.

`python -m benchmarks secure [--events N] [--e2e-events N] [--consumers 1,4]`

For each mode (plain text, then TLS with a static bearer token and
authorization on) a fresh broker runs the produce scenario (one SDK
producer, fsync before ack, as `python -m benchmarks produce`) and the
Key_Shared steady drain (events stored first, consumers in their own
processes, a seek releases them; as benchmarks/e2e_key_shared.py). The
client side picks its TLS and token up from the ambient `sdk.security`
default, and the consumer processes from KEYBUS_TLS_CA/KEYBUS_TOKEN.
`slot_check` times `broker.derived.settle_slots` on 1,000-event batches
(the per-event cost of verifying client slots), cached keys and new keys.
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import timeit
from pathlib import Path
from typing import Any

from benchmarks import e2e_key_shared, scenarios
from benchmarks.broker import running_broker
from benchmarks.machine import describe
from broker.derived import settle_slots
from broker.security import certs
from sdk.admin import Admin
from sdk.core.hashing import SlotCache, slots_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.security import ClientSecurity, use

TOKEN = "bench-token-0123456789abcdef"


def secure_material(directory: Path) -> tuple[list[str], ClientSecurity]:
    """Broker flags and client security for TLS + a static token (superuser)."""
    ca = certs.make_ca()
    certs.write_pair(directory, "ca", ca)
    cert, key = certs.write_pair(directory, "server", certs.issue(
        ca, "localhost", server_names=("localhost", "127.0.0.1")))
    tokens = directory / "tokens.toml"
    tokens.write_text(f'[tokens]\nbench = "{TOKEN}"\n')
    args = ["--tls-cert-file", str(cert), "--tls-key-file", str(key),
            "--auth-token-file", str(tokens), "--auth-superusers", "bench"]
    return args, ClientSecurity(ca_file=str(directory / "ca.pem"), token=TOKEN)


async def one_mode(address: str, workload: scenarios.Workload, e2e_events: int,
                   consumers: list[int]) -> dict[str, Any]:
    produce = await scenarios.produce(address, workload)
    steady = {n: await e2e_key_shared.run_steady(address, n, e2e_events) for n in consumers}
    async with Admin(address) as admin:  # the produce scenario's events all stored
        assert sum(p.end_offset for p in (await admin.describe_topic("bench")).partitions) \
            == workload.events
    return {"produce_events_per_s": round(produce["events_per_s"]),
            "key_shared_steady_events_per_s": {str(n): s["events_per_s"]
                                               for n, s in steady.items()}}


def run_mode(name: str, broker_args: list[str], security: ClientSecurity | None,
             workload: scenarios.Workload, e2e_events: int, consumers: list[int]
             ) -> dict[str, Any]:
    env = {"KEYBUS_TLS_CA": security.ca_file, "KEYBUS_TOKEN": security.token} if security else {}
    saved = {k: os.environ.get(k) for k in ("KEYBUS_TLS_CA", "KEYBUS_TOKEN")}
    os.environ.update(env)
    try:
        with running_broker(*broker_args) as (address, _):

            async def go() -> dict[str, Any]:
                use(security)
                return await one_mode(address, workload, e2e_events, consumers)
            return {"mode": name, **asyncio.run(go())}
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def slot_check_ns() -> dict[str, float]:
    """ns per event of settle_slots on 1,000-event batches (10,000 int keys), the
    best of several repeats (robust to a shared machine); slots_of beside it."""
    import random

    rng = random.Random(3)
    keys = [rng.randrange(10_000) for _ in range(1000)]
    sent = pb.EventBatch(count=1000, key_ints=keys, slots=slots_of(keys), values=[b""] * 1000)
    warm = SlotCache()
    settle_slots(sent, warm)

    def best(fn: Any, number: int) -> float:
        return min(timeit.repeat(fn, number=number, repeat=7)) / number / 1000 * 1e9

    return {"cached_keys_ns_per_event": round(best(lambda: settle_slots(sent, warm), 500), 1),
            "new_keys_ns_per_event": round(best(lambda: settle_slots(sent, SlotCache()), 100), 1),
            "slots_of_ns_per_event": round(best(lambda: slots_of(keys), 100), 1)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks secure", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000, help="produce scenario")
    parser.add_argument("--e2e-events", type=int, default=300_000, help="Key_Shared steady")
    parser.add_argument("--consumers", default="1,4")
    parser.add_argument("--repeats", type=int, default=3,
                        help="rounds of plain text then TLS + token; medians are compared")
    options = parser.parse_args(argv)
    workload = scenarios.Workload(events=options.events)
    consumers = [int(n) for n in options.consumers.split(",")]
    rounds = []
    with tempfile.TemporaryDirectory() as directory:
        broker_args, security = secure_material(Path(directory))
        for _ in range(options.repeats):
            rounds.append([
                run_mode("plain text", [], None, workload, options.e2e_events, consumers),
                run_mode("TLS + token", broker_args, security, workload, options.e2e_events,
                         consumers)])
    medians = [_median_of([r[i] for r in rounds]) for i in (0, 1)]
    plain, secure = medians
    ratios = {key: round(secure[key] / plain[key], 3) for key in plain if key != "mode"}
    print(json.dumps({"benchmark": "secure", "machine": describe(),
                      "command": "python -m benchmarks secure " + " ".join(argv),
                      "medians": medians, "secure_over_plain": ratios, "rounds": rounds,
                      "slot_check": slot_check_ns()}, indent=2))
    return 0


def _median_of(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure, the median over rounds (flattened: produce, key_shared_N)."""
    import statistics

    flat: dict[str, list[float]] = {}
    for result in results:
        flat.setdefault("produce", []).append(result["produce_events_per_s"])
        for n, rate in result["key_shared_steady_events_per_s"].items():
            flat.setdefault(f"key_shared_{n}", []).append(rate)
    return {"mode": results[0]["mode"],
            **{key: round(statistics.median(values)) for key, values in flat.items()}}
