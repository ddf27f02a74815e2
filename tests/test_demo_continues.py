"""A second ``make demo`` in the same dir improves on the first: it says what the last one reached,
keeps that run aside (phase 1 trains a new run on the better encoder), and its pretraining goes on
from where the last one ended.  In process: the demo's decisions and the command it starts (the
pretraining's resume itself: tests/test_pretrain.py)."""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

from showtell.captioning.config import pretrain_state
from showtell.evaluator.records.record import Record
from showtell.evaluator.records.store import Store
from showtell.evaluator.records.workdir import WorkDir


class _Started:
    """The children the demo would start (the processes themselves: tests/test_demo.py)."""

    def __init__(self) -> None:
        self.commands: dict[str, list[str]] = {}
        self.running: dict = {}

    def start(self, name: str, args: list[str], log_path: Path, relay: dict | None = None):
        self.commands[name] = args


@contextlib.contextmanager
def _demo(base: Path):
    """The demo's object, its console's heartbeat stopped after (a thread that would otherwise
    print into later tests' output in this process)."""
    from showtell.commands import demo

    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    made = demo.Demo(parser.parse_args(["--dir", str(base), "--seconds", "600"]))
    made.children = _Started()
    try:
        yield made
    finally:
        made.console.close()
        made.console._heartbeat.join(timeout=5)
        assert not made.console._heartbeat.is_alive()


def test_a_second_demo_goes_on_from_the_first(tmp_path: Path, capsys):
    base = tmp_path / "demo"
    (base / "model").mkdir(parents=True)
    (base / "model" / "showtell-model.json").write_text(json.dumps({"run_id": "run-one"}))
    store = Store(WorkDir.beside(str(base / "model")).history)
    for step, exact in ((100, 0.31), (300, 0.42), (400, 0.40)):
        store.add(Record(step, f"m/ckpt-{step}", 0.0, 0.0, 1.0, 8, metrics={"exact_match": exact},
                         run="run-one"))
    store.close()
    encoder = base / "encoder.weights.h5"
    encoder.write_bytes(b"weights")
    state = pretrain_state(encoder)
    state.mkdir()
    heads = {f"shape{i}_{attr}": value for i in (1, 2, 3)
             for attr, value in (("colour", 0.5), ("kind", 0.75), ("size", 0.9))}
    (state / "progress.json").write_text(json.dumps({"step": 779, "accuracy": {"layout": 1.0, **heads}}))

    with _demo(base) as demo:
        demo.earlier()
        demo.start_pretraining()
    said = capsys.readouterr().out
    assert "[demo] the last demo's run run-one reached exact match 0.42 (step 300); it is kept in " \
           f"{base / 'model-previous'}" in said, said
    assert not (base / "model").exists() and (base / "model-previous" / "showtell-model.json").exists()
    assert "going on from step 779 (held-out accuracy then: colour 0.50, kind 0.75, size 0.90)" in said
    command = demo.children.commands["pretrain"]
    assert command[:5] == ["pretrain", "--data", str(base / "data"), "--out", str(encoder)]
    assert "--fresh" not in command and demo.preview > 0  # phase 1 on the encoder so far, meanwhile


def test_an_encoder_of_ones_own_is_kept_as_it_is(tmp_path: Path, capsys):
    base = tmp_path / "demo"
    base.mkdir()
    (base / "encoder.weights.h5").write_bytes(b"weights")  # no pretraining state beside it
    with _demo(base) as demo:
        demo.earlier()  # no earlier run: nothing to say
        demo.start_pretraining()
    assert "pretrained encoder: " in capsys.readouterr().out and not demo.children.commands
