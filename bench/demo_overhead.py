"""What the evaluator costs the trainer in ``showtell demo``: trainer examples/s with the
evaluator beside it (the demo as it runs) ÷ the trainer alone, same settings, one run each.
Goal ≥ 0.9 on a 2-core machine.

Each side trains ``--seconds`` from scratch on the demo's own dataset; examples/s is the
time-weighted mean of the trainer's logged windows (first step — tracing — excluded).  The
evaluator's CPU time and evaluation count are reported so its own cost can be read apart
from any idle cost: an idle evaluator should add nothing.

    .venv/bin/python bench/demo_overhead.py [--seconds 300] [--eval-threads 1]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
from showtell.common import processes  # noqa: E402
from showtell.demo import TRAIN_FLAGS  # noqa: E402

WINDOW = re.compile(r"step (\d+)/\d+ .* ([0-9.]+) examples/s")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")


def trainer_rate(log: str) -> dict:
    windows = [(int(m.group(1)), float(m.group(2))) for m in WINDOW.finditer(log)]
    examples, seconds, previous = 0.0, 0.0, 1
    for step, rate in windows:
        n = (step - previous) * 32  # the demo's batch
        examples, seconds, previous = examples + n, seconds + n / rate, step
    return {"examples_per_sec": round(examples / seconds, 2), "steps": windows[-1][0] if windows else 0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--eval-threads", type=int, default=1)
    args = parser.parse_args()
    out: dict = {"seconds": args.seconds, "eval_threads": args.eval_threads}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        data = tmp_path / "demo" / "data"  # the demo builds the same dataset here and keeps it
        subprocess.run([*processes.command(), "data", "synthetic", "--out", str(data)],
                       check=True, capture_output=True, cwd=ROOT, env=ENV)

        alone = subprocess.run([*processes.command(), "train", "--data", str(data), "--model-dir",
                                str(tmp_path / "alone"), "--max-seconds", str(args.seconds), *TRAIN_FLAGS],
                               capture_output=True, text=True, cwd=ROOT, env=ENV)
        out["alone"] = trainer_rate(alone.stderr)

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        demo_log = tmp_path / "demo.log"
        demo = subprocess.Popen([*processes.command(), "demo", "--dir", str(tmp_path / "demo"),
                                 "--seconds", str(args.seconds), "--port", str(port),
                                 "--eval-threads", str(args.eval_threads)],
                                stdout=open(demo_log, "w"), stderr=subprocess.STDOUT,  # noqa: SIM115
                                cwd=ROOT, env=ENV)
        evaluator_pid, evaluator_cpu = None, 0.0
        try:
            while demo.poll() is None:
                if evaluator_pid is None:
                    found = re.search(r"evaluator pid (\d+)", demo_log.read_text())
                    evaluator_pid = int(found.group(1)) if found else None
                if evaluator_pid is not None:
                    with contextlib.suppress(OSError):  # exited (--exit-when-trained)
                        evaluator_cpu = processes.cpu_seconds(evaluator_pid)
                time.sleep(1)
        except KeyboardInterrupt:
            demo.send_signal(signal.SIGINT)
            demo.wait()
            raise
        out["demo"] = trainer_rate((tmp_path / "demo" / "trainer.log").read_text())
        evaluator_log = (tmp_path / "demo" / "evaluator.log").read_text()
        eval_secs = [float(s) for s in re.findall(r"\(\d+ examples, ([0-9.]+) s", demo_log.read_text())]
        out["evaluator"] = {"cpu_seconds": round(evaluator_cpu, 1),
                            "evaluations": evaluator_log.count(": ok "),
                            "evaluation_seconds": round(sum(eval_secs), 1),
                            "exit_code": demo.returncode}
    ratio = out["demo"]["examples_per_sec"] / out["alone"]["examples_per_sec"]
    out["ratio_demo_over_alone"] = round(ratio, 3)
    out["goal"] = 0.9
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
