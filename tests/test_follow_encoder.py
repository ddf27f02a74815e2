"""``showtell train --follow-encoder``: a trainer started beside a pretraining that is still writing
its encoder (the compose stack's), waiting for the file, then starting again on each newer one."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from showtell.captioning.config import pretrain_state
from showtell.common.locks import LOCK_FILE
from showtell.common.model_dir import ModelDir
from showtell.trainer.following import follow
from showtell.trainer.loop.signals import StopRequest
from tests import weights_files
from tests.fakes import FakeClock
from tests.helpers import TINY_SIZES, Procs, wait_for
from tests.measure import cpu_seconds


def _record(model_dir: Path, sha256: str) -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / ModelDir.METADATA).write_text(json.dumps({"run_id": "r1", "model": {}, "data": {},
                                                  "encoder_init": {"kind": "keras", "sha256": sha256}}))


def test_a_run_on_other_bytes_is_set_aside_whole_and_the_lock_stays(tmp_path: Path):
    encoder = tmp_path / "encoder.weights.h5"
    encoder.write_bytes(b"the final encoder")
    model = tmp_path / "model"
    _record(model, follow._sha256(encoder))
    (model / "checkpoint").write_text("model_checkpoint_path: 'ckpt-4'")
    assert follow.set_aside_other_encoders_run(ModelDir(model), encoder) is None  # its own encoder: kept
    assert (model / "checkpoint").exists()

    _record(model, "the sha256 of a first encoder")
    for name in ("ckpt-4.index", "ckpt-4.data-00000-of-00001", LOCK_FILE.format(role="trainer")):
        (model / name).write_text(name)
    (model / "runs").mkdir()
    (model / "runs" / "r1.json").write_text("{}")
    (tmp_path / "model-preview").mkdir()  # an older preview: replaced
    (tmp_path / "model-preview" / "stale").write_text("")
    aside = follow.set_aside_other_encoders_run(ModelDir(model), encoder)
    assert aside == tmp_path / "model-preview"
    assert sorted(p.name for p in aside.iterdir()) == sorted(
        ["checkpoint", "ckpt-4.index", "ckpt-4.data-00000-of-00001", ModelDir.METADATA, "runs"])
    assert [p.name for p in model.iterdir()] == [LOCK_FILE.format(role="trainer")]  # the holder's lock
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no half-moved directory


def test_the_watch_stops_the_run_on_new_bytes_and_not_on_a_touch(tmp_path: Path):
    encoder = tmp_path / "encoder.weights.h5"
    encoder.write_bytes(b"a first encoder")
    clock, stop = FakeClock(), StopRequest()
    watch = follow.EncoderWatch(encoder, stop, every_secs=10, clock=clock)
    os.utime(encoder, ns=(1, 1))  # rewritten with the same bytes (a copy tool): not a new encoder
    clock.now += 10
    watch(5)
    assert not stop
    replacement = tmp_path / ".encoder.tmp"
    replacement.write_bytes(b"the final encoder")
    os.replace(replacement, encoder)  # as `showtell pretrain` writes it
    clock.now += 5
    watch(6)
    assert not stop  # not due yet: a stat every 10 s, not every chunk
    clock.now += 5
    watch(7)
    assert stop and stop.reason == follow.ENCODER_REPLACED and not stop.final


def test_the_wait_for_the_final_encoder_sees_one_that_landed_before_it_began(tmp_path: Path):
    """The race a compose stack lost on a loaded machine: the final encoder replaced the first while
    the preview saved its last checkpoint, before the wait began."""
    encoder = tmp_path / "encoder.weights.h5"
    encoder.write_bytes(b"a first encoder")
    started_from = follow._sha256(encoder)
    stop = StopRequest()
    assert stop.wait(0) is False  # the wait below polls with stop.wait; not stopped yet
    replacement = tmp_path / ".encoder.tmp"
    replacement.write_bytes(b"the final encoder")
    os.replace(replacement, encoder)
    began = time.monotonic()
    timer = threading.Timer(3, stop.request, ("the test gave up",))  # a wait that misses it ends
    timer.start()
    try:
        assert follow.wait_for_newer(encoder, started_from, stop, poll=0.05)
    finally:
        timer.cancel()
    assert not stop and time.monotonic() - began < 1
    # the same bytes as it started from: it waits until stopped (no new encoder made up)
    stop.request("test")
    assert follow.wait_for_newer(encoder, follow._sha256(encoder), stop, poll=0.05) is False


def _first_encoder(encoder: Path, step: int = 40, sha256: str | None = None) -> None:
    """What ``showtell pretrain --first-save-after`` says of the file it wrote and goes on from."""
    state = pretrain_state(encoder)
    state.mkdir(exist_ok=True)
    record = {"step": step, "final": False, "sha256": sha256 or follow._sha256(encoder)}
    (state / "progress.json").write_text(json.dumps({"encoder": record}))


def _call_final(encoder: Path) -> None:
    """What a pretraining whose last step was its first encoder's leaves: the same bytes, their
    record now final."""
    record = json.loads((pretrain_state(encoder) / "progress.json").read_text())
    record["encoder"]["final"] = True
    (pretrain_state(encoder) / "progress.json").write_text(json.dumps(record))


def test_on_a_first_encoder_the_run_is_a_preview_and_on_a_final_one_it_is_not(tmp_path: Path):
    encoder = tmp_path / "encoder.weights.h5"
    encoder.write_bytes(b"a first encoder")
    _first_encoder(encoder)
    for final, expected in ((False, follow.PREVIEW_DONE), (True, None)):
        if final:  # the record of the same bytes, now final
            _call_final(encoder)
        clock, stop = FakeClock(), StopRequest()
        watch = follow.EncoderWatch(encoder, stop, preview_secs=60, every_secs=10, clock=clock)
        clock.now += 30  # building, the feature cache: not training time
        watch(10)
        clock.now += 59
        watch(100)
        assert not stop
        clock.now += 1
        watch(110)
        assert stop.reason == expected, final
    # a record of other bytes (the file replaced since): not a preview
    encoder.write_bytes(b"other bytes")
    stop = StopRequest()
    watch = follow.EncoderWatch(encoder, stop, preview_secs=1, clock=FakeClock())
    assert watch.preview_secs is None



def test_the_same_bytes_called_final_end_the_preview_and_the_wait(tmp_path: Path):
    """The CI stack whose pretraining's first step outlasted its --seconds: the final encoder was
    the first one's bytes, only its record changed — and the trainer waited for newer bytes for
    ever.  A preview that ends on bytes now called final goes on; a wait ends when they are."""
    encoder = tmp_path / "encoder.weights.h5"
    encoder.write_bytes(b"a first encoder")
    _first_encoder(encoder)
    clock, stop = FakeClock(), StopRequest()
    watch = follow.EncoderWatch(encoder, stop, preview_secs=60, every_secs=10, clock=clock)
    assert watch.preview_secs == 60
    watch(10)
    _call_final(encoder)  # during the preview
    clock.now += 60
    watch(100)
    assert not stop and watch.preview_secs is None  # not a preview any more: the run goes on
    clock.now += 600
    watch(200)
    assert not stop

    _first_encoder(encoder)  # the wait after a preview, then the record turns final
    stop = StopRequest()
    flipped = threading.Timer(0.5, _call_final, (encoder,))
    gave_up = threading.Timer(5, stop.request, ("the test gave up",))
    began = time.monotonic()
    flipped.start(), gave_up.start()
    try:
        assert follow.wait_for_newer(encoder, follow._sha256(encoder), stop, poll=0.05)
    finally:
        flipped.cancel(), gave_up.cancel()
    assert not stop and 0.5 <= time.monotonic() - began < 3  # not before the record said so


@pytest.mark.e2e
def test_a_trainer_waits_for_the_encoder_then_starts_again_on_a_newer_one(tiny_data: Path, tmp_path: Path,
                                                                         procs: Procs):
    """The compose stack's sequence: no encoder yet (the trainer waits), a first one (a preview of
    --preview-secs, then a wait, asleep), the final one (a new run, the preview's kept aside) — in
    one process: the restart is an exec."""
    encoder, model, log = tmp_path / "encoder.weights.h5", tmp_path / "model", tmp_path / "trainer.log"
    trainer = procs.start("train", "--data", str(tiny_data), "--model-dir", str(model), *TINY_SIZES,
                          "--inception-weights", str(encoder), "--follow-encoder", "true",
                          "--preview-secs", "3",
                          "--first-save-secs", "1", "--save-every-secs", "600", "--log-every-steps", "200",
                          "--cache-dir", str(tmp_path / "cache"), log=log)
    wait_for(lambda: "waiting for the encoder" in log.read_text(), 60, "the trainer waiting for its encoder")
    assert not model.exists() or not any(model.glob("ckpt-*"))

    def publish(seed: int, first: bool = False) -> str:
        """A new encoder in place by rename, as `showtell pretrain` writes it; a first one with the
        pretraining's record of it (written before, here: the trainer must not see it unrecorded)."""
        staged = weights_files.save_keras3(weights_files.random_encoder(75, seed=seed),
                                           tmp_path / f".staged-{seed}.weights.h5")
        if first:
            _first_encoder(encoder, sha256=follow._sha256(staged))
        os.replace(staged, encoder)
        return follow._sha256(encoder)

    def run_on(model_dir: Path) -> dict:
        try:
            return json.loads((model_dir / ModelDir.METADATA).read_text())["encoder_init"]
        except (OSError, ValueError, KeyError):
            return {}

    first = publish(1, first=True)
    wait_for(lambda: "waiting, asleep, for the pretraining's final encoder" in log.read_text(), 180,
             "the preview on the first encoder to end")
    assert run_on(model)["sha256"] == first and any(model.glob("ckpt-*.index"))
    before = cpu_seconds(trainer.pid)  # asleep while it waits: its CPU over 5 s
    time.sleep(5)
    assert cpu_seconds(trainer.pid) - before <= 0.1, "the waiting trainer is not asleep"
    final = publish(2)
    wait_for(lambda: run_on(tmp_path / "model-preview").get("sha256") == first
             and run_on(model).get("sha256") == final and any(model.glob("ckpt-*.index")), 240,
             "the first run kept aside and a new run checkpointed on the final encoder")
    assert trainer.poll() is None  # the same process (exec), still training
    text = log.read_text()
    assert "a preview of 3 s, then a wait for the final one" in text and "kept aside in" in text
    assert "starting again on the final encoder" in text
    trainer.send_signal(signal.SIGTERM)
    assert trainer.wait(120) == 143
