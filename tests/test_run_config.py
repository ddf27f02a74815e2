"""A run's whole configuration in its model dir (``<model-dir>/runs/<run id>.json``): every
setting as resolved, what it resolved to, the versions, devices, data and encoder — written at
the run's start; a resume with changed settings adds a revision saying what changed; the same
settings add nothing; ``--print-config`` prints it and writes nothing; an unreadable record is
moved aside, not lost.  In process (``showtell_main``): the trainer's outcome is decided inside
the command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from showtell.common.model_dir import ModelDir
from tests.helpers import TINY_MODEL, error_lines, printed_settings

pytestmark = pytest.mark.e2e


def _train(showtell_main, data: Path, model_dir: Path, *extra: str):
    result = showtell_main("train", "--data", str(data), "--model-dir", str(model_dir), *TINY_MODEL,
                           "--save-every-secs", "0", *extra)
    assert result.returncode == 0, result.stderr[-3000:] + result.logs[-3000:]
    return result


def _sections(printed: str) -> dict:
    """``--print-config``'s YAML as the record's sections: settings (by argument name), resolved."""
    found = printed_settings(printed)
    return {"settings": found["settings"], "resolved": found.get("resolved", {})}


def _comparable(settings: dict) -> dict:
    """Settings as a config file writes them: how they were given aside, lists as their flag's text."""
    return {k: ",".join(map(str, v)) if isinstance(v, list) else v for k, v in settings.items()
            if k not in ("print_config", "config")}


def _revisions(model_dir: Path) -> list[dict]:
    run = ModelDir(model_dir).read_run_id()
    return json.loads((model_dir / "runs" / f"{run}.json").read_text())["revisions"]


def test_the_run_records_its_configuration_and_each_change(tiny_data: Path, tmp_path: Path, showtell_main):
    model_dir = tmp_path / "model"
    printed = showtell_main("train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_MODEL,
                            "--save-every-secs", "0", "--steps", "2", "--deterministic-input", "--seed", "5",
                            "--print-config")
    assert printed.returncode == 0 and not model_dir.exists()  # printed, nothing written
    shown = _sections(printed.stdout)
    assert shown["settings"]["steps"] == 2 and shown["resolved"]["model"]["lstm_units"] == 32
    assert shown["resolved"]["uses_cache"] and shown["resolved"]["compute"]["steps_per_loop"] == 10

    _train(showtell_main, tiny_data, model_dir, "--steps", "2", "--deterministic-input", "--seed", "5")
    [first] = _revisions(model_dir)
    assert first["step"] == 0 and first["settings"]["batch_size"] == 4 and first["settings"]["steps"] == 2
    assert first["resolved"]["optimizer"] == {**first["resolved"]["optimizer"], "name": "adam",
                                              "learning_rate": 0.001}  # the tiny settings'
    assert first["resolved"]["global_batch"] == 4
    assert first["resolved"]["phase"].startswith("encoder frozen")
    environment = first["environment"]
    assert environment["tensorflow"] == tf.__version__ and environment["python"]
    assert len(environment["data"]["manifest_sha256"]) == 64 and len(environment["encoder_sha256"]) == 64
    for part in ("settings", "resolved"):  # what was printed is what trained
        printed_part = _comparable(shown[part])
        trained_part = _comparable(first[part])
        assert printed_part == trained_part, {k: (v, trained_part.get(k)) for k, v in printed_part.items()
                                              if trained_part.get(k) != v}

    # The run repeats from its record, runs/<id>.yaml (or the history's .json), fed back as --config
    # with another model dir: the same settings exactly; trained, the same weights after the same
    # steps — the same seed, the same batches (planted: the record without its seed fails here).
    run = ModelDir(model_dir).read_run_id()
    recorded = model_dir / "runs" / f"{run}.yaml"
    assert _comparable(_sections(recorded.read_text())["settings"]) == _comparable(first["settings"])
    assert _sections(recorded.read_text())["resolved"] == first["resolved"]
    for source in (recorded, model_dir / "runs" / f"{run}.json"):
        again = showtell_main("train", "--config", str(source), "--model-dir", str(tmp_path / "repeat"),
                              "--print-config")
        assert again.returncode == 0, again.stderr[-2000:]
        repeated = _comparable(_sections(again.stdout)["settings"])
        assert repeated == {**_comparable(first["settings"]), "model_dir": str(tmp_path / "repeat")}, source
    # The replay reads its own copy of the dataset, so it computes its own image features (a
    # feature cache shared with the original would hide an encoder that differs).
    own_data = tmp_path / "data-copy"
    shutil.copytree(tiny_data, own_data, ignore=shutil.ignore_patterns("feature-cache*"))
    repeat = showtell_main("train", "--config", str(recorded), "--model-dir", str(tmp_path / "repeat"),
                           "--data", str(own_data))
    assert repeat.returncode == 0, repeat.stderr[-3000:] + repeat.logs[-3000:]
    assert (own_data / "feature-cache").is_dir()  # built by the replay itself
    [again_first] = _revisions(tmp_path / "repeat")
    assert _comparable(again_first["settings"]) == {
        **_comparable(first["settings"]), "model_dir": str(tmp_path / "repeat"), "data": str(own_data)}
    # Bit-identical means every variable the checkpoint holds — the model, the optimizer's slots
    # and iterations, the step, the input's position — but the wall-clock seconds it trained (and
    # the object graph, which is the checkpoint's table of contents, not a value)
    trained, repeated_weights = (
        {name: tf.train.load_variable(str(d / "ckpt-2"), name)
         for name, _ in tf.train.list_variables(str(d / "ckpt-2"))
         if "train_seconds" not in name and name != "_CHECKPOINTABLE_OBJECT_GRAPH"}
        for d in (model_dir, tmp_path / "repeat"))
    assert trained.keys() == repeated_weights.keys()
    assert any(k.startswith("optimizer/") for k in trained) and any(k.startswith("model/") for k in trained)
    assert [k for k in trained if not np.array_equal(trained[k], repeated_weights[k])] == []

    _train(showtell_main, tiny_data, model_dir, "--steps", "2", "--deterministic-input", "--seed", "5")
    assert len(_revisions(model_dir)) == 1
    resumed = _train(showtell_main, tiny_data, model_dir, "--steps", "4", "--learning-rate", "0.5",
                     "--deterministic-input", "--seed", "5")
    revisions = _revisions(model_dir)
    assert len(revisions) == 2 and revisions[1]["step"] == 2
    assert revisions[1]["changed"] == ["--learning-rate: 0.001 → 0.5", "--steps: 2 → 4"]
    assert "resumed with changed settings, recorded in runs: --learning-rate: 0.001 → 0.5; --steps: 2 → 4" \
        in resumed.logs
    # A run of two revisions is not repeated by either one's settings from step 0: refused in one
    # line naming the revision, from its record and from its YAML (written at the second start)
    run = ModelDir(model_dir).read_run_id()
    for source in (model_dir / "runs" / f"{run}.json", model_dir / "runs" / f"{run}.yaml"):
        refused = showtell_main("train", "--config", str(source), "--model-dir", str(tmp_path / "r2"))
        assert refused.returncode == 2 and not (tmp_path / "r2").exists()
        assert error_lines(refused.stderr) == [
            f"showtell train: error: --config {source}: run {run} has 2 revisions — revision 2 changed "
            "--learning-rate: 0.001 → 0.5; --steps: 2 → 4 at step 2 — and one revision's settings from "
            f"step 0 would not repeat it; repeat its first revision (showtell runs show {run}) and resume "
            "with each later one's settings at its step (see --help)"]


def test_an_unreadable_record_is_moved_aside_and_started_again(tiny_data: Path, tmp_path: Path,
                                                              showtell_main):
    model_dir = tmp_path / "model"
    _train(showtell_main, tiny_data, model_dir, "--steps", "1")
    record = model_dir / "runs" / f"{ModelDir(model_dir).read_run_id()}.json"
    record.write_text("{ half a reco")
    resumed = _train(showtell_main, tiny_data, model_dir, "--steps", "2")
    [aside] = list(record.parent.glob("*.unreadable-*"))
    assert aside.read_text() == "{ half a reco"  # kept as it was
    assert f"{record}: unreadable" in resumed.logs and len(_revisions(model_dir)) == 1


def test_showtell_runs_lists_shows_and_diffs_runs(tiny_data: Path, tmp_path: Path, showtell_main):
    from showtell.evaluator.records.record import Record
    from showtell.evaluator.records.store import Store

    a, b = tmp_path / "a", tmp_path / "b"
    _train(showtell_main, tiny_data, a, "--steps", "2")
    _train(showtell_main, tiny_data, b, "--steps", "1", "--learning-rate", "0.5")
    run_a, run_b = ModelDir(a).read_run_id(), ModelDir(b).read_run_id()
    history = tmp_path / "work" / "evaluations.sqlite"  # what an evaluator of run a recorded
    store = Store(history)
    for step, exact, seconds in ((1, 0.3, 12.0), (2, 0.6, 75.0)):
        store.add(Record(step, str(a / f"ckpt-{step}"), 0.0, 0.0, 1.0, 8, metrics={"exact_match": exact},
                         run=run_a, train_seconds=seconds))
    store.close()

    listed = showtell_main("runs", str(a), str(b), "--history", str(history), "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["run_id"]: r for r in map(json.loads, listed.stdout.splitlines())}
    assert rows[run_a]["status"] == "finished (step 2 reached)" and rows[run_a]["step"] == 2
    assert (rows[run_a]["best"], rows[run_a]["best_step"]) == (0.6, 2)
    assert (rows[run_a]["target_seconds"], rows[run_a]["target_step"]) == (75.0, 2)  # 0.5 first met at 2
    assert rows[run_b]["best"] is None and rows[run_b]["status"] == "finished (step 1 reached)"
    shown = showtell_main("runs", str(a), "--history", str(history))
    assert "1:15 (step 2)" in shown.stdout and "0.6000 (step 2)" in shown.stdout

    record = json.loads(showtell_main("runs", "show", run_b, str(a), str(b)).stdout)
    assert record["revisions"][0]["settings"]["learning_rate"] == 0.5 and record["ends"][-1]["step"] == 1
    differ = showtell_main("runs", "diff", run_a, run_b, str(a), str(b))
    assert differ.stdout.splitlines() == ["--learning-rate: 0.001 → 0.5", f"--model-dir: {a} → {b}",
                                          "--steps: 2 → 1"]
    missing = showtell_main("runs", "show", "nope", str(a))
    assert missing.returncode == 2  # a usage error, as a bad flag
    assert missing.stderr.strip() == \
        f"showtell runs: error: run nope: not recorded in {a} (showtell runs DIR lists them)"
