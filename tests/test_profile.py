"""``showtell train --profile-steps A:B``: a TensorFlow profiler trace of exactly those steps in
the model dir's TensorBoard run, where TensorBoard's profile plugin looks for it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import copy_model, error_lines, run_showtell, train_more

pytestmark = pytest.mark.e2e


def _traced_steps(xplane: Path) -> list[int]:
    """Step numbers of the trainer's ``train`` step markers in an XSpace file."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace.FromString(xplane.read_bytes())
    steps = []
    for plane in space.planes:
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if name.split("#")[0] != "train":
                    continue
                stats = {stat_names.get(s.metadata_id): s for s in event.stats}
                if "step_num" in stats:
                    stat = stats["step_num"]
                    steps.append(stat.int64_value or stat.uint64_value)
                else:  # the marker's arguments still in its name: train#step_num=6,_r=1#
                    steps.append(int(re.search(r"step_num=(\d+)", name).group(1)))
    return sorted(steps)


@pytest.mark.parametrize(("per_call", "markers"), [("1", [6, 7]), ("auto", [6])])
def test_profile_steps_traces_exactly_that_range(tiny_data: Path, tiny_model: Path, tmp_path: Path,
                                                 per_call: str, markers: list[int]):
    """One marker per call, named by the step it starts at: one step a call marks 6 and 7; auto
    (10 on the feature cache) runs 6–7 as one call — the chunks end at 5 and at 7, so neither 5
    before the range nor 8 and 9 after it are traced."""
    model_dir = copy_model(tiny_model, tmp_path / "model")  # at step 4
    train_more(tiny_data, model_dir, 9, "--profile-steps", "6:7", "--steps-per-loop", per_call)
    [xplane] = (model_dir / "train" / "plugins" / "profile").glob("*/*.xplane.pb")
    assert _traced_steps(xplane) == markers


def test_a_malformed_range_is_one_line():
    result = run_showtell("train", "--data", "d", "--model-dir", "m", "--profile-steps", "7:3")
    assert result.returncode == 2
    assert error_lines(result.stderr) == [
        "showtell train: error: argument --profile-steps: expected A:B with 1 ≤ A ≤ B, e.g. 100:110 "
        "(got '7:3') (see --help)"]
