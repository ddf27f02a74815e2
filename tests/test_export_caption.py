"""``showtell evaluate --export-best`` and ``showtell caption``: only a better evaluation adds an
export version, in the layout TensorFlow Serving reads (``export/best/<step>/``, the newest
serves, the last ``--export-keep`` stay); gRPC names it; the SavedModel, loaded outside the
process that wrote it, captions exactly like the checkpoint it came from; an export killed midway
leaves no version behind; a non-image file is one error line and the rest are captioned."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

from showtell.captioning.data.dataset import shard_files
from showtell.captioning.data.records import parse_example
from showtell.v1 import metrics_pb2 as pb
from tests.helpers import (
    copy_model,
    error_lines,
    metrics_stub,
    start_evaluator,
    train_more,
    wait_for,
)

pytestmark = pytest.mark.e2e


def _images(data: Path, out: Path, count: int = 3) -> list[Path]:
    paths, seen = [], set()
    for serialized in tf.data.TFRecordDataset(shard_files(data, "val")):
        record = parse_example(serialized)
        image_id = int(record["image_id"])
        if image_id not in seen and len(paths) < count:
            seen.add(image_id)
            paths.append(out / f"image{image_id}.png")
            paths[-1].write_bytes(record["image_data"].numpy())
    return paths


def _captions(showtell_main, *args: str) -> list[dict]:
    result = showtell_main("caption", "--json", "--beam-size", "3", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_best_export_and_caption(tiny_data: Path, tiny_model: Path, tmp_path: Path, procs, showtell_main):
    model_dir, work = copy_model(tiny_model, tmp_path / "model"), tmp_path / "eval"
    train_more(tiny_data, model_dir, 6, "--save-every-steps", "2", "--keep", "10")  # ckpt-2, 4, 6
    log = tmp_path / "eval.log"
    _, port = start_evaluator(procs, model_dir, tiny_data, work, log, "--policy", "all",
                              "--max-eval-examples", "4", "--export-best", "loss:max",
                              "--export-keep", "2", "--eval-set", f"again={tiny_data}:2")
    channel, stub = metrics_stub(port)
    with channel:
        wait_for(lambda: stub.GetStatus(pb.GetStatusRequest(), timeout=10).status.evaluations >= 3, 300,
                 "three evaluations")
        records = stub.ListEvaluations(pb.ListEvaluationsRequest(), timeout=10).evaluations
        status = stub.GetStatus(pb.GetStatusRequest(), timeout=10).status
        best = stub.GetBest(pb.GetBestRequest(metric="loss", mode=pb.GetBestRequest.MODE_MAX),
                            timeout=10).evaluation
        again = stub.ListEvaluations(pb.ListEvaluationsRequest(eval_set="again"), timeout=10).evaluations

    # Exports happen exactly at strict improvements of the metric (here: a larger loss).
    expected, top = [], None
    for record in records:
        if top is None or record.metrics["loss"] > top:
            expected.append(record.global_step)
            top = record.metrics["loss"]
    exported = [int(s) for s in re.findall(r"exported step (\d+) \(loss \S+\) to \S+/export/best/",
                                           log.read_text())]
    assert exported == expected and len(records) == 3
    # the second evaluation set keeps its own best export, by its own loss
    expected_again, top = [], None
    for record in again:
        if top is None or record.metrics["loss"] > top:
            expected_again.append(record.global_step)
            top = record.metrics["loss"]
    assert [int(s) for s in re.findall(r"exported step (\d+) \(loss \S+\) to \S+/export/best-again/",
                                       log.read_text())] == expected_again
    assert sorted(os.listdir(work / "export" / "best-again")) == sorted(str(s) for s in expected_again[-2:])
    base = work / "export" / "best"
    # TensorFlow Serving's layout: numeric version directories only, each a complete SavedModel;
    # the last two (--export-keep 2) of the exports stay, and the largest number serves.
    assert sorted(os.listdir(base)) == sorted(str(step) for step in expected[-2:])
    for step in expected[-2:]:
        assert (base / str(step) / "saved_model.pb").is_file()
        assert (base / str(step) / "variables" / "variables.index").is_file()
    newest = base / str(expected[-1])
    info = json.loads((newest / "showtell-export.json").read_text())
    assert info["step"] == expected[-1] == best.global_step and info["metric"] == "loss"
    assert info["checkpoint"].endswith(f"ckpt-{expected[-1]}")
    assert best.export_path == str(newest)
    exported = status.best_export
    assert (exported.metric, exported.maximize, exported.step, exported.path) == \
        ("loss", True, expected[-1], str(newest))
    assert exported.value == pytest.approx(info["value"])
    assert not list((work / "export").glob(".*"))  # no temporary or old copies left

    # The export, loaded here (not in the evaluator that wrote it), captions exactly like its checkpoint.
    images = _images(tiny_data, tmp_path)
    serve = tf.saved_model.load(str(newest)).signatures["serving_default"]  # what a server runs
    served = serve(images=tf.constant([images[0].read_bytes()]))
    assert served["captions"].numpy().shape == (1, 3) and served["scores"].numpy().shape == (1, 3)
    from_export = _captions(showtell_main, "--saved-model", str(base), *map(str, images))  # the newest
    from_checkpoint = _captions(showtell_main, "--model-dir", str(model_dir),
                                "--checkpoint", info["checkpoint"], *map(str, images))
    assert [c["image"] for c in from_export] == [str(p) for p in images]
    assert from_export[0]["captions"][0]["caption"] == served["captions"][0, 0].numpy().decode()
    for a, b in zip(from_export, from_checkpoint, strict=True):
        assert [c["caption"] for c in a["captions"]] == [c["caption"] for c in b["captions"]]
        for x, y in zip(a["captions"], b["captions"], strict=True):
            assert x["log_prob"] == pytest.approx(y["log_prob"], abs=1e-4)
    assert len(from_export[0]["captions"]) == 3

    # A file that is not an image: one line for it, the others still captioned, exit 1.
    bogus = tmp_path / "notes.png"
    bogus.write_text("not a picture")
    mixed = showtell_main("caption", "--saved-model", str(work / "export" / "best"), str(images[0]),
                          str(bogus), str(images[1]))
    assert mixed.returncode == 1
    assert [line for line in error_lines(mixed.stderr) if "error" in line] == \
        [f"showtell caption: error: {bogus}: not an image (JPEG, PNG, GIF or BMP expected)"]
    lines = mixed.stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == [str(images[0]), str(images[1])]
    assert lines[0].split("\t")[1] == from_export[0]["captions"][0]["caption"]


# Exports versions 1, 2, 3, … of one model, each "better" than the last, keeping two: the
# evaluator's own export code, in a process the test can kill at any moment.
_EXPORT_FOREVER = """
import itertools, sys
from pathlib import Path
from showtell.captioning.config import ModelConfig
from showtell.captioning.data.vocab import Vocabulary
from showtell.captioning.model.network import build_model
from showtell.evaluator.records.best_export import BestExport
from showtell.evaluator.records.record import Record

data, base = Path(sys.argv[1]), Path(sys.argv[2])
vocab = Vocabulary.load(data / "vocab.txt")
config = ModelConfig(vocab_size=len(vocab.words), image_size=75, embedding_size=16, lstm_units=16)
model = build_model(config)
exporter = BestExport("loss", True, base, keep=2)
for step in itertools.count(1):
    record = Record(step, f"ckpt-{step}", 0.0, 0.0, 0.0, 1, metrics={"loss": float(step)})
    exporter.consider(record, model, vocab)
"""


def test_an_export_killed_midway_leaves_no_version_behind(tiny_data: Path, tmp_path: Path):
    base = tmp_path / "export" / "best"
    proc = subprocess.Popen([sys.executable, "-c", _EXPORT_FOREVER, str(tiny_data), str(base)],
                            stdout=subprocess.DEVNULL, stderr=(tmp_path / "export.log").open("w"))
    try:
        # Kill it while a third export is being written: two versions exist, a temporary one grows.
        # Frozen first (SIGSTOP), then looked at again: killed only with the temporary still there.
        def frozen_midway() -> bool:
            if proc.poll() is not None:
                return True
            if not ((base / "2").is_dir() and any(base.glob(".*.tmp-*"))):
                return False
            os.kill(proc.pid, signal.SIGSTOP)
            wait_for(lambda: Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T",
                     10, "the export to stop", interval=0.01)
            if any(base.glob(".*.tmp-*")):
                return True
            os.kill(proc.pid, signal.SIGCONT)  # that export had just finished: the next one
            return False

        wait_for(frozen_midway, 300, "a third export under way", interval=0.05)
        assert proc.poll() is None, (tmp_path / "export.log").read_text()[-3000:]
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()

    leftovers = [p.name for p in base.iterdir() if not p.name.isdigit()]
    assert leftovers and all(name.startswith(".") and ".tmp-" in name for name in leftovers), leftovers
    numbered = sorted(int(p.name) for p in base.iterdir() if p.name.isdigit())
    assert numbered and numbered[-1] >= 2
    for version in numbered:  # every version a server could pick is complete
        assert (base / str(version) / "saved_model.pb").is_file()
        assert (base / str(version) / "showtell-export.json").is_file()

    from showtell.captioning.model import export
    from showtell.evaluator.records.best_export import BestExport

    restarted = BestExport("loss", True, base, keep=2)
    assert restarted.current()["step"] == numbered[-1]  # the newest complete version
    assert sorted(os.listdir(base)) == [str(v) for v in numbered]  # the cut-short one is gone
    serve, info = export.load(export.resolve(base))
    assert info["step"] == numbered[-1]
    [image] = _images(tiny_data, tmp_path, count=1)
    assert serve(images=tf.constant([image.read_bytes()]))["captions"].numpy().shape == (1, 3)
