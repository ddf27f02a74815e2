"""The evaluator's scheduling rules as tables: what it evaluates, in what order, when it looks
again and what it records skipped.  Pure functions (``evaluator/loop/schedule.py``): no files, no
threads, no clock."""

from __future__ import annotations

import pytest

from showtell.evaluator.loop import schedule
from showtell.evaluator.loop.schedule import Checkpoint, Retry, Skip

M = "/m"


def ck(step: int) -> Checkpoint:
    return Checkpoint(step, f"{M}/ckpt-{step}")


def names(*steps: int) -> list[str]:
    return [f"{M}/ckpt-{s}" for s in steps]


@pytest.mark.parametrize("policy, named, recorded, newest, expected", [
    # all: every named checkpoint without a record, oldest first, whatever order the file lists
    ("all", names(10, 20, 30), set(), None, [10, 20, 30]),
    ("all", names(30, 10, 20), set(), None, [10, 20, 30]),
    ("all", names(10, 20, 30), {ck(20)}, 20, [10, 30]),
    ("all", names(10, 20), {ck(10), ck(20)}, 20, []),
    ("all", [], set(), None, []),
    # latest: only the newest named one, and only when newer than what is recorded —
    # while behind, the ones in between are passed over
    ("latest", names(10, 20, 30), set(), None, [30]),
    ("latest", names(10, 20, 30), {ck(10)}, 10, [30]),
    ("latest", names(10, 20, 30), {ck(30)}, 30, []),
    # the newest is recorded, an older one is not: nothing (latest never goes back)
    ("latest", names(10, 20), {ck(20)}, 20, []),
    # a new run (nothing recorded for it) restarts at low steps: evaluated again
    ("latest", names(5), set(), None, [5]),
    # a recorded step from a newer checkpoint (other prefix) holds latest back
    ("latest", names(10), set(), 15, []),
    ("all", names(10, 20, 30), {ck(10), ck(30)}, 30, [20]),
])
def test_which_checkpoints_are_evaluated_and_in_what_order(policy, named, recorded, newest, expected):
    todo = schedule.to_evaluate(named, recorded=recorded, newest_recorded=newest, policy=policy)
    assert todo == [ck(s) for s in expected]


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="policy 'oldest'"):
        schedule.to_evaluate(names(1), recorded=set(), newest_recorded=None, policy="oldest")


@pytest.mark.parametrize("seen, named, evaluating, recorded, expected", [
    # named, then no longer (deleted by --keep) and never recorded: skipped, in step order
    ({f"{M}/ckpt-20": 20, f"{M}/ckpt-10": 10}, names(30), None, set(), [10, 20]),
    # still named: not vanished
    ({f"{M}/ckpt-10": 10}, names(10, 20), None, set(), []),
    # the one being evaluated is pinned: its own evaluation records it
    ({f"{M}/ckpt-10": 10}, names(20), f"{M}/ckpt-10", set(), []),
    # already recorded (evaluated before it was deleted): nothing more
    ({f"{M}/ckpt-10": 10}, names(20), None, {ck(10)}, []),
])
def test_checkpoints_deleted_while_the_evaluator_was_busy_are_skipped(seen, named, evaluating, recorded,
                                                                       expected):
    skips = schedule.vanished(seen, named, evaluating=evaluating, recorded=recorded)
    assert [s.checkpoint for s in skips] == [ck(s) for s in expected]
    assert all("deleted by the trainer before it could be evaluated" in s.reason
               and "--keep" in s.reason for s in skips)


@pytest.mark.parametrize("named, first_seen, attempts, now, expected", [
    # still named: look again, 0.5 s then doubling, at most 10 s apart
    (True, 100.0, 0, 100.0, Retry(at=100.5, attempts=1)),
    (True, 100.0, 1, 101.0, Retry(at=102.0, attempts=2)),
    (True, 100.0, 3, 110.0, Retry(at=114.0, attempts=4)),
    (True, 100.0, 8, 150.0, Retry(at=160.0, attempts=9)),
    # still named but incomplete for the whole --arrival-timeout: skipped, saying so
    (True, 100.0, 9, 400.0, "still incomplete after 300 s (--arrival-timeout 300)"),
    # no longer named: the trainer deleted it before it could be pinned
    (False, 100.0, 0, 100.0, "no longer named by the state file"),
    (False, 100.0, 4, 120.0, "no longer named by the state file"),
])
def test_a_checkpoint_whose_files_are_missing(named, first_seen, attempts, now, expected):
    decision = schedule.not_arrived(ck(7), f"{M}/ckpt-7: its .index or .data files are not there",
                                    named=named, first_seen=first_seen, attempts=attempts, now=now,
                                    arrival_timeout=300.0)
    if isinstance(expected, Retry):
        assert decision == expected
    else:
        assert isinstance(decision, Skip) and decision.checkpoint == ck(7) and expected in decision.reason


def test_the_retry_backoff_never_exceeds_the_arrival_timeout_in_total():
    """Following the schedule's own retries from the first look, a checkpoint still missing is
    skipped within one backoff step of --arrival-timeout, never later."""
    now, attempts, first = 0.0, 0, 0.0
    while True:
        decision = schedule.not_arrived(ck(1), "missing", named=True, first_seen=first, attempts=attempts,
                                        now=now, arrival_timeout=60.0)
        if isinstance(decision, Skip):
            break
        assert decision.at > now
        now, attempts = decision.at, decision.attempts
    assert 60.0 <= now < 60.0 + schedule.MAX_RETRY_SECS


@pytest.mark.parametrize("leftovers, named, recorded, expected", [
    # deleted since the evaluator stopped, never recorded: skipped (nothing would name it again)
    (["ckpt-10"], names(20), set(), [10]),
    # still named: it is simply pending again, no skip
    (["ckpt-10"], names(10, 20), set(), []),
    # recorded before the stop: nothing
    (["ckpt-10"], names(20), {ck(10)}, []),
    # not a checkpoint pin: ignored
    (["tmp123"], names(20), set(), []),
])
def test_pins_left_by_a_stopped_evaluator(leftovers, named, recorded, expected):
    skips = schedule.leftover_pins(leftovers, model_dir=M, named=named, recorded=recorded)
    assert [s.checkpoint for s in skips] == [ck(s) for s in expected]
    assert all("cut short" in s.reason for s in skips)
