"""``showtell evaluate --export-best`` and ``showtell caption``: only a better evaluation replaces
the export; gRPC names it; the SavedModel, loaded in a fresh process, captions exactly like the
checkpoint it came from; a non-image file is one error line and the rest are captioned."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import tensorflow as tf

from showtell.captioning.data.records import parse_example, shard_files
from showtell.v1 import metrics_pb2 as pb
from tests.conftest import (
    copy_model,
    error_lines,
    metrics_stub,
    run_showtell,
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


def _captions(*args: str) -> list[dict]:
    result = run_showtell("caption", "--json", "--beam-size", "3", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_best_export_and_caption(tiny_data: Path, tiny_model: Path, tmp_path: Path, procs):
    model_dir, work = copy_model(tiny_model, tmp_path / "model"), tmp_path / "eval"
    train_more(tiny_data, model_dir, 6, "--save-every-steps", "2", "--keep", "10")  # ckpt-2, 4, 6
    log = tmp_path / "eval.log"
    _, port = start_evaluator(procs, model_dir, tiny_data, work, log, "--policy", "all",
                              "--max-eval-examples", "4", "--export-best", "loss:max")
    channel, stub = metrics_stub(port)
    with channel:
        wait_for(lambda: stub.GetStatus(pb.GetStatusRequest(), timeout=10).evaluations >= 3, 300,
                 "three evaluations")
        records = stub.ListEvaluations(pb.ListEvaluationsRequest(), timeout=10).evaluations
        status = stub.GetStatus(pb.GetStatusRequest(), timeout=10)
        best = stub.GetBest(pb.GetBestRequest(metric="loss", mode=pb.GetBestRequest.MAX), timeout=10)

    # Exports happen exactly at strict improvements of the metric (here: a larger loss).
    expected, top = [], None
    for record in records:
        if top is None or record.metrics["loss"] > top:
            expected.append(record.global_step)
            top = record.metrics["loss"]
    exported = [int(s) for s in re.findall(r"exported step (\d+) \(loss", log.read_text())]
    assert exported == expected and len(records) == 3
    info = json.loads((work / "export" / "best" / "showtell-export.json").read_text())
    assert info["step"] == expected[-1] == best.global_step and info["metric"] == "loss"
    assert info["checkpoint"].endswith(f"ckpt-{expected[-1]}")
    assert best.export_path == str(work / "export" / "best")
    assert status.best_export.startswith(f"loss:max step {expected[-1]} (")
    assert str(work) in status.best_export
    assert not list((work / "export").glob(".best.*"))  # no temporary or old copies left

    # The export, in a fresh process, captions exactly like its checkpoint.
    images = _images(tiny_data, tmp_path)
    from_export = _captions("--saved-model", str(work / "export" / "best"), *map(str, images))
    from_checkpoint = _captions("--model-dir", str(model_dir), "--checkpoint", info["checkpoint"],
                                *map(str, images))
    assert [c["image"] for c in from_export] == [str(p) for p in images]
    for a, b in zip(from_export, from_checkpoint, strict=True):
        assert [c["caption"] for c in a["captions"]] == [c["caption"] for c in b["captions"]]
        for x, y in zip(a["captions"], b["captions"], strict=True):
            assert x["log_prob"] == pytest.approx(y["log_prob"], abs=1e-4)
    assert len(from_export[0]["captions"]) == 3

    # A file that is not an image: one line for it, the others still captioned, exit 1.
    bogus = tmp_path / "notes.png"
    bogus.write_text("not a picture")
    mixed = run_showtell("caption", "--saved-model", str(work / "export" / "best"), str(images[0]),
                         str(bogus), str(images[1]))
    assert mixed.returncode == 1
    assert [line for line in error_lines(mixed.stderr) if "error" in line] == \
        [f"showtell caption: error: {bogus}: not an image (JPEG, PNG, GIF or BMP expected)"]
    lines = mixed.stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == [str(images[0]), str(images[1])]
    assert lines[0].split("\t")[1] == from_export[0]["captions"][0]["caption"]
