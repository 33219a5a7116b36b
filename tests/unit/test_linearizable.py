"""The register checker: hand-made histories whose verdict is known, and
random small histories judged against a brute-force search of every order."""

from __future__ import annotations

import itertools
import random

import pytest

from dbtester.analyze.linearizable import INITIAL, Operation, Outcome, check_history


def write(
    value: int, start: int, end: int | None, outcome: str = "ok", client: int = 0
) -> Operation:
    done = end if outcome == "ok" else None
    return Operation(client, 1, "write", value, start, done, outcome)  # type: ignore[arg-type]


def read(
    value: int, start: int, end: int | None, outcome: str = "ok", client: int = 1
) -> Operation:
    done = end if outcome == "ok" else None
    return Operation(client, 1, "read", value, start, done, outcome)  # type: ignore[arg-type]


def verdict(*ops: Operation) -> str:
    (found,) = check_history(ops)
    return "ok" if found.violation is None else found.violation.reason


def test_one_after_another_is_linearizable() -> None:
    assert verdict(read(INITIAL, 0, 1), write(7, 2, 3), read(7, 4, 5), write(8, 6, 7)) == "ok"


def test_a_stale_read_is_caught_naming_its_operations() -> None:
    # 8 replaced 7 before the read began, yet the read returned 7
    stale = read(7, 6, 7)
    (found,) = check_history([write(7, 0, 1), write(8, 2, 3), stale])
    assert found.violation is not None
    assert "inside another's" in found.violation.reason
    assert stale in found.violation.operations
    assert {op.value for op in found.violation.operations} == {7, 8}


def test_a_lost_acknowledged_write_is_caught() -> None:
    reason = verdict(write(7, 0, 1), read(INITIAL, 2, 3))
    assert "the initial value" in reason and "value 7" in reason


def test_two_writes_whose_reads_cross_are_caught() -> None:
    # 1 was overwritten by 2 (done by 3) before the read of 1 began at 5;
    # each value's zone runs forward, and the two overlap
    reason = verdict(write(1, 0, 1), write(2, 2, 3), read(2, 4, 7), read(1, 5, 6, client=2))
    assert "zones overlap" in reason


def test_a_read_concurrent_with_its_write_is_fine() -> None:
    assert verdict(write(7, 0, 10), read(7, 1, 2), read(INITIAL, 1, 3)) == "ok"


def test_a_read_before_its_write_began_is_caught() -> None:
    assert "before the write of it began" in verdict(read(7, 0, 1), write(7, 2, 3))


def test_values_nobody_wrote_or_from_failed_writes_are_caught() -> None:
    assert "no write of the history" in verdict(read(9, 0, 1))
    assert "a write that failed" in verdict(write(7, 0, None, "failed"), read(7, 2, 3))


def test_an_unknown_write_may_or_may_not_have_taken_effect() -> None:
    # read long after: it took effect
    assert verdict(write(7, 0, None, "unknown"), read(7, 50, 51)) == "ok"
    # never read, and the key still absent later: it was not applied (yet)
    assert verdict(write(7, 0, None, "unknown"), read(INITIAL, 50, 51)) == "ok"
    # but a value seen and then lost is not
    reason = verdict(write(7, 0, None, "unknown"), read(7, 10, 11), read(INITIAL, 20, 21))
    assert reason != "ok"


def test_two_writes_of_one_value_are_refused() -> None:
    with pytest.raises(ValueError, match="written twice"):
        check_history([write(7, 0, 1), write(7, 2, 3)])


def test_keys_are_checked_apart() -> None:
    one = Operation(0, 1, "write", 7, 0, 1)
    other = Operation(1, 2, "read", 7, 2, 3)  # key 2 never had 7
    found = check_history([one, other])
    assert [(k.key, k.linearizable) for k in found] == [(1, True), (2, False)]


# ---------------------------------------------------------------- brute force


def _linearizable_by_search(ops: list[Operation]) -> bool:
    """Every order of the operations that may have taken effect (failed ones
    never, unknown writes optionally), kept if it respects real time and
    every read returns the latest write before it."""
    certain = [op for op in ops if op.outcome == "ok"]
    maybe = [op for op in ops if op.outcome == "unknown" and op.kind == "write"]
    for chosen in itertools.product((False, True), repeat=len(maybe)):
        included = certain + [op for op, keep in zip(maybe, chosen, strict=True) if keep]
        for order in itertools.permutations(included):
            if _legal(order):
                return True
    return False


def _legal(order: tuple[Operation, ...]) -> bool:
    for i, later in enumerate(order):
        for earlier in order[i + 1 :]:
            # `earlier` is placed after `later` but completed before it began
            if earlier.completed_ns is not None and earlier.completed_ns < later.invoked_ns:
                return False
    value = INITIAL
    for op in order:
        if op.kind == "write":
            value = op.value
        elif op.value != value:
            return False
    return True


def _random_history(rng: random.Random) -> list[Operation]:
    ops: list[Operation] = []
    next_value = 1
    for client in range(rng.randint(1, 3)):
        now = rng.random()
        for _ in range(rng.randint(1, 2)):
            start, end = now + rng.random(), 0.0
            end = start + rng.random()
            outcomes: list[Outcome] = ["ok", "failed", "unknown"]
            outcome = rng.choices(outcomes, [6, 1, 1])[0]
            done = int(end * 1e9) if outcome == "ok" else None
            begun = int(start * 1e9)
            if rng.random() < 0.4:
                ops.append(Operation(client, 1, "write", next_value, begun, done, outcome))
                next_value += 1
            else:
                value = rng.randint(0, 3)
                ops.append(Operation(client, 1, "read", value, begun, done, outcome))
            now = end
    return ops


def test_random_histories_agree_with_a_search_of_every_order() -> None:
    rng = random.Random(42)
    verdicts = {True: 0, False: 0}
    for _ in range(5000):
        ops = _random_history(rng)
        expected = _linearizable_by_search(ops)
        (found,) = check_history(ops)
        assert found.linearizable == expected, ops
        verdicts[expected] += 1
    # both verdicts were exercised, many times
    assert min(verdicts.values()) > 300, verdicts


def test_serializable_reads_are_counted_stale_not_violations() -> None:
    old = Operation(2, 1, "read", 7, 6, 7, serializable=True)  # 8 was there
    fresh = Operation(2, 1, "read", 8, 8, 9, serializable=True)
    racing = Operation(2, 1, "read", 7, 2, 5, serializable=True)  # 8 not yet done
    absent = Operation(2, 1, "read", INITIAL, 10, 11, serializable=True)
    (found,) = check_history([write(7, 0, 1), write(8, 2, 3), old, fresh, racing, absent])
    assert found.linearizable and found.stale_reads == 2
