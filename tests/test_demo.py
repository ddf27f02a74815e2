"""``showtell demo`` (what ``make demo`` runs): the recipe's phases in order — pretraining the encoder,
phase 1 on its frozen features, phase 2 fine-tuning — beside the evaluator; an interrupt stops all."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
from pathlib import Path

import pytest

from tests.helpers import error_lines, run_showtell, wait_for
from tests.measure import free_ports

pytestmark = pytest.mark.e2e


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _children(log: Path) -> list[int]:
    return [int(p) for p in re.findall(r"(?:pretrain|trainer|evaluator) pid (\d+)", log.read_text())]


def test_demo_runs_the_recipe_phase_by_phase(tmp_path: Path, procs):
    log, base = tmp_path / "demo.log", tmp_path / "demo"
    demo = procs.start("demo", "--dir", str(base), "--seconds", "30", "--phases", "0.3,0.4,0.3",
                       "--train-images", "120", "--eval-examples", "8", "--port", str(free_ports()[0]),
                       log=log)
    assert demo.wait(timeout=600) == 0, log.read_text()[-4000:]
    text = log.read_text()
    assert not [pid for pid in _children(log) if _alive(pid)]
    phases = re.findall(r"\[phase\] (pretraining|phase 1 preview|phase 1|phase 2)", text)
    assert phases == ["pretraining", "phase 1 preview", "phase 1", "phase 2"], text[-3000:]
    # the preview's run is kept aside; phase 1 on the finished encoder is a new run in the model dir
    preview = json.loads((base / "model-preview" / "showtell-model.json").read_text())
    current = json.loads((base / "model" / "showtell-model.json").read_text())
    assert preview["run_id"] != current["run_id"]

    encoder = base / "encoder.weights.h5"
    record = json.loads((base / "model" / "showtell-model.json").read_text())["encoder_init"]
    assert record["sha256"] == hashlib.sha256(encoder.read_bytes()).hexdigest()
    trainer = (base / "trainer.log").read_text()
    assert "encoder frozen: pretrained encoder, phase 1" in trainer
    assert "feature cache:" in trainer and "encoder trains: --train-inception true" in trainer  # phase 2
    assert re.search(r"resumed from \S+ckpt-\d+ at step \d+", trainer)
    # a trainer that is done exits at once: its tf.data iterator is never destroyed (seconds to
    # half a minute when it is, measured beside a busy CPU: BENCHMARKS.md)
    exits = [int(s) for s in re.findall(r"\[demo\] the trainer exited 0, (\d+) s after its final checkpoint",
                                        text)]
    assert len(exits) == 3 and max(exits) <= 5, text[-3000:]
    finished = json.loads((base / "model" / "showtell-finished.json").read_text())
    evaluated = [int(s) for s in re.findall(r"\[evaluation\] step\s+(\d+)", text)]
    assert evaluated and evaluated[-1] == finished["step"], text[-3000:]  # phase 2's last checkpoint
    runs = re.findall(r"\[summary\] exact match by step, with 95 % intervals \(run (\S+)\)", text)
    assert runs[-1] == current["run_id"], text[-3000:]
    # every value with its interval; the unseen scenes (another seed) as a second evaluation set,
    # beside each evaluation and in the summary
    interval = r"\d\.\d\d \(\d\.\d\d–\d\.\d\d\)"
    assert re.search(rf"\[summary\] exact match by step.*: \d+: {interval}", text), text[-3000:]
    unseen = rf"^ +unseen scenes \(seed 1\): exact_match {interval}  loss \d+\.\d\d \("
    assert re.search(unseen, text, re.M), text[-3000:]
    summary = rf"\[summary\]   the same checkpoints on unseen scenes \(seed 1\): \d+: {interval}"
    assert re.search(summary, text), text[-3000:]
    # time to accuracy, from the training seconds each checkpoint holds
    assert re.search(r"\[summary\] exact match 0\.5 (reached after \d+:\d\d of training \(step \d+\)|"
                     rf"not reached \(best {interval} at step \d+\))", text), text[-3000:]
    assert json.loads((base / "model" / "runs" / f"{current['run_id']}.json").read_text())["revisions"]
    assert "held-out accuracy" in (base / "pretrain.log").read_text()
    # the console relays the children's progress: pretraining's reports, the trainer's steps
    assert re.search(r"\[pretrain\] pretrain step \d+ \(", text), text[-3000:]
    if re.search(r"^\S+ I \S+: step \d+/\d+ ", trainer, re.M):  # a loaded machine may not reach 50 steps
        assert re.search(r"\[train\] step \d+/\d+ .*; \d+ s left", text), text[-3000:]
    assert re.search(r"\[train\] feature cache: ", text), text[-3000:]
    assert "oneDNN" not in text and "absl" not in text  # no TensorFlow notice on the console
    # every line in the console's own form — none a raw log record ("12:00:00 I showtell.demo: …")
    assert not re.findall(r"^\d\d:\d\d:\d\d I .*", text, re.M), text[-3000:]
    assert re.search(r"^ *\d+:\d\d \[demo\] stopping the evaluator \(pid \d+\)$", text, re.M), text[-3000:]
    pictures = sorted((base / "pictures").glob("val-*.png"))
    assert len(pictures) == 6 and all(p.stat().st_size > 100 for p in pictures)
    # The two sets number their scenes from 0 alike, yet are never paired: their evaluations carry
    # different set fingerprints.  And the unseen set's references keep their words.
    from showtell.evaluator.records.store import Store
    from showtell.evaluator.scoring import bootstrap

    store = Store(base / "model-eval" / "evaluations.sqlite")
    step = finished["step"]
    [val] = store.at_step(current["run_id"], step)
    [unseen] = store.at_step(current["run_id"], step, eval_set="unseen")
    a, b = (bootstrap.ImageStats.from_bytes(store.image_stats(r)) for r in (val, unseen))
    assert sorted(a.image_ids) == sorted(b.image_ids) and a.fingerprint != b.fingerprint
    with pytest.raises(bootstrap.NotPaired, match="of different sets"):
        bootstrap.compare(a, b, bootstrap.Bootstrap(samples=10))
    assert "references_with_unknown" not in unseen.metrics and "references_with_unknown" not in val.metrics
    store.close()


def test_demo_sigint_stops_every_child_and_keeps_what_they_wrote(tmp_path: Path, procs):
    log, base = tmp_path / "demo.log", tmp_path / "demo"
    demo = procs.start("demo", "--dir", str(base), "--seconds", "600", "--train-images", "120",
                       "--port", str(free_ports()[0]), log=log)
    wait_for(lambda: len(_children(log)) == 2, 120, "the evaluator and the pretraining to start")
    children = _children(log)
    second = run_showtell("demo", "--dir", str(base), "--seconds", "10", "--port", str(free_ports()[0]))
    assert second.returncode == 1 and error_lines(second.stderr) == [
        f"showtell demo: error: --dir {base} is in use by another demo (pid {demo.pid} on host "
        f"{socket.gethostname()}); stop it first, or give this one another --dir"], second.stderr
    pretrain_log = base / "pretrain.log"  # interrupted once it has trained (its first step), not sooner
    wait_for(lambda: pretrain_log.exists() and "pretrain step 1 (" in pretrain_log.read_text(), 300,
             "pretraining's first step", interval=0.05)
    try:
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=120) == 130
        assert not [pid for pid in children if _alive(pid)]
    finally:
        for pid in children:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    # pretraining stopped early, after its steps so far, not done (exit 143, as the demo read it
    # from the process: a scheduler must not read it as finished) — and saved its encoder whole;
    # the evaluator stopped cleanly (exit 0)
    console = log.read_text()
    pretrain_pid, evaluator_pid = (int(re.search(rf"{name} pid (\d+)", console).group(1))
                                   for name in ("pretrain", "evaluator"))
    assert f"[demo] the pretrain (pid {pretrain_pid}) exited 143" in console, console[-2000:]
    assert f"[demo] the evaluator (pid {evaluator_pid}) exited 0" in console, console[-2000:]
    text = pretrain_log.read_text()
    assert "SIGTERM received: ending pretraining and saving the encoder" in text
    stopped = re.search(r"stopped after (\d+) steps by SIGTERM before finishing: exit 143 — not done", text)
    assert stopped and int(stopped.group(1)) >= 1, text[-2000:]
    from showtell.captioning.model.network import build_encoder
    from showtell.captioning.weights.encoder import load_encoder_weights

    encoder = build_encoder(75)
    loaded = load_encoder_weights(encoder, str(base / "encoder.weights.h5"))
    assert not loaded.ignored and len(loaded.loaded) == len(encoder.weights)
    assert "SIGTERM received: stopping" in (base / "evaluator.log").read_text()
