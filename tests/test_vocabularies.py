"""A model evaluated on a dataset with another vocabulary order: its own ``vocab.txt`` decodes
its captions, references are re-encoded into it, so captions and metrics are those of the
dataset it was trained on — not fluent nonsense.  Without its ``vocab.txt``: one line."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from showtell.captioning.data.vocab import Vocabulary
from tests.helpers import TINY_DATA, copy_model, error_lines

# In process: what is under test is decided inside `evaluate --once`, no process boundary.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reordered(tmp_path_factory) -> Path:
    """The tiny validation split (same seed, same images and captions) built beside a smaller
    training split: other word counts, so another vocabulary order."""
    from showtell.captioning.data import synthetic

    out = tmp_path_factory.mktemp("reordered") / "synthetic"
    synthetic.build(out, dataclasses.replace(TINY_DATA, train_images=20))
    return out


def _once(showtell_main, model_dir: Path, data: Path, *more: str) -> dict:
    """The default set's result (a second set's, given by ``more``, in ``["others"]``, and the
    command's log lines in ``["logs"]``)."""
    result = showtell_main("evaluate", "--once", "--json", "--model-dir", str(model_dir), "--data", str(data),
                           "--beam-size", "1", "--meteor", "false", *more)
    assert result.returncode == 0, result.stderr[-3000:]
    first, *others = (json.loads(line) for line in result.stdout.splitlines())
    return {**first, "others": others, "logs": result.logs}


def test_another_vocabulary_order_gives_the_same_captions_and_metrics(
        tiny_data: Path, tiny_model: Path, reordered: Path, tmp_path: Path, showtell_main):
    ours, theirs = Vocabulary.load(tiny_data / "vocab.txt"), Vocabulary.load(reordered / "vocab.txt")
    assert set(ours.words) == set(theirs.words) and ours.words != theirs.words  # the premise
    # … and the same validation images and captions, word for word
    from showtell.captioning.data.dataset import shard_files
    from showtell.captioning.data.inputs import load_references

    assert load_references(shard_files(tiny_data, "val"), ours) == \
        load_references(shard_files(reordered, "val"), theirs)

    # beside it, a set built from 4 training scenes (the demo's unseen set as it was): its own
    # vocabulary lacks words its references use, so they hold <UNK> and no caption can match them
    # — one WARNING naming the set, and the share of such images in its record
    from showtell.captioning.config import SyntheticConfig
    from showtell.captioning.data import synthetic

    lost = tmp_path / "lost"
    synthetic.build(lost, SyntheticConfig(train_images=4, val_images=8, seed=1, train_shards=1))
    refs = load_references(shard_files(lost, "val"), Vocabulary.load(lost / "vocab.txt"))
    share = sum(any("<UNK>" in r.split() for r in v) for v in refs.values()) / len(refs)
    assert share > 0  # the premise
    same = _once(showtell_main, tiny_model, tiny_data, "--eval-set", f"lost={lost}")
    [lost_result] = same["others"]
    assert lost_result["metrics"]["references_with_unknown"] == pytest.approx(share)
    assert "references_with_unknown" not in same["metrics"]
    warned = [line for line in same["logs"].splitlines()
              if "references hold words its vocabulary lacks" in line]
    assert len(warned) == 1 and str(lost) in warned[0], same["logs"][-3000:]
    other = _once(showtell_main, tiny_model, reordered)
    assert [s["caption"] for s in other["samples"]] == [s["caption"] for s in same["samples"]]
    assert [s["references"] for s in other["samples"]] == [s["references"] for s in same["samples"]]
    for name, value in same["metrics"].items():
        assert math.isclose(other["metrics"][name], value, rel_tol=1e-5, abs_tol=1e-6), name
    assert other["metrics"]["unknown_reference_words"] == 0.0  # same words, other ids
    assert "unknown_reference_words" not in same["metrics"]

    # A model dir without vocab.txt (older runs) and a dataset in another order: refused, one line.
    bare = copy_model(tiny_model, tmp_path / "bare")
    (bare / "vocab.txt").unlink()
    result = showtell_main("evaluate", "--once", "--model-dir", str(bare), "--data", str(reordered))
    [line] = error_lines(result.stderr)
    assert result.returncode == 1 and "vocab.txt: missing" in line, line
    assert "differs from the training data's vocabulary (id " in line and "copy " in line
    # … and with the training dataset itself it falls back to it (identical word for word)
    fallback = _once(showtell_main, bare, tiny_data)
    assert fallback["metrics"]["loss"] == pytest.approx(same["metrics"]["loss"], rel=1e-6)


def test_words_the_model_lacks_become_unknown_and_are_counted(tiny_data: Path):
    """References re-encoded into a smaller vocabulary: each word it lacks is ``<UNK>``, counted."""
    from showtell.captioning.data import inputs
    from showtell.captioning.data.dataset import shard_files
    from showtell.captioning.data.vocab import UNKNOWN_ID

    full = Vocabulary.load(tiny_data / "vocab.txt")
    dropped = {"red", "below"}
    smaller = Vocabulary(tuple(w for w in full.words if w not in dropped),
                         tuple(c for w, c in zip(full.words, full.counts, strict=True) if w not in dropped))
    id_map, missing = full.id_map(smaller)
    assert sorted(missing) == sorted(dropped)
    files = shard_files(tiny_data, "val")
    expected = sum(ref.split().count(word) for refs in inputs.load_references(files, full).values()
                   for ref in refs for word in dropped)
    assert expected > 0
    counted, unknown_targets = 0, 0
    for batch in inputs.eval_images(files, 75, 16, id_map=id_map):
        counted += int(batch["unknown"].numpy().sum())
        pairs = inputs.teacher_forcing(batch["captions"])
        unknown_targets += int(((pairs["target_ids"].numpy() == UNKNOWN_ID) * pairs["mask"].numpy()).sum())
    assert counted == expected == unknown_targets
