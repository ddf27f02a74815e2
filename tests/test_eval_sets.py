"""``showtell evaluate --eval-set NAME=PATH[:EXAMPLES]``: what is refused before anything starts,
one line and exit 2 each (in-process: the CLI's own checks; a served second set is in
``tests/test_evaluator_service.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from showtell.evaluator.config import EvalSet
from tests.helpers import error_lines


def test_an_eval_set_parses_name_path_and_examples():
    assert EvalSet.parse("unseen=data/unseen:500") == EvalSet("unseen", Path("data/unseen"), 500)
    assert EvalSet.parse("b=/srv/x:y") == EvalSet("b", Path("/srv/x:y"))  # not a count: part of the path
    with pytest.raises(ValueError, match="EXAMPLES must be ≥ 1"):
        EvalSet.parse("a=d:0")


def test_bad_eval_sets_are_one_line_each(tiny_data: Path, tmp_path: Path, showtell_main):
    empty = tmp_path / "empty"
    empty.mkdir()
    no_val = tmp_path / "no-val"
    shutil.copytree(tiny_data, no_val)
    for shard in no_val.glob("val-*"):
        shard.unlink()
    base = ("evaluate", "--model-dir", str(tmp_path / "m"), "--data", str(tiny_data), "--once")
    cases = {
        ("--eval-set", "unseen"): "argument --eval-set: expected NAME=PATH[:EXAMPLES], e.g. "
                                  "unseen=data/unseen:500 (see --help)",
        ("--eval-set", "9x=d"): "argument --eval-set: the name '9x' must be a letter then letters, digits, _ "
                                "or - (32 at most) (see --help)",
        ("--eval-set", f"val={tiny_data}"): f"--eval-set val={tiny_data}: 'val' is the name of --data's "
                                            "validation split; choose another name (see --help)",
        ("--eval-set", f"a={tiny_data}", "--eval-set", f"a={tiny_data}:3"):
            f"--eval-set a={tiny_data}: the name 'a' is given twice; each set needs its own (see --help)",
        ("--eval-set", f"a={no_val}"):
            f"--eval-set a={no_val}: no validation records (val-NNNNN-of-NNNNN shards) there; build one with "
            f"`showtell data synthetic --out {no_val}` or point at a dataset directory (see --help)",
    }
    for flags, expected in cases.items():
        result = showtell_main(*base, *flags)
        expected_lines = [f"showtell evaluate: error: {expected}"]
        assert (result.returncode, error_lines(result.stderr)) == (2, expected_lines), flags
    result = showtell_main(*base, "--eval-set", f"a={empty}")
    assert result.returncode == 2
    [line] = error_lines(result.stderr)
    assert line.startswith(f"showtell evaluate: error: --eval-set a={empty}: ") and str(empty) in line
