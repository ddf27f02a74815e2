"""Real local clusters as separate processes on 127.0.0.1.

* parameter_server: 1 ps, 2 workers, a chief, and an evaluator following the checkpoints; a
  worker killed mid-training is survived, rejoins and trains again; a killed ps fails the chief in one line,
  and the restarted cluster (the chief first: it says it waits for its ps) resumes from the last
  checkpoint with the global step intact — phase 1 on the frozen encoder's features, then phase 2
  training the encoder as well; every process started is stopped cleanly: the
  evaluator (a service with no end of its own) exits 0 on SIGTERM, servers and a chief stopped
  before finishing exit 143/130 (not done: Kubernetes must replace them, not count them complete).
* multi_worker: 2 worker processes train synchronously; only the chief (worker 0) writes.  On the
  frozen encoder's cached features: the all-reduce is what is under test, and the encoder's
  gradient traced on both workers cost 50 CPU-s (towers and the ps cluster train it).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import grpc
import pytest
import tensorflow as tf

from showtell.v1 import metrics_pb2
from tests.helpers import Procs, error_lines, metrics_stub, start_evaluator, wait_for
from tests.measure import cpu_seconds, free_ports

pytestmark = pytest.mark.e2e

MODEL = ["--embedding-size", "32", "--lstm-units", "32", "--batch-size", "4", "--optimizer", "adam",
         "--learning-rate", "0.001", "--save-every-secs", "0", "--log-every-steps", "2"]



def logged_step(log: Path) -> int:
    steps = re.findall(r"step (\d+)/\d+", log.read_text())
    return int(steps[-1]) if steps else 0


def stop_cleanly(proc: subprocess.Popen, log: Path, code: int = 143) -> None:
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=60) == code, log.read_text()[-2000:]


def step_of(checkpoint: str) -> int:
    return int(tf.train.load_variable(checkpoint, "step/.ATTRIBUTES/VARIABLE_VALUE"))


def test_parameter_server_cluster(tiny_data: Path, tmp_path: Path, procs: Procs):
    ps, w0, w1, chief = (f"127.0.0.1:{p}" for p in free_ports(4))
    model_dir = tmp_path / "model"
    cluster = ["--strategy", "parameter_server", "--ps-hosts", ps, "--worker-hosts", f"{w0},{w1}",
               "--chief-host", chief]
    base = ["train", "--data", str(tiny_data), "--model-dir", str(model_dir), *MODEL, *cluster]

    def task(job: str, index: int, *extra: str) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / f"{job}{index}-{len(procs.started)}.log"
        return procs.start(*base, "--job-name", job, "--task-index", str(index), *extra, log=log), log

    servers = {"ps": task("ps", 0), "w0": task("worker", 0), "w1": task("worker", 1)}
    evaluator, port = start_evaluator(procs, model_dir, tiny_data, tmp_path / "eval", tmp_path / "eval.log",
                                      "--policy", "latest", "--max-eval-examples", "4")
    # Phase 1 (the decoder on the frozen encoder's cached features), as the cluster stack runs it.
    coordinator, chief_log = task("chief", 0, "--steps", "1000", "--save-every-steps", "4",
                                  "--train-inception", "false")

    # A worker lost mid-training: the coordinator re-runs its steps on the other and goes on; the
    # worker, rescheduled, comes back.
    wait_for(lambda: logged_step(chief_log) >= 6 or coordinator.poll() is not None, 300, "6 steps")
    os.kill(servers["w1"][0].pid, signal.SIGKILL)
    wait_for(lambda: "Worker /job:worker/replica:0/task:1 failed" in chief_log.read_text()
             or coordinator.poll() is not None, 120, "the coordinator to notice the lost worker")
    lost_at = logged_step(chief_log)
    servers["w1"] = task("worker", 1)
    # The rescheduled worker is taken back and trains: once it serves, the new process works as
    # hard as the worker that never left (an idle TensorFlow server costs next to nothing: it
    # would show ≈ 0 against the other's share).
    wait_for(lambda: "serving worker:1 at" in servers["w1"][1].read_text(), 120, "the new worker to serve")
    recovered_at = logged_step(chief_log)
    wait_for(lambda: logged_step(chief_log) >= recovered_at + 2 or coordinator.poll() is not None, 300,
             "2 steps after the worker came back")
    cpu = {name: cpu_seconds(servers[name][0].pid) for name in ("w0", "w1")}
    wait_for(lambda: logged_step(chief_log) >= max(lost_at + 8, recovered_at + 10)
             or coordinator.poll() is not None, 300, "8 more steps with both workers")
    share = {name: cpu_seconds(servers[name][0].pid) - before for name, before in cpu.items()}
    assert coordinator.poll() is None, chief_log.read_text()[-3000:]
    assert share["w1"] >= 0.3 * share["w0"] > 0, share
    assert "placement: replicas on 2 workers (one replica each); variables on /job:ps/replica:0/task:0" \
        in chief_log.read_text()

    # A lost ps: the chief fails in one line, exit 138 (worth a restart: Kubeflow's ExitCode policy
    # retries it); the restarted cluster resumes at the last checkpoint.
    os.kill(servers["ps"][0].pid, signal.SIGKILL)
    assert coordinator.wait(timeout=300) == 138, chief_log.read_text()[-3000:]
    # One line of ours (TensorFlow's C++ threads may still print their gRPC details around it).
    [error] = [line for line in error_lines(chief_log.read_text())
               if line.startswith("showtell train: error")]
    assert error.startswith("showtell train: error: the training cluster failed: parameter server "
                            "/job:ps/task:0 is unreachable"), error
    saved = step_of(tf.train.latest_checkpoint(str(model_dir)))
    assert saved > lost_at  # saved after the lost worker (re-run steps: not always a multiple of 4)

    # The chief restarted before its ps (a rescheduled pod): it says it waits, then trains — phase 2
    # here: the encoder fine-tuned with the decoder, its variables on the ps as well.  No periodic
    # save: the only checkpoint after the resume is the one the stop below makes.
    coordinator, chief_log = task("chief", 0, "--steps", "100000", "--save-every-steps", "100000",
                                  "--train-inception", "true")
    wait_for(lambda: "waiting for ps:0" in chief_log.read_text() or coordinator.poll() is not None, 120,
             "the chief to say it waits for its ps")
    assert f"waiting for ps:0 ({ps}) to answer" in chief_log.read_text()
    servers["ps"] = task("ps", 0)
    wait_for(lambda: logged_step(chief_log) >= saved + 2 or coordinator.poll() is not None, 600,
             "2 steps of phase 2")
    text = chief_log.read_text()
    assert f"ckpt-{saved} at step {saved}" in text and "encoder trains: --train-inception true" in text

    # The whole cluster stopped at once (a scheduler preempting the set, `compose down`): the chief's
    # final save still lands — the ps and workers serve on until it does — and every task exits 143.
    assert coordinator.poll() is None and not list(model_dir.glob(f"ckpt-{saved + 1}*"))
    tasks = [(coordinator, chief_log), servers["ps"], servers["w0"], servers["w1"]]
    for proc, _ in tasks:
        os.kill(proc.pid, signal.SIGTERM)
    for proc, log in tasks:
        assert proc.wait(timeout=120) == 143, log.read_text()[-3000:]
    state = tf.train.get_checkpoint_state(str(model_dir))
    final = step_of(state.model_checkpoint_path)
    assert final > saved + 1 and Path(state.model_checkpoint_path).name == f"ckpt-{final}"
    assert "the chief's checkpoint landed: stopping the server" in servers["ps"][1].read_text()

    # The evaluator, running all along, evaluated the final checkpoint the coordinator wrote.
    channel, stub = metrics_stub(port)
    with channel:
        latest = wait_for(lambda: _latest(stub, final), 300, f"the evaluation of ckpt-{final}")
    assert latest.status == metrics_pb2.Evaluation.STATUS_OK and latest.metrics["loss"] > 0
    stop_cleanly(evaluator, tmp_path / "eval.log", code=0)


def test_a_chief_waiting_for_its_ps_sleeps_and_stops_when_asked(tiny_data: Path, tmp_path: Path,
                                                                 procs: Procs):
    """No ps yet: the chief says whom it waits for, costs no CPU meanwhile, and a SIGTERM ends it
    (TensorFlow's own connect would wait on, deaf to the signal)."""
    ps, w0, w1, chief = (f"127.0.0.1:{p}" for p in free_ports(4))
    log = tmp_path / "chief.log"
    proc = procs.start("train", "--data", str(tiny_data), "--model-dir", str(tmp_path / "model"), *MODEL,
                       "--strategy", "parameter_server", "--ps-hosts", ps, "--worker-hosts", f"{w0},{w1}",
                       "--chief-host", chief, "--job-name", "chief", "--steps", "4", log=log)
    wait_for(lambda: "waiting for ps:0" in log.read_text() or proc.poll() is not None, 120,
             "the chief to say it waits for its ps")
    before, started = cpu_seconds(proc.pid), time.monotonic()
    time.sleep(5)
    share = (cpu_seconds(proc.pid) - before) / (time.monotonic() - started)
    assert share < 0.05, f"a chief waiting for its ps used {share:.0%} of a core"
    os.kill(proc.pid, signal.SIGINT)  # Ctrl-C: not finished, so not exit 0
    assert proc.wait(timeout=30) == 130, log.read_text()[-2000:]
    assert "SIGINT) while waiting for the parameter servers: nothing was trained" in log.read_text()
    assert not (tmp_path / "model").exists() or not list((tmp_path / "model").glob("ckpt-*"))


def _latest(stub, step: int):
    try:
        reply = stub.GetLatest(metrics_pb2.GetLatestRequest(), timeout=5).evaluation
    except grpc.RpcError:
        return None
    return reply if reply.global_step == step else None


def test_multi_worker_trains_synchronously_and_only_the_chief_writes(tiny_data: Path, tmp_path: Path,
                                                                     procs: Procs):
    hosts = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
    model_dir = tmp_path / "model"
    workers = []
    for index in range(2):
        log = tmp_path / f"worker{index}.log"
        proc = procs.start("train", "--data", str(tiny_data), "--model-dir", str(model_dir), *MODEL,
                           "--strategy", "multi_worker", "--worker-hosts", hosts, "--job-name", "worker",
                           "--task-index", str(index), "--steps", "4", "--save-every-steps", "2",
                           "--train-inception", "false", log=log)
        workers.append((proc, log))
    for proc, log in workers:
        assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    chief, other = (log.read_text() for _, log in workers)
    assert "global batch 8 = 4 per replica × 2 replicas" in chief
    for text in (chief, other):
        assert re.search(r"step 4/4  loss (\d+\.\d+)", text)
    # Synchronous: both workers report the same (all-reduced) losses.
    losses = [re.findall(r"step \d+/4  loss (\d+\.\d+)", text) for text in (chief, other)]
    assert losses[0] == losses[1] and len(losses[0]) >= 2
    state = tf.train.get_checkpoint_state(str(model_dir))
    assert [Path(p).name for p in state.all_model_checkpoint_paths] == ["ckpt-2", "ckpt-4"]
    assert step_of(state.model_checkpoint_path) == 4
    scratch = re.search(r"saved checkpoint (\S*showtell-worker-\S+)/ckpt-4", other)
    assert scratch and not Path(scratch.group(1)).exists()  # the non-chief's copy is gone
