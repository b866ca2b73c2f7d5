"""The deterministic simulation of dispatch, a slice of it in every test run.

Goal: the real dispatch core keeps per-key order, a single holder per slot, one owner per
slot, no redelivery of acknowledged events (except after a broker crash), liveness and its
memory bounds under SEEDS seeded random schedules of STEPS steps each, over every
subscription type and Key_Shared mode (see tests/sim/harness.py for what is checked).

Method: `run_seed` for consecutive seeds from a random base (printed, so a failure names
its seed; KEYBUS_SIM_SEED=<seed> replays one exactly). The long run is
`python -m benchmarks simulate --seeds N`.
"""

from __future__ import annotations

import os
import random

from tests.sim.harness import run_seed

SEEDS = int(os.environ.get("KEYBUS_SIM_SEEDS", 300))
STEPS = int(os.environ.get("KEYBUS_SIM_STEPS", 400))


def test_simulated_dispatch_keeps_every_property() -> None:
    if "KEYBUS_SIM_SEED" in os.environ:  # KEYBUS_SIM_STEPS too, as the failure said
        seeds = [int(os.environ["KEYBUS_SIM_SEED"])]
    else:
        base = random.randrange(1 << 40)
        seeds = list(range(base, base + SEEDS))
    steps = deliveries = 0
    for seed in seeds:
        stats = run_seed(seed, STEPS)
        steps += stats.steps
        deliveries += stats.deliveries
    print(f"{len(seeds)} seeds from {seeds[0]}: {steps} steps, {deliveries} deliveries")
    assert deliveries > len(seeds)
