"""``showtell train`` as a real process: schedule, --keep, SIGTERM, resume, summaries."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
import tensorflow as tf

from tests.helpers import TINY_MODEL, copy_model, error_lines, run_showtell, wait_for

pytestmark = pytest.mark.e2e


def _state(model_dir: Path) -> tuple[str, list[str]]:
    state = tf.train.get_checkpoint_state(str(model_dir))
    return Path(state.model_checkpoint_path).name, [Path(p).name for p in state.all_model_checkpoint_paths]


def _var(checkpoint: Path, prefix: str) -> int:
    names = [n for n, _ in tf.train.list_variables(str(checkpoint)) if n.startswith(prefix)]
    assert names, f"no variable {prefix}… in {checkpoint}"
    return int(tf.train.load_variable(str(checkpoint), names[0]))


def _summary_tags(model_dir: Path) -> set[str]:
    tags = set()
    for events in (model_dir / "train").glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            tags.update(v.tag for v in event.summary.value)
    return tags


def test_schedule_keep_sigterm_and_resume(tiny_data: Path, tmp_path: Path, procs, showtell_main):
    """The SIGTERM'd run is a real process (the signal is under test); the runs around it are
    decided inside the command and run in this process."""
    model_dir = tmp_path / "model"
    common = ["train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_MODEL,
              "--save-every-secs", "0", "--log-every-steps", "1", "--histogram-every-steps", "3"]

    # 1. scheduled checkpoints every 2 steps, only the newest 2 kept
    # One step per call: the input wait is timed (--steps-per-loop auto runs 10 on the cache).
    first = showtell_main(*common, "--steps", "6", "--save-every-steps", "2", "--keep", "2",
                          "--steps-per-loop", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    latest, kept = _state(model_dir)
    assert (latest, kept) == ("ckpt-6", ["ckpt-4", "ckpt-6"])
    assert not list(model_dir.glob("ckpt-2.*"))  # --keep deleted the oldest
    assert (model_dir / "ckpt-4.index").is_file() and (model_dir / "ckpt-6.index").is_file()
    assert _var(model_dir / "ckpt-6", "step/") == 6
    assert {"loss", "learning_rate", "examples_per_sec", "input_wait_fraction"} <= _summary_tags(model_dir)
    assert any(t.startswith("lstm/") for t in _summary_tags(model_dir))  # weight histograms

    # 2. a long run stopped by SIGTERM writes a final checkpoint and exits 143: saved, not finished
    log = tmp_path / "run2.log"
    proc = procs.start(*common, "--steps", "100000", "--save-every-steps", "1000", log=log)
    wait_for(lambda: re.search(r"step (9|\d\d+)/100000", log.read_text()), 240, "step 9 in the log")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 143, log.read_text()[-3000:]
    assert re.search(r"stopped at step \d+ \(from 6\) by SIGTERM before finishing: exit 143", log.read_text())
    text = log.read_text()
    assert "resumed from" in text and "at step 6" in text
    assert "SIGTERM received" in text
    final_line = re.search(r"final checkpoint \S+ckpt-(\d+) \(step \d+\) after SIGTERM", text)
    stopped = int(final_line.group(1))
    assert stopped >= 9
    assert _state(model_dir)[0] == f"ckpt-{stopped}"
    assert _var(model_dir / f"ckpt-{stopped}", "step/") == stopped

    # 3. restarting resumes at the next step: the global step continues, nothing repeats
    third = showtell_main(*common, "--steps", str(stopped + 3))
    assert third.returncode == 0, third.stderr[-3000:]
    assert f"at step {stopped}" in third.logs
    logged = [int(s) for s in re.findall(r"step (\d+)/", third.logs)]
    assert logged and min(logged) > stopped and max(logged) == stopped + 3
    final = model_dir / f"ckpt-{stopped + 3}"
    assert _var(final, "step/") == stopped + 3
    assert _var(final, "optimizer/_iterations") == stopped + 3  # optimizer state resumed too


def _snapshot(directory: Path) -> dict[str, bytes]:
    """Every file's bytes — but the lock file, which names whichever trainer last held the dir."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != ".showtell-trainer.lock")
    return {str(p.relative_to(directory)): p.read_bytes() for p in files}


def test_mismatches_fail_in_one_line_and_touch_nothing(tiny_data: Path, tiny_model: Path, tmp_path: Path,
                                                        showtell_main):
    from showtell.captioning.config import SyntheticConfig
    from showtell.captioning.data import synthetic

    model_dir = copy_model(tiny_model, tmp_path / "model")
    base = ["train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_MODEL,
            "--save-every-secs", "0"]
    before = _snapshot(model_dir)

    other = tmp_path / "other-data"  # two images see fewer words: a smaller vocabulary
    synthetic.build(other, SyntheticConfig(train_images=2, val_images=2, seed=5, train_shards=1))
    other_vocab = len((other / "vocab.txt").read_text().splitlines())
    this_vocab = len((tiny_data / "vocab.txt").read_text().splitlines())
    assert other_vocab != this_vocab

    # In a real process, as a user meets it: one line on stderr, nothing else (TensorFlow's
    # start-up notices aside), and the model dir untouched.
    result = run_showtell(*base, "--steps", "8", "--data", str(other))
    lines = error_lines(result.stderr)
    assert result.returncode == 1 and len(lines) == 1, result.stderr[-2000:]
    # Another vocabulary (here also of another size) is refused by its words, before any shape
    # check: the line names the vocabulary file to build the data in, or a new model dir.
    assert re.search(rf"--data {other}: not in the vocabulary {model_dir} was trained with \(id \d+ is .*\); "
                     rf"build the data in it \(.*--vocab {model_dir}/vocab.txt\) or use a new --model-dir",
                     lines[0]), lines[0]
    assert _snapshot(model_dir) == before

    # The rest in this process: the message and the untouched dir are what is under test.
    cases = [
        (["--lstm-units", "16"], r"with lstm_units 32, this one has lstm_units 16"),
        # trained with adam (TINY_MODEL): its slots do not fit SGD
        (["--optimizer", "sgd"], rf"^showtell train: error: {model_dir} was trained with --optimizer adam, "
                                 r"this run has --optimizer sgd; resume with --optimizer adam, or use a new "
                                 r"--model-dir$"),
        (["--image-size", "99"], r"--image-size 99: the images in .* are 75 px"),
        (["--batch-size", "0"], r"argument --batch-size: must be ≥ 1 \(got 0\)"),
        (["--image-size", "60"], r"argument --image-size: must be ≥ 75"),
        (["--optimizer", "rmsprop"], r"argument --optimizer: invalid choice"),
        (["--save-every-secs", "-1"], r"argument --save-every-secs: must be ≥ 0 \(got -1\)"),
        (["--lstm-dropout", "1.5"], r"argument --lstm-dropout: must be in \[0, 1\) \(got 1.5\)"),
        (["--seed", "x"], r"argument --seed: invalid int value: 'x'"),
        (["--augment", "maybe"], r"argument --augment: expected true or false \(got maybe\)"),
        (["--data", str(tmp_path / "missing")], r"missing: data directory does not exist"),
    ]
    for extra, pattern in cases:
        result = showtell_main(*base, "--steps", "8", *extra)
        lines = error_lines(result.stderr)
        assert result.returncode != 0, (extra, result.stderr[-2000:])
        assert len(lines) == 1, (extra, lines)
        assert re.search(pattern, lines[0]), (extra, lines[0])
        assert _snapshot(model_dir) == before, extra


def test_corrupt_checkpoint_is_named_and_left_alone(tiny_data: Path, tiny_model: Path, tmp_path: Path,
                                                    showtell_main):
    model_dir = copy_model(tiny_model, tmp_path / "model")
    data_file = next(model_dir.glob("ckpt-4.data-*"))
    data_file.write_bytes(data_file.read_bytes()[:1000])
    before = _snapshot(model_dir)
    result = showtell_main("train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_MODEL,
                           "--save-every-secs", "0", "--steps", "6")
    lines = error_lines(result.stderr)
    assert result.returncode == 1
    assert len(lines) == 1 and re.search(r"ckpt-4: cannot restore .*move that checkpoint aside", lines[0])
    assert _snapshot(model_dir) == before


def test_a_notebook_trains_an_experiment_and_max_seconds_ends_it_finished(tiny_data: Path, tmp_path: Path):
    """``showtell.trainer.run(experiment)`` from Python, no argparse anywhere: a typed experiment
    trains, records its run, and --max-seconds is the run's own end (0, unlike a signal) — the
    finished marker names the final checkpoint and why, what --exit-when-trained waits for."""
    import argparse
    from unittest import mock

    from showtell.captioning.config import InputConfig, ModelConfig
    from showtell.trainer import TrainExperiment, run
    from showtell.trainer.config import OptimizerConfig, TrainConfig
    from showtell.trainer.experiment import Source

    model_dir = tmp_path / "model"
    experiment = TrainExperiment(
        source=Source(data=tiny_data, model_dir=model_dir, train_inception=False),
        model=ModelConfig(embedding_size=32, lstm_units=32),
        input=InputConfig(batch_size=4, shuffle_buffer=64),
        optimizer=OptimizerConfig(name="adam", learning_rate=0.001),
        train=TrainConfig(steps=1000000, max_seconds=10, save_every_secs=None))
    with mock.patch.object(argparse.ArgumentParser, "parse_args", side_effect=AssertionError("argparse")):
        assert run(experiment) == 0
    record = json.loads(next((model_dir / "runs").glob("*.json")).read_text())
    assert record["revisions"][0]["settings"]["lstm_units"] == 32  # the record, read from the experiment
    finished = json.loads((model_dir / "showtell-finished.json").read_text())
    newest = tf.train.latest_checkpoint(str(model_dir))
    assert finished["checkpoint"] == Path(newest).name and 0 < finished["step"] < 1000000
    assert finished["reason"] == "the 10 s time limit", finished


def test_im2txt_rate_is_halved_every_8_epochs():
    """The default schedule (im2txt's): SGD 2.0, × 0.5 at every 8 epochs, staircase."""
    from showtell.trainer.config import OptimizerConfig
    from showtell.trainer.step.optimizer import build_optimizer, current_learning_rate

    config = OptimizerConfig()
    optimizer = build_optimizer(config, steps_per_epoch=10)  # 8 epochs = 80 steps
    assert type(optimizer).__name__ == "SGD" and config.describe_rate() == "2 × 0.5 every 8 epochs"
    rates = {}
    for step in (0, 79, 80, 159, 160, 800):
        optimizer.iterations.assign(step)
        rates[step] = current_learning_rate(optimizer)
    assert rates == {0: 2.0, 79: 2.0, 80: 1.0, 159: 1.0, 160: 0.5, 800: pytest.approx(2.0 * 0.5 ** 10)}
