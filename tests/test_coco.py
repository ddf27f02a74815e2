"""``showtell data coco`` on a tiny MSCOCO-layout set the test writes: JPEGs made with TF, the two
captions files, one corrupt JPEG, one empty file and one missing file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from showtell.captioning.config import CocoConfig
from showtell.captioning.data import coco
from showtell.captioning.data.dataset import Manifest
from showtell.captioning.data.inputs import load_references
from showtell.captioning.data.vocab import UNKNOWN, Vocabulary
from showtell.evaluator.scoring.scorers import CaptionScorer
from showtell.metrics.exact_match import exact_match
from tests.coco_layout import CORRUPT, EMPTY, MISSING, TRAIN, VAL, WORDS, coco_args, records, write_layout
from tests.helpers import error_lines, run_showtell


@pytest.fixture(scope="module")
def layout(tmp_path_factory) -> dict:
    return write_layout(tmp_path_factory.mktemp("mscoco"))


def _config(layout, **overrides) -> CocoConfig:
    base = dict(captions=tuple(layout["captions"]), images=tuple(layout["images"]), min_word_count=2,
                train_shards=4, val_shards=1, test_shards=2, workers=2)
    return CocoConfig(**{**base, **overrides})


@pytest.fixture(scope="module")
def built(layout, tmp_path_factory) -> Path:
    """Built once through the real CLI."""
    out = tmp_path_factory.mktemp("coco") / "data"
    result = run_showtell(*coco_args(layout, out, "--workers", "2"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "3 image(s) skipped (empty file: 1, missing: 1, undecodable: 1)" in result.stderr
    return out


def shard_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*-?????-of-?????"))}


def test_split_proportions_determinism_and_counts(layout, built, tmp_path):
    manifest = Manifest.load(built)
    assert manifest.builder == "coco" and manifest.image_size == 0
    splits = manifest.splits
    # val pool of 40 (one corrupt, one empty): 34 train, 2 val, 4 test; all 20 train2014 (one missing)
    assert splits["train"].images + splits["val"].images + splits["test"].images == TRAIN + VAL - 3
    assert (splits["val"].shards, splits["test"].shards, splits["train"].shards) == (1, 2, 4)
    planned = coco.split_im2txt(coco.load_captions(layout["captions"]))
    assert [len(planned[s]) for s in ("train", "val", "test")] == [TRAIN + 34, 2, 4]
    assert all(i.pool == "train" for i in planned["train"][:TRAIN])
    again = coco.split_im2txt(coco.load_captions(layout["captions"]))
    assert {s: [i.image_id for i in v] for s, v in planned.items()} == \
        {s: [i.image_id for i in v] for s, v in again.items()}
    assert splits["train"].captions == 5 * splits["train"].images
    source = manifest.source
    assert [c["size"] for c in source["captions"]] == [p.stat().st_size for p in layout["captions"]]
    assert source["split"] == "im2txt" and manifest.vocab_size == len(Vocabulary.load(built / "vocab.txt"))

    # Same inputs, other thread count, in-process: byte-identical shards.
    coco.build(tmp_path / "again", _config(layout, workers=1))
    assert shard_bytes(tmp_path / "again") == shard_bytes(built)


def test_vocabulary_from_train_only_with_min_count(layout, built):
    vocab = Vocabulary.load(built / "vocab.txt")
    words = set(vocab.words)
    assert set(WORDS) <= words and not any(w.startswith("zebra") for w in words)  # seen once each
    planned = coco.split_im2txt(coco.load_captions(layout["captions"]))
    val_only = {f"zebra{i.image_id}" for i in planned["val"] + planned["test"]}
    assert not val_only & words
    unknown = vocab.word_to_id(UNKNOWN)
    val = records(built, "val")
    with_unknown = [image_id for image_id, ids in val if unknown in ids]  # each image's zebra caption
    assert sorted(with_unknown) == sorted({image_id for image_id, _ in val})


def test_val_keeps_all_references_of_an_image_together(built):
    val = records(built, "val")
    runs = [image_id for i, (image_id, _) in enumerate(val) if i == 0 or val[i - 1][0] != image_id]
    assert len(runs) == len(set(runs)) == 2  # each image in one consecutive run
    assert all(sum(1 for i, _ in val if i == image_id) == 5 for image_id in runs)


def test_metrics_use_every_reference(built):
    files = sorted(str(p) for p in built.glob("val-?????-of-?????"))
    references = load_references(files, Vocabulary.load(built / "vocab.txt"))
    assert all(len(refs) == 5 for refs in references.values())
    third = {image_id: refs[2] for image_id, refs in references.items()}  # matches only the 3rd
    assert exact_match(third, references) == 1.0
    scorer = CaptionScorer(meteor=False)
    try:
        scores = scorer.score(third, references)
    finally:
        scorer.close()
    assert scores["bleu4"] > 0.99 and scores["cider"] > 0


def test_bad_images_are_reported_and_left_out(built, layout):
    lines = (built / coco.REPORT).read_text().splitlines()
    assert lines[0] == "split\tpath\treason"
    rows = {Path(line.split("\t")[1]).name: line.split("\t")[2] for line in lines[1:]}
    assert rows[f"COCO_val2014_{CORRUPT:012d}.jpg"].startswith("undecodable")
    assert rows[f"COCO_val2014_{EMPTY:012d}.jpg"] == "empty file"
    assert rows[f"COCO_train2014_{MISSING:012d}.jpg"] == "missing"
    written = {image_id for split in ("train", "val", "test") for image_id, _ in records(built, split)}
    assert not {CORRUPT, EMPTY, MISSING} & written and len(written) == TRAIN + VAL - 3


def test_resume_after_an_interrupted_build_gives_identical_shards(built, layout, tmp_path):
    out = tmp_path / "interrupted"
    shutil.copytree(built, out)
    # What a crash can leave: no manifest; two shards never written; one renamed but its sidecar
    # not yet written (and, to be sure it is redone, truncated); a half-written temporary file.
    (out / "dataset.json").unlink()
    for name in ("train-00002-of-00004", "test-00001-of-00002"):
        (out / name).unlink()
        (out / f".{name}.json").unlink()
    orphan = out / "train-00003-of-00004"
    orphan.write_bytes(orphan.read_bytes()[:500])
    (out / ".train-00003-of-00004.json").unlink()
    (out / "train-00002-of-00004.tmp").write_bytes(b"partial")
    args = coco_args(layout, out)
    result = run_showtell(*args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "kept 4 finished shard(s)" in result.stderr  # of 7: three redone
    assert shard_bytes(out) == shard_bytes(built)
    assert json.loads((out / "dataset.json").read_text())["splits"] == \
        json.loads((built / "dataset.json").read_text())["splits"]

    rerun = run_showtell(*args)  # complete: nothing to do
    assert rerun.returncode == 0 and "already holds this COCO dataset" in rerun.stderr


def test_bad_captions_file_is_one_line(tmp_path, showtell_main):
    bad = tmp_path / "captions_val2014.json"
    bad.write_text('{"images": []}')
    result = showtell_main("data", "coco", "--captions", str(bad), "--images", str(tmp_path),
                           "--out", str(tmp_path / "out"))
    lines = error_lines(result.stderr)
    assert result.returncode == 1 and len(lines) == 1
    assert "captions_val2014.json: not an MSCOCO captions file" in lines[0]


def test_karpathy_split(layout, tmp_path):
    """Karpathy's split file decides membership; restval joins train; unlisted images are left out."""
    listed = {**{i: "train" for i in range(0, 10)}, **{i: "restval" for i in range(100, 120)},
              **{i: "val" for i in range(120, 130)}, **{i: "test" for i in range(130, 138)}}
    karpathy = tmp_path / "dataset_coco.json"
    karpathy.write_text(json.dumps({"images": [{"cocoid": i, "split": s, "filename": f"{i}.jpg"}
                                               for i, s in listed.items()]}))
    out = tmp_path / "karpathy"
    manifest = coco.build(out, _config(layout, split="karpathy", karpathy_json=karpathy))
    members = {split: {image_id for image_id, _ in records(out, split)} for split in ("train", "val", "test")}
    bad = {MISSING, CORRUPT, EMPTY}
    assert members["train"] == (set(range(0, 10)) | set(range(100, 120))) - bad
    assert members["val"] == set(range(120, 130)) - bad and members["test"] == set(range(130, 138)) - bad
    assert manifest.source["split"] == "karpathy" and manifest.source["karpathy_json"]["size"] > 0
