"""Early stop across two real services: the trainer starts while its evaluator is down, keeps
training and retrying, connects when the evaluator comes up, and exits 0 on its own after the
N-th qualifying evaluation — with its final checkpoint then evaluated too.  The trainer is
niced once it has saved: it then trains on open-ended until its evaluator has started and
evaluated twice, and at full priority it spent ≈ 45 CPU-s of a loaded machine doing so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from showtell.trainer.following.early_stop import StopWhen
from showtell.v1 import metrics_pb2 as pb
from tests.helpers import TINY_MODEL, error_lines, metrics_stub, renice_session, wait_for
from tests.measure import free_ports

pytestmark = pytest.mark.e2e



def test_trainer_stops_itself_on_the_evaluators_report(tiny_data: Path, tmp_path: Path, procs):
    port = free_ports()[0]
    model_dir = tmp_path / "model"
    trainer_log = tmp_path / "train.log"
    trainer = procs.start("train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_MODEL,
                          "--steps", "100000", "--save-every-secs", "0", "--save-every-steps", "200",
                          "--log-every-steps", "100", "--stop-when", "loss<=100", "--patience", "2",
                          "--stop-when-by", "interval",
                          "--evaluator", f"127.0.0.1:{port}", log=trainer_log)
    # Evaluator down: the trainer says so, keeps training, keeps retrying.
    wait_for(lambda: "unreachable" in (t := trainer_log.read_text()) and "saved checkpoint" in t, 180,
             "the trainer to train while the evaluator is down")
    assert trainer.poll() is None
    renice_session(trainer.pid, 10)  # from here on it only has to keep training and saving

    evaluator_log = tmp_path / "eval.log"
    evaluator = procs.start("evaluate", "--model-dir", str(model_dir), "--data", str(tiny_data),
                            "--work-dir", str(tmp_path / "eval"), "--host", "127.0.0.1", "--port", str(port),
                            "--meteor", "false", "--max-eval-examples", "4", log=evaluator_log)
    assert trainer.wait(timeout=300) == 0, trainer_log.read_text()[-3000:]
    text = trainer_log.read_text()
    found = re.search(r"early stop: loss \(interval's bound\) (\S+) meets loss<=100 at the evaluation of "
                      r"step (\d+) "
                      r"\(2 consecutive\)", text)
    assert found, text[-3000:]
    final = int(re.findall(r"final checkpoint \S+ckpt-(\d+) \(step \d+\) after early stop", text)[-1])
    assert final >= int(found.group(2))
    assert len(re.findall(r"early stop: step \d+ loss \(interval's bound\) \S+ \(\d/2\)", text)) >= 2

    channel, stub = metrics_stub(port)
    with channel:  # the final checkpoint is evaluated as well
        wait_for(lambda: stub.GetLatest(pb.GetLatestRequest(), timeout=10).evaluation.global_step == final,
                 180,
                 f"the evaluation of ckpt-{final}")
        # the bound the trainer held against loss<=100 was the interval's upper one (the far side
        # for a metric that should be low), not its lower bound nor the point value
        page = stub.ListEvaluations(pb.ListEvaluationsRequest(from_step=int(found.group(2)), page_size=1),
                                    timeout=10)
        [judged] = [e for e in page.evaluations if e.global_step == int(found.group(2))]
        bounds = judged.intervals["loss"]
        assert bounds.lower < bounds.upper
        assert float(found.group(1)) == pytest.approx(bounds.upper, rel=1e-5), (found.group(1), bounds)
    assert evaluator.poll() is None


def test_stop_when_by_interval_holds_the_far_bound_against_the_target():
    """``--stop-when-by interval``: 'cider>=0.8' is met when the interval's lower bound is, 'loss<=2'
    when its upper bound is; an evaluation without an interval does not count."""
    evaluation = pb.Evaluation(metrics={"cider": 0.85, "loss": 1.9},
                               intervals={"cider": pb.Interval(lower=0.78, upper=0.92),
                                          "loss": pb.Interval(lower=1.7, upper=2.1)})
    assert StopWhen.parse("cider>=0.8").met(StopWhen.parse("cider>=0.8").judged(evaluation))
    surer = StopWhen.parse("cider>=0.8", by="interval")
    assert surer.judged(evaluation) == 0.78 and not surer.met(0.78)
    loss = StopWhen.parse("loss<=2", by="interval")
    assert loss.judged(evaluation) == 2.1 and not loss.met(2.1)
    assert StopWhen.parse("loss<=2.2", by="interval").met(2.1)
    assert surer.judged(pb.Evaluation(metrics={"cider": 0.9})) is None  # recorded before intervals


def test_bad_stop_condition_is_one_line(tiny_data: Path, tmp_path: Path, showtell_main):
    result = showtell_main("train", "--data", str(tiny_data), "--model-dir", str(tmp_path / "m"),
                           "--stop-when", "cider=0.9", "--evaluator", "127.0.0.1:1")
    assert result.returncode == 2
    assert error_lines(result.stderr) == ["showtell train: error: --stop-when 'cider=0.9': expected "
                                          "METRIC>=X or METRIC<=X, e.g. 'cider>=0.9' (see --help)"]
