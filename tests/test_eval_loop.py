"""The evaluation loop in process, in the style of Orbit's ``controller_test``: a fake checkpoint
evaluator (no TensorFlow model), a fake clock, a real model dir's files (state file, checkpoint
files, finished marker) in a temporary directory and the real store and recorder.  What crosses
a process boundary — kills, synced copies, locks, clusters — stays in the e2e tests."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from pathlib import Path

import pytest

from showtell.common.model_dir import ModelDir
from showtell.evaluator.config import Finish
from showtell.evaluator.loop.schedule import FIRST_RETRY_SECS
from showtell.evaluator.records.recorder import WORK_DIR_RETRY_SECS
from tests.fakes import FakeEvaluator, FakeModelDir, build, history
from tests.helpers import wait_for


def test_policy_all_evaluates_every_checkpoint_once_in_step_order(tmp_path: Path):
    controller, model, store, _ = build(tmp_path)
    for step in (10, 20, 30):
        model.save(step)
    model.name(30, 10, 20)
    controller.look()
    assert controller.evaluator.calls == [10, 20, 30]
    assert history(store) == [(10, "ok"), (20, "ok"), (30, "ok")]
    controller.look()  # nothing new: nothing evaluated again
    assert controller.evaluator.calls == [10, 20, 30] and controller.evaluations == 3
    assert not list(controller.pins.iterdir())  # every pin released


def test_policy_latest_skips_ahead_while_behind(tmp_path: Path):
    controller, model, store, _ = build(tmp_path, policy="latest")
    for step in (10, 20, 30):
        model.save(step)
    model.name(10, 20, 30)
    controller.look()
    assert controller.evaluator.calls == [30]
    for step in (40, 50):
        model.save(step)
    model.name(30, 40, 50)
    controller.look()
    # 10, 20 and 40 were passed over: never evaluated, and no record (they were never its job)
    assert controller.evaluator.calls == [30, 50] and history(store) == [(30, "ok"), (50, "ok")]


def test_exit_when_trained_with_policy_latest_ends_after_the_final_checkpoint(tmp_path: Path):
    controller, model, _, _ = build(tmp_path, policy="latest", finish=Finish(when_trained=True))
    for step in (10, 20):
        model.save(step)
    model.name(10, 20)
    ModelDir(model.root).end(20, model.prefix(20), "steps", True, record=False)
    done: list = []
    thread = threading.Thread(target=lambda: done.append(controller.run(poll_fallback_secs=0.05)))
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the loop did not end after the final checkpoint was evaluated"
    assert done == ["the trainer finished (steps) and its final checkpoint, step 20, is evaluated"]
    assert controller.evaluator.opened and controller.evaluator.calls == [20]
    assert controller.status.trained_step == 20  # what Prometheus' trainer_finished reads


def test_the_status_says_when_the_trainer_finished_without_exit_when_trained(tmp_path: Path):
    """A service evaluator (no end of its own) still reads the finished marker at each wake-up:
    its status, and Prometheus, say a trainer that exited 0 is done, not down."""
    controller, model, _, _ = build(tmp_path, policy="all")
    model.save(10)
    model.name(10)
    thread = threading.Thread(target=controller.run, kwargs={"poll_fallback_secs": 0.05})
    thread.start()
    try:
        wait_for(lambda: controller.evaluator.calls == [10], 30, "step 10's evaluation")
        assert controller.status.trained_step == -1
        ModelDir(model.root).end(10, model.prefix(10), "steps", True, record=False)
        controller.on_change()
        wait_for(lambda: controller.status.trained_step == 10, 30, "the marker to be read")
    finally:
        controller.stop()
        thread.join(30)


def test_exit_when_trained_waits_for_the_final_checkpoint(tmp_path: Path):
    controller, model, _, _ = build(tmp_path, policy="latest", finish=Finish(when_trained=True))
    model.save(10)
    model.name(10)
    # its checkpoint is not named yet
    ModelDir(model.root).end(20, model.prefix(20), "steps", True, record=False)
    thread = threading.Thread(target=controller.run, kwargs={"poll_fallback_secs": 0.05})
    thread.start()
    try:
        thread.join(1.0)
        assert thread.is_alive() and controller.evaluator.calls == [10]
        model.save(20)
        model.name(10, 20)
        controller.on_change()
        thread.join(30)
        assert not thread.is_alive() and controller.done and controller.evaluator.calls == [10, 20]
    finally:
        controller.stop()
        thread.join(10)


@pytest.mark.parametrize("finish, expected_calls, reason", [
    (Finish(until_step=20), [10, 20], "step 20 reaches --until-step 20"),
    (Finish(max_evaluations=2), [10, 20], "2 evaluation(s) done (--max-evaluations 2)"),
])
def test_finish_conditions_end_the_loop(tmp_path: Path, finish, expected_calls, reason):
    controller, model, _, _ = build(tmp_path, finish=finish)
    for step in (10, 20, 30):
        model.save(step)
    model.name(10, 20, 30)
    assert controller.run(poll_fallback_secs=0.05) == reason
    assert controller.evaluator.calls == expected_calls


def test_a_checkpoint_still_arriving_is_retried_with_backoff_then_evaluated(tmp_path: Path):
    controller, model, store, clock = build(tmp_path)
    model.save(10, data=False)  # a synced copy: the state file and .index came first
    model.name(10)
    controller.look()
    assert history(store) == [] and controller.evaluator.calls == []
    assert controller.retry_at == clock.now + FIRST_RETRY_SECS
    clock.now += 1
    controller.look()
    assert controller.retry_at == clock.now + 2 * FIRST_RETRY_SECS  # doubled
    model.data(10)
    controller.look()
    assert history(store) == [(10, "ok")] and controller.retry_at is None


def test_a_checkpoint_that_never_arrives_is_skipped_after_the_arrival_timeout(tmp_path: Path):
    controller, model, store, clock = build(tmp_path)
    model.save(10, data=False)
    model.save(20)
    model.name(10, 20)
    controller.look()
    assert history(store) == []  # in step order: 20 waits behind the incomplete 10
    clock.now += 61
    controller.look()
    assert history(store) == [(10, "skipped"), (20, "ok")]
    assert "still incomplete after 61 s (--arrival-timeout 60)" in store.after(-1)[0].reason


def test_a_broken_checkpoint_is_recorded_failed_and_the_loop_goes_on(tmp_path: Path):
    controller, model, store, _ = build(tmp_path, evaluator=FakeEvaluator(broken=(20,)))
    for step in (10, 20, 30):
        model.save(step)
    model.name(10, 20, 30)
    controller.look()
    assert history(store) == [(10, "ok"), (20, "failed"), (30, "ok")]
    failed = next(r for r in store.after(-1) if r.status == "failed")
    # named as the user knows it, not by its pin
    assert "cannot restore (corrupt)" in failed.reason and "/pins/" not in failed.reason
    controller.look()
    assert controller.evaluator.calls == [10, 20, 30]  # a failure is final, not retried for ever


def test_a_checkpoint_deleted_while_the_evaluator_was_busy_is_recorded_skipped(tmp_path: Path):
    controller, model, store, _ = build(tmp_path)
    model.save(10, data=False)
    model.name(10)
    controller.on_change()  # the watcher saw it named
    model.delete(10)
    model.save(20)
    model.name(20)  # --keep 1 deleted it before its files were complete
    controller.on_change()
    assert history(store) == [(10, "skipped")]  # recorded from the watcher's thread, at once
    assert "--keep" in store.after(-1)[0].reason
    controller.look()
    assert history(store) == [(10, "skipped"), (20, "ok")] and controller.evaluator.calls == [20]


def test_a_full_work_dir_records_nothing_says_so_and_recovers(tmp_path: Path):
    controller, model, store, clock = build(tmp_path)
    model.save(10)
    model.name(10)
    real_add, failures = store.add, [sqlite3.OperationalError("database or disk is full")]

    def add(record):
        if failures:
            raise failures.pop()
        return real_add(record)

    store.add = add
    controller.look()
    assert history(store) == [] and controller.retry_at == clock.now + WORK_DIR_RETRY_SECS
    assert "step 10 not evaluated: --work-dir" in controller.status.work_error
    assert "database or disk is full" in controller.status.work_error
    clock.now += WORK_DIR_RETRY_SECS
    controller.look()
    assert history(store) == [(10, "ok")] and controller.status.work_error == ""


def test_a_pin_left_by_a_stopped_evaluator_is_settled_at_start(tmp_path: Path):
    controller, model, store, _ = build(tmp_path, finish=Finish(max_evaluations=1))
    gone = controller.pins / "ckpt-5"
    gone.mkdir(parents=True)
    (gone / "ckpt-5.index").write_bytes(b"index")  # its evaluation was cut short; deleted since
    model.save(10)
    model.name(10)
    assert controller.run(poll_fallback_secs=0.05)
    assert history(store) == [(5, "skipped"), (10, "ok")]
    assert "cut short" in store.after(-1)[0].reason and not gone.exists()


def test_a_new_run_in_the_model_dir_is_evaluated_afresh(tmp_path: Path):
    controller, model, store, _ = build(tmp_path, policy="latest")
    model.save(100)
    model.name(100)
    controller.look()
    for path in model.root.glob("ckpt-*"):
        path.unlink()
    FakeModelDir(model.root, run="run-2")  # the dir wiped and trained again: steps start low
    model.save(10)
    model.name(10)
    controller.look()
    assert controller.evaluator.calls == [100, 10]
    assert [(r.run, r.step) for r in sorted(store.after(-1), key=lambda r: r.rowid)] == \
        [("run-1", 100), ("run-2", 10)]


def test_a_long_evaluation_reports_how_far_it_is_and_broadcasts_only_its_record(tmp_path: Path, caplog):
    # The first batch pays for the restore (40 s); then 100 images per 10 s.
    batches = [(100, 40.0)] + [(100 * i, 10.0) for i in range(2, 11)]
    heard = []
    controller, model, _, _ = build(tmp_path, evaluator=FakeEvaluator(batches=batches),
                                    actions=[heard.append])

    def watch() -> tuple:
        status = controller.status  # the snapshot the service would read now
        return (status.evaluating_step, status.progress.done, status.progress.total,
                status.progress.seconds_left(), len(heard))

    controller.evaluator.watch = watch
    model.save(5)
    model.name(5)
    with caplog.at_level("INFO", logger="showtell.evaluator.loop.status"):
        controller.look()
    during = controller.evaluator.during
    assert during[0] == (5, 100, 1000, None, 0)  # one batch: no rate yet
    assert during[1] == (5, 200, 1000, 80.0, 0)  # 100 images / 10 s; 800 left
    assert during[8] == (5, 900, 1000, 10.0, 0)
    assert all(heard_then == 0 for *_, heard_then in during)  # Watch hears only the record
    status = controller.status
    assert len(heard) == 1 and heard[0].step == 5 and status.progress is None and status.evaluating_step == -1
    # Logged at most every 30 s: after the first batch (40 s in), then 30 s later, … — not at the end.
    logged = [r.getMessage() for r in caplog.records if "images done" in r.getMessage()]
    assert logged == ["evaluating step 5: 100 of 1000 images done",
                      "evaluating step 5: 400 of 1000 images done, about 60 s left",
                      "evaluating step 5: 700 of 1000 images done, about 30 s left"]


def test_the_status_is_a_snapshot_replaced_whole_by_the_controller_alone(tmp_path: Path):
    controller, model, _, _ = build(tmp_path)
    before = controller.status
    with pytest.raises(dataclasses.FrozenInstanceError):
        before.run_id = "changed"  # nobody writes into it: the service may be reading it
    model.save(10)
    model.name(10)
    controller.look()
    after = controller.status
    assert after is not before and (after.run_id, after.last_seen_step) == ("run-1", 10)
    assert (before.run_id, before.last_seen_step) == ("", -1)  # what a reader held stays as it was
