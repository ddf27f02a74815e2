"""An evaluation split across evaluators (``--shard I/N``): each part evaluates its images unscored,
and the merged parts are scored into exactly what one evaluator records — in-process, on the real
tiny model, with COCO's scorers (METEOR's JVM too)."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from showtell.common.errors import ShowtellError
from showtell.common.model_dir import ModelDir
from showtell.evaluator.config import EvalSet
from showtell.evaluator.records import parts as part_files
from showtell.evaluator.records.parts import PartsMismatch
from showtell.evaluator.scoring.bootstrap import Bootstrap
from showtell.evaluator.scoring.evaluation import CheckpointEvaluator, set_fingerprint
from showtell.evaluator.scoring.features import FeatureStore
from showtell.evaluator.scoring.scorers import CaptionScorer
from tests.helpers import copy_model

SETS = (EvalSet("few", Path(), 7),)  # a second set of an odd size: parts of 3, 2 and 2 images


def _evaluator(model: Path, data: Path, features: Path, shard=None, scorer=None) -> CheckpointEvaluator:
    return CheckpointEvaluator(ModelDir(model), data, bootstrap=Bootstrap(200, 0.95), scorer=scorer,
                               sets=[EvalSet(s.name, data, s.max_examples) for s in SETS],
                               features=FeatureStore(features, 2), shard=shard)


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _captions_that_vary(model_dir: Path, data: Path) -> str:
    """A checkpoint beside ``model_dir``'s ckpt-4 whose captions differ from image to image: the tiny
    model says "a" to every image, and an untrained encoder's features of these images differ by
    1e-4 of their mean, so its image embedding is set to one that standardises them (random
    directions, each orthogonal to the set's mean feature).  Its path."""
    import tensorflow as tf

    from showtell.captioning.data import inputs
    from showtell.captioning.data.dataset import EVAL, shard_files
    from showtell.captioning.model.network import build_model
    from showtell.captioning.model.restoring import read_model_config, restore

    model = build_model(read_model_config(ModelDir(model_dir)))
    checkpoint = tf.train.Checkpoint(model=model)
    restore(checkpoint, str(model_dir / "ckpt-4"), "the tiny model's", partial=True)
    images = inputs.eval_images(shard_files(data, EVAL), model.config.image_size, 8)
    features = np.concatenate([model.features(batch["image"]).numpy() for batch in images])
    mean, spread = features.mean(0), features.std(0) + 1e-12
    directions = np.random.default_rng(0).standard_normal((features.shape[1], model.config.embedding_size))
    standard_mean = mean / spread
    directions -= np.outer(standard_mean, standard_mean @ directions) / (standard_mean @ standard_mean)
    model.image_embedding.kernel.assign((3 * directions / spread[:, None] / np.sqrt(len(mean))
                                         ).astype("float32"))
    return checkpoint.write(str(model_dir / "ckpt-5"))


@pytest.mark.slow
def test_merged_parts_are_one_evaluators_record_for_2_and_3_parts(tiny_data: Path, tiny_model: Path,
                                                                    java: str, tmp_path: Path):
    """On a checkpoint whose captions vary (so CIDEr's document frequencies, METEOR's corpus score
    and distinct-2's bigrams over every caption are whole-set figures that a wrong merge changes)."""
    model_dir = copy_model(tiny_model, tmp_path / "model")
    checkpoint = _captions_that_vary(model_dir, tiny_data)
    whole = _evaluator(model_dir, tiny_data, tmp_path / "whole",
                       scorer=lambda: CaptionScorer(meteor=True, tokenizer="regex"))
    one = whole.evaluate(checkpoint, 5)
    # (the tiny model is trained anew in each session: its figures vary, its captions always differ)
    assert one.metrics["cider"] > 0 and one.metrics["meteor"] > 0 and 0 < one.metrics["distinct_2"] < 1
    assert len({sample["caption"] for sample in one.samples}) >= 3, one.samples
    assert one.intervals
    try:
        # N = 1 is no split at all — the single evaluator, built with no shard — so its record is the
        # one above by construction, not by a comparison: --shard 0/1 never reaches a part's code.
        from showtell.evaluator.config import Shard, ShardConfig

        assert not ShardConfig(shard=Shard(0, 1)).split and ShardConfig(shard=Shard(0, 2)).split
        part = _evaluator(model_dir, tiny_data, tmp_path / "parts")  # one model for every part
        for count in (2, 3):
            results = []
            for index in range(count):
                part.shard = (index, count)  # as CheckpointEvaluator(shard=…) sets it
                results.append(part.evaluate(checkpoint, 5))
            for result in results:
                assert result.metrics == {} and not result.intervals and not result.others  # not scored
            sizes = [len(r.part.image_ids) for r in results]
            assert sum(sizes) == len(one.stats) and max(sizes) - min(sizes) <= 1
            # through the part file each part writes
            _, set_parts = part_files.from_bytes(part_files.to_bytes(
                {"step": 5}, [s for r in results for s in r.stats.sets]))  # a part's every set: one file
            merged = whole.merge(set_parts, checkpoint, 5, one.train_seconds)
            for a, b in zip((one, *one.others), (merged, *merged.others), strict=True):
                assert (b.eval_set, b.examples, b.samples, b.scoring) == (a.eval_set, a.examples, a.samples,
                                                                           a.scoring)
                assert b.metrics.keys() == a.metrics.keys(), count
                wrong = {k: (a.metrics[k], b.metrics[k]) for k in a.metrics if not _same(a.metrics[k],
                                                                                       b.metrics[k])}
                assert not wrong, (count, a.eval_set, wrong)
                assert b.intervals.keys() == a.intervals.keys()
                assert all(_same(x, y) for k in a.intervals
                           for x, y in zip(a.intervals[k], b.intervals[k], strict=True)), (count, b.intervals)
                assert np.array_equal(a.stats.image_ids, b.stats.image_ids)
                assert b.stats.fingerprint == a.stats.fingerprint and b.costs["parts"] == count
    finally:
        whole.close()


def test_parts_that_are_not_one_evaluations_are_refused():
    def part(index: int, count: int, ids: list[int], eval_set: str = "val") -> part_files.SetPart:
        return part_files.SetPart(eval_set, (index, count), ids, ["a b"] * len(ids), [1.0] * len(ids),
                                  [2.0] * len(ids), 5 * len(ids))

    merged = part_files.merge([part(1, 2, [11, 13]), part(0, 2, [10, 12, 14])])
    assert merged.image_ids == [10, 11, 12, 13, 14] and merged.loss == 0.5 and merged.examples == 25
    for parts, why in [
        ([part(0, 2, [10])], r"not each of 2 once"),
        ([part(0, 2, [10]), part(0, 2, [11])], r"not each of 2 once"),
        ([part(0, 2, [10]), part(1, 3, [11])], r"not each of 2 once"),
        ([part(0, 2, [10]), part(1, 2, [11], "other")], r"different sets"),
        ([part(0, 2, [10]), part(1, 2, [11, 13])], r"positions"),
        ([part(0, 2, [10]), part(1, 2, [10])], r"in two parts"),
    ]:
        with pytest.raises(PartsMismatch, match=why):
            part_files.merge(parts)
    # Part 0 holds the set (its order, and each image's fingerprint): a part is its positions of it,
    # read from the same data — or refused, naming the part and what differs.
    order, same = list(range(6)), (lambda ids: "f" * 64)
    own = [part(0, 2, [0, 2, 4]), replace(part(1, 2, [1, 3, 5]), fingerprint="f" * 64)]
    assert part_files.merge([replace(own[0], fingerprint="f" * 64), own[1]], order, same).image_ids == order
    for parts, set_order, why in [
        ([own[0], part(1, 2, [999, 555, 777])], order,
         r"^part 1/2 of set val is not this set's positions 1, 3 … \(image 999 where this set has 1\)$"),
        ([part(0, 2, [0]), part(1, 2, [])], [0, 1, 2],
         r"^part 0/2 of set val is not this set's positions 0, 2 … \(it holds 1 images, this set has 2 "
         r"there\)$"),
    ]:
        with pytest.raises(PartsMismatch, match=why):
            part_files.merge(parts, set_order)
    with pytest.raises(PartsMismatch, match=r"^part 0/2 of set val read other images or references "
                                            r"than part 0 \(set fingerprint none, part 0's ffffffffffff\)"):
        part_files.merge(own, order, same)  # part 0's own part carries none: another seed's would differ
    with pytest.raises(ValueError, match="not a part file"):
        part_files.from_bytes(b"PK\x03\x04 truncated")


@pytest.mark.e2e
def test_two_evaluator_processes_split_each_checkpoint_and_part_0_serves_the_merged_records(
        tiny_data: Path, tiny_model: Path, tmp_path: Path, procs, showtell_main):
    """Two real evaluators, ``--shard 0/2`` and ``--shard 1/2``, on a model dir with two checkpoints.
    Part 0 alone: its parts are published, nothing is recorded, and the status says which
    checkpoints wait for which part.  Part 1 killed mid-evaluation and started again: each
    checkpoint is recorded once, merged from both parts, in order, served by part 0 over gRPC —
    the record one evaluator writes; the parts' files give way to markers; part 1 ends by itself
    (``--exit-when-trained``) once its part of the final checkpoint is published."""
    from showtell.common.processes import kill_tree
    from showtell.v1 import metrics_pb2 as pb
    from tests.helpers import error_lines, metrics_stub, start_evaluator, wait_for

    parts_dir = tmp_path / "parts"
    common = ("--policy", "all", "--parts-dir", str(parts_dir), "--tokenizer", "regex",
              "--eval-set", f"few={tiny_data}:7")
    _, port = start_evaluator(procs, tiny_model, tiny_data, tmp_path / "work0", tmp_path / "part0.log",
                              # loss:max: one export (step 2; a SavedModel costs ≈ 15 CPU-s here)
                              "--shard", "0/2", "--export-best", "loss:max", *common)
    channel, stub = metrics_stub(port)

    def status() -> pb.EvaluatorStatus:
        return stub.GetStatus(pb.GetStatusRequest(), timeout=10).status

    def merged() -> list:
        return list(stub.ListEvaluations(pb.ListEvaluationsRequest(page_size=10), timeout=10).evaluations)

    waiting = wait_for(lambda: len(status().waiting_for_parts) == 2 and status().waiting_for_parts, 120,
                       "part 0's own parts of both checkpoints")
    assert [(w.step, list(w.missing_parts)) for w in waiting] == [(2, [1]), (4, [1])] and status().parts == 2
    assert merged() == []  # never recorded from fewer images
    shown = showtell_main("metrics", "status", "--server", f"127.0.0.1:{port}")
    assert "split into 2 parts; waiting for parts: step 2 (part 1/2), step 4 (part 1/2)" in shown.stdout

    # Part 1 started on another seed's data (same sets, same ids, other images): refused at its start,
    # in one line naming it and what differs; nothing is published, the plan and part 0's files stay.
    from showtell.captioning.data import synthetic
    from tests.helpers import TINY_DATA

    other = tmp_path / "other-seed"
    synthetic.build(other, replace(TINY_DATA, seed=TINY_DATA.seed + 1))
    before = sorted(str(p.relative_to(parts_dir)) for p in parts_dir.rglob("*"))
    plan = (parts_dir / "plan.json").read_text()
    wrong = procs.start("evaluate", "--model-dir", str(tiny_model), "--data", str(other), "--work-dir",
                        str(tmp_path / "work-other"), "--meteor", "false", "--shard", "1/2", "--host",
                        "127.0.0.1", "--port", "0", *common, log=tmp_path / "part1-other.log")
    assert wrong.wait(timeout=120) == 1
    [line] = error_lines((tmp_path / "part1-other.log").read_text())
    assert line.startswith(f"showtell evaluate: error: --shard 1/2: --parts-dir {parts_dir} is a split "
                           "evaluation's with data {'few': ") and "start every part the same way" in line, \
        line
    assert sorted(str(p.relative_to(parts_dir)) for p in parts_dir.rglob("*")) == before
    assert (parts_dir / "plan.json").read_text() == plan and merged() == []

    def part1(log: str):
        return procs.start("evaluate", "--model-dir", str(tiny_model), "--data", str(tiny_data),
                           "--work-dir", str(tmp_path / "work1"), "--meteor", "false", "--shard", "1/2",
                           "--host", "127.0.0.1", "--port", "0",
                           "--exit-when-trained", *common, log=tmp_path / log)

    first = part1("part1-killed.log")
    wait_for(lambda: "building the model" in (tmp_path / "part1-killed.log").read_text(), 120,
             "part 1 to start evaluating step 2")
    kill_tree(first.pid)  # mid-evaluation: it builds the model, then evaluates (≈ 10 s here)
    first.wait(timeout=30)
    assert "this part published" not in (tmp_path / "part1-killed.log").read_text()  # it landed mid-way
    again = part1("part1.log")
    health_port = wait_for(lambda: re.search(r"serving grpc.health.v1 alone .* on 127.0.0.1:(\d+)",
                                             (tmp_path / "part1.log").read_text()), 120, "part 1's health")
    answered = showtell_main("metrics", "health", "--server", f"127.0.0.1:{health_port.group(1)}")
    assert answered.returncode == 0, answered.stderr  # its probes pass; part 0 serves its metrics
    records = wait_for(lambda: len(merged()) == 2 and merged(), 240, "both checkpoints merged")
    assert [(r.global_step, r.status) for r in records] == [
        (2, pb.Evaluation.STATUS_OK), (4, pb.Evaluation.STATUS_OK)]
    assert again.wait(timeout=60) == 0, (tmp_path / "part1.log").read_text()[-3000:]
    wait_for(lambda: list(status().waiting_for_parts) == [], 30, "no checkpoint waiting for parts")
    # every image of the set, 3 captions each (what one evaluator records is checked in-process above)
    assert [r.num_examples for r in records] == [8 * 3] * 2
    assert {"loss", "cider", "bleu4"} <= set(records[1].metrics)
    few = stub.GetLatest(pb.GetLatestRequest(eval_set="few"), timeout=10).evaluation
    assert few.global_step == 4 and few.num_examples == 7 * 3  # the second set merged: 7 images, 3 captions
    log0 = (tmp_path / "part0.log").read_text()
    assert log0.count("merged from 2 parts") == 2, log0[-3000:]  # each checkpoint once
    highest = pb.GetBestRequest(metric="loss", mode=pb.GetBestRequest.MODE_MAX)
    best = stub.GetBest(highest, timeout=10).evaluation
    exported = sorted(p.name for p in (tmp_path / "work0" / "export" / "best").iterdir())
    assert best.export_path and exported[-1] == str(best.global_step)  # the merged best, exported
    [run_dir] = (parts_dir / "checkpoints").iterdir()  # one training run
    assert sorted(p.name for p in run_dir.iterdir()) == ["2-ckpt-2.merged", "4-ckpt-4.merged"]
    channel.close()


def test_a_split_the_service_cannot_run_is_one_line_before_anything_starts(tiny_data: Path, tmp_path: Path,
                                                                           showtell_main):
    from tests.helpers import error_lines

    base = ("evaluate", "--model-dir", str(tmp_path / "m"), "--data", str(tiny_data))
    parts = ("--parts-dir", str(tmp_path / "parts"))
    cases = {
        ("--shard", "2/2"): "argument --shard: I must be 0 … N - 1 and N ≥ 1 (got 2/2)",
        ("--shard", "a"): "argument --shard: expected I/N, e.g. 0/2 (got 'a')",
        ("--parts-dir", "p"): "--parts-dir goes with --shard I/N, N > 1",
        ("--shard", "1/2", "--policy", "all"): "--shard 1/2 needs --parts-dir: a directory every part writes "
                                               "to, part 0 reads (shared storage)",
        ("--shard", "1/2", *parts): "--shard 1/2 needs --policy all: every part must evaluate the same "
                                    "checkpoints (with latest, a part that fell behind would skip to another "
                                    "one and no checkpoint would have every part)",
        ("--shard", "0/3", *parts, "--policy", "all", "--once"):
            "--shard 0/3 splits the service's evaluations; --once evaluates a whole checkpoint",
        ("--shard", "0/3", *parts, "--policy", "all", "--until-step", "4"):
            "--shard 0/3: --until-step and --max-evaluations count one evaluator's evaluations; a split one "
            "ends with --exit-when-trained",
    }
    for flags, expected in cases.items():
        result = showtell_main(*base, *flags)
        assert (result.returncode, error_lines(result.stderr)) == (
            2, [f"showtell evaluate: error: {expected} (see --help)"]), flags


def test_a_part_started_with_another_split_is_refused_by_the_plan(tmp_path: Path):
    from showtell.evaluator.records.parts_dir import PLAN, PartsDir

    plan = {"sets": [["val", None]], "beam_size": 3}
    PartsDir(tmp_path, 0, 2, plan).check_plan()
    PartsDir(tmp_path, 1, 2, plan).check_plan()  # the same split: fine
    with pytest.raises(ShowtellError) as refused:
        PartsDir(tmp_path, 1, 3, plan).check_plan()
    assert str(refused.value) == (
        f"--shard 1/3: --parts-dir {tmp_path} is a split evaluation's with parts 2 (this part: 3); start "
        "every part the same way, or give a new --parts-dir (a changed split starts afresh)")
    assert (tmp_path / PLAN).read_text().count('"parts": 2') == 1  # never replaced
    with pytest.raises(ShowtellError) as other_data:  # another seed's data: the same sets, other bytes
        PartsDir(tmp_path, 1, 2, {**plan, "data": {"val": "b" * 64}}).check_plan()
    assert str(other_data.value).startswith(f"--shard 1/2: --parts-dir {tmp_path} is a split evaluation's "
                                            f"with data None (this part: {{'val': '{'b' * 64}'}}); ")


def test_a_checkpoint_a_part_went_past_is_recorded_skipped_and_one_it_may_reach_waits(tmp_path: Path):
    """Parts go in step order: once part 1 has published step 6 of a run, it never will publish
    step 4 (deleted by --keep while it was down) — step 4 is recorded skipped, once, naming the
    part; step 8, which part 1 has not reached, waits.  In-process: the merger on a real parts dir
    and history."""
    from showtell.evaluator.loop.merger import Merger
    from showtell.evaluator.records.parts_dir import PartsDir
    from showtell.evaluator.records.record import Record
    from showtell.evaluator.records.recorder import Recorder
    from showtell.evaluator.records.store import Store

    plan = {"sets": [["val", None]], "beam_size": 3}
    zero, one = PartsDir(tmp_path / "parts", 0, 2, plan), PartsDir(tmp_path / "parts", 1, 2, plan)

    def published(parts: PartsDir, step: int) -> None:
        parts.publish(Record(step, f"/m/ckpt-{step}", 1.0, 2.0, 3.0, 0, run="r", status="skipped",
                             reason="not evaluated here"))

    for step in (4, 6, 8):
        published(zero, step)
    published(one, 6)  # part 1 is past step 4, not yet at step 8
    store = Store(tmp_path / "evaluations.sqlite")
    told: list[Record] = []
    merger = Merger(parts=zero, evaluator=None, recorder=Recorder(store=store, work_root=tmp_path),
                    actions=[told.append])
    for _ in range(2):  # a second look records nothing again
        merger()
    assert [(r.step, r.status) for r in told] == [(4, "skipped"), (6, "skipped")]
    assert "part 1/2 went on to later checkpoints without it" in told[0].reason
    assert told[1].reason == "part 0/2: not evaluated here"  # both parts in: the part's own reason
    assert [(w.step, w.missing) for w in merger.waiting] == [(8, (1,))]
    assert sorted(p.name for p in (tmp_path / "parts" / "checkpoints" / "run-r").iterdir()) == [
        "4-ckpt-4.merged", "6-ckpt-6.merged", "8-ckpt-8"]
    store.close()


def test_a_set_fingerprint_refuses_an_image_the_set_does_not_hold():
    images, references = {0: b"a", 1: b"b"}, {0: ["x"], 1: ["y"]}
    assert set_fingerprint([1, 0], images, references) == set_fingerprint([0, 1], images, references)
    with pytest.raises(ShowtellError, match=r"^set val: image 7 and 1 more evaluated but not among the set's "
                                            r"records: the evaluation is not of this set"):
        set_fingerprint([0, 7, 9], images, references)  # before: hashed as empty bytes, silently
