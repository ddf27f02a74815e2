"""The trainer's outer loop with a fake runner, fake checkpoints and a fake clock — in the style
of Orbit's ``controller_test``: chunking, actions, saves on a step or time schedule, stops.
The real runners and strategies run in the e2e tests."""

from __future__ import annotations

import pytest

from showtell.trainer.loop.checkpoints import SaveSchedule
from showtell.trainer.loop.controller import ANOTHER_WORKER, Controller, StepLogs
from showtell.trainer.loop.signals import StopRequest
from tests.fakes import FakeClock


class FakeRunner:
    """Each step adds one to the global step and ``seconds_per_step`` to the clock; ``others_stop``
    plays another worker voting to stop at that global step."""

    def __init__(self, clock: FakeClock, steps_per_loop: int = 10, seconds_per_step: float = 0.0,
                 others_stop: int | None = None) -> None:
        self.clock, self.steps_per_loop, self.seconds_per_step = clock, steps_per_loop, seconds_per_step
        self.step, self.chunks, self.others_stop = 0, [], others_stop

    def train(self, num_steps: int) -> StepLogs:
        self.chunks.append(num_steps)
        self.step += num_steps
        self.clock.now += num_steps * self.seconds_per_step
        return StepLogs(losses=[1.0] * num_steps)

    def agree(self, flags: list[bool]) -> list[bool]:
        if self.others_stop is not None and self.step >= self.others_stop:
            flags = [True, *flags[1:]]
        return flags


class FakeCheckpoints:
    def __init__(self, runner: FakeRunner) -> None:
        self.runner, self.saved = runner, []

    def save(self) -> None:
        self.saved.append(self.runner.step)


def controller(runner: FakeRunner, *, every_steps: int | None = None, every_secs: float | None = None,
               stop: StopRequest | None = None, actions=(),
               boundaries=()) -> tuple[Controller, FakeCheckpoints]:
    checkpoints = FakeCheckpoints(runner)
    ctl = Controller(runner=runner, global_step=lambda: runner.step, checkpoints=checkpoints,
                     save_schedule=SaveSchedule(every_secs, every_steps, clock=runner.clock),
                     stop=StopRequest() if stop is None else stop, actions=actions, boundaries=boundaries)
    return ctl, checkpoints


def test_chunks_start_with_one_step_and_end_on_every_interval_boundary():
    runner = FakeRunner(FakeClock(), steps_per_loop=10)
    seen: list[tuple[int, int]] = []
    ctl, _ = controller(runner, actions=[lambda step, logs: seen.append((step, logs.steps))],
                        boundaries=(4, 0))
    assert ctl.train(23) is None
    assert runner.chunks == [1, 3, 4, 4, 4, 4, 3]  # one step to trace, then up to each multiple of 4
    assert [s for s, _ in seen] == [1, 4, 8, 12, 16, 20, 23] and sum(n for _, n in seen) == 23


def test_chunks_are_at_most_steps_per_loop():
    runner = FakeRunner(FakeClock(), steps_per_loop=5)
    ctl, _ = controller(runner)
    ctl.train(17)
    assert runner.chunks == [1, 5, 5, 5, 1]


def test_saves_every_k_steps_and_leaves_the_final_save_to_the_caller():
    runner = FakeRunner(FakeClock(), steps_per_loop=100)
    ctl, checkpoints = controller(runner, every_steps=10, boundaries=(10,))
    ctl.train(35)
    assert checkpoints.saved == [10, 20, 30]


def test_saves_every_s_seconds_of_the_clock():
    runner = FakeRunner(FakeClock(), steps_per_loop=1, seconds_per_step=2.0)
    ctl, checkpoints = controller(runner, every_secs=5.0)
    ctl.train(10)
    assert checkpoints.saved == [3, 6, 9]  # 6 s, 12 s, 18 s since the last save


def test_resumed_training_counts_the_save_interval_from_the_restored_step():
    runner = FakeRunner(FakeClock(), steps_per_loop=100)
    runner.step = 25  # restored from ckpt-25
    ctl, checkpoints = controller(runner, every_steps=10, boundaries=(10,))
    ctl.train(50)
    # 30 is only 5 steps after the restore: the first save is at the next boundary, 40
    assert runner.chunks[:3] == [1, 4, 10] and checkpoints.saved == [40, 50]


def test_a_stop_ends_after_the_chunk_with_its_reason():
    runner, stop = FakeRunner(FakeClock(), steps_per_loop=10), StopRequest()

    def stop_at_12(step: int, logs: StepLogs) -> None:
        if step >= 12:
            stop.request("SIGTERM")

    ctl, _ = controller(runner, stop=stop, actions=[stop_at_12])
    assert ctl.train(100) == "SIGTERM"
    assert runner.step == 21  # the chunk in progress was finished, nothing after it


def test_a_stop_requested_before_the_first_step_trains_nothing():
    runner, stop = FakeRunner(FakeClock()), StopRequest()
    stop.request("SIGINT")
    ctl, _ = controller(runner, stop=stop)
    assert ctl.train(100) == "SIGINT" and runner.chunks == []


def test_a_stop_at_the_last_step_is_a_finished_run():
    runner, stop = FakeRunner(FakeClock(), steps_per_loop=10), StopRequest()
    ctl, _ = controller(runner, stop=stop,
                        actions=[lambda step, logs: step == 11 and stop.request("late")])
    assert ctl.train(11) is None  # the goal was reached: finished, not stopped


def test_another_workers_stop_ends_this_one_too():
    runner = FakeRunner(FakeClock(), steps_per_loop=10, others_stop=5)
    ctl, _ = controller(runner)
    assert ctl.train(100) == ANOTHER_WORKER and runner.step == 11


@pytest.mark.parametrize("every_secs, every_steps, steps, expected", [
    (None, 10, [9, 10, 19, 20], [False, True, False, True]),
    (None, None, [1000], [False]),
])
def test_save_schedule_by_steps(every_secs, every_steps, steps, expected):
    clock = FakeClock()
    schedule = SaveSchedule(every_secs, every_steps, clock=clock)
    due = []
    for step in steps:
        due.append(schedule.due(step))
        if due[-1]:
            schedule.saved(step)
    assert due == expected


def test_the_first_save_comes_early_then_the_schedule_goes_on():
    clock = FakeClock()
    schedule = SaveSchedule(120, None, clock=clock, first_secs=20)
    schedule.start(0)
    due = []
    for seconds, step in ((19, 1), (1, 2), (0, 2), (100, 3), (19, 4), (1, 5)):
        clock.now += seconds
        due.append(schedule.due(step))
        if due[-1]:
            schedule.saved(step)
    # 20 s in: the first; then every 120 s from it (not another at 20 s after it)
    assert due == [False, True, False, False, False, True]
