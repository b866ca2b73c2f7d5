"""Goal: the producer state a commit stores is always exactly the kept results encoded in
full, although `ProducerTable.encoded` packs only what a commit added: after commits past
the cap, loads from the store, rolled-back groups, forgotten and evicted ids.

Method: hypothesis drives random operation sequences on a small table (cap 4 results,
2 ids in memory) and compares `encoded` with `encode_producer_results` after each step.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.codec import ProducerResult, encode_producer_results
from broker.windows import ProducerTable

IDS = (1, 2, 3)
operations = st.lists(st.tuples(st.sampled_from(("commit", "commit", "commit", "load",
                                                 "rollback", "forget")),
                                st.sampled_from(IDS), st.integers(1, 3)), max_size=60)


def _result(n: int) -> ProducerResult:
    return ProducerResult(n, n * 10, 1 + n % 3, n * 10, n % 2 == 0, 1_000 + n)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_encoded_is_the_kept_results_in_full(steps: list[tuple[str, int, int]]) -> None:
    table = ProducerTable(results_kept=4, producer_ids_max=2)
    n = 0
    for operation, producer_id, times in steps:
        if operation == "commit":  # a group of `times` requests of this producer
            for _ in range(times):
                n += 1
                table.commit(producer_id, _result(n))
                assert table.encoded(producer_id) == encode_producer_results(
                    table.results[producer_id])
        elif operation == "load":  # read back from the store: new objects, same values
            table.load(producer_id, [_result(k) for k in range(n, n + times)])
        elif operation == "rollback":  # a group whose write failed: the saved copy is back
            saved = list(table.results.get(producer_id, []))
            for _ in range(times):
                n += 1
                table.commit(producer_id, _result(n))
                table.encoded(producer_id)
            table.results.update({producer_id: saved})
        else:
            table.forget([producer_id])
        for known in IDS:
            assert table.encoded(known) == encode_producer_results(table.results.get(known, []))
    assert len(table.results) <= 2
