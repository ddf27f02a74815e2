"""Three consecutive ``make demo`` in one fresh clone, as a new user runs them: what each one's
console showed, and the model each one ended with, evaluated on scenes of a seed it never saw.

Clones this checkout's HEAD into a temporary directory, installs it (``make install``, timed apart:
not part of a demo), then runs ``make demo`` ``--runs`` times in that clone — each one resumes the
last one's pretraining and trains a new run, as the README says.  After each, the final model is
evaluated with ``showtell evaluate --once`` on ``--held-out`` validation scenes of seed 424242
(built once, greedy, METEOR off).  From each demo's console: the first ``[evaluation]`` line's
time, the longest quiet, the evaluations, the trainers' final checkpoint → exit, the time in
all; from its logs and history: pretraining's steps and held-out accuracy, the final exact match
(BLEU-4, CIDEr) on the validation split and on the unseen set, each with its interval.  Alone on
the machine: a demo takes both cores.

    .venv/bin/python bench/demo.py --out bench/results/demo.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rounds import add_out, publish  # noqa: E402

HELD_OUT_SEED = 424242
STAMP = re.compile(r"^ *(\d+):(\d\d) \[(\w[\w ]*)\] ", re.M)


def _seconds(minutes: str, seconds: str) -> int:
    return int(minutes) * 60 + int(seconds)


def console_figures(text: str) -> dict[str, object]:
    """What a demo's console showed: its stamped lines' times, gaps and kinds."""
    stamps = [(_seconds(m, s), tag) for m, s, tag in STAMP.findall(text)]
    times = [t for t, _ in stamps]
    first = next((t for t, tag in stamps if tag == "evaluation"), None)
    exits = [int(s) for s in re.findall(r"\[demo\] the trainer exited 0, (\d+) s after its final checkpoint",
                                        text)]
    return {"first_evaluation_s": first,
            "longest_quiet_s": max((b - a for a, b in itertools.pairwise(times)), default=None),
            "evaluations": len(re.findall(r"\[evaluation\] step", text)),
            "trainer_exit_after_final_checkpoint_s": exits,
            "console_last_s": times[-1] if times else None}


def pretraining(log: str) -> dict[str, object]:
    """Pretraining's steps (this demo's, and in all) and its held-out accuracy at its end."""
    found = re.findall(r"pretrained (\d+) steps in (\d+) s \(loss [\d.]+; (\d+) steps in all\); "
                       r"held-out accuracy: (.*)$", log, re.M)
    if not found:
        return {}
    steps, seconds, total, accuracy = found[-1]
    return {"steps": int(steps), "seconds": int(seconds), "steps_in_all": int(total), "held_out": accuracy}


def final_evaluations(base: Path) -> dict[str, object]:
    """The current run's last evaluation of each set (the demo's history), with intervals."""
    from showtell.common.model_dir import ModelDir
    from showtell.evaluator.records.store import Store

    run = ModelDir(base / "model").read_run_id()
    store = Store(base / "model-eval" / "evaluations.sqlite")
    try:
        out = {}
        for name in ("val", "unseen"):
            last = store.latest(run, eval_set=name)
            if last is not None:
                out[name] = {"step": last.step, "examples": last.num_examples,
                             **{m: round(v, 4) for m, v in last.metrics.items()
                                if m in ("exact_match", "bleu4", "cider")},
                             "exact_match_interval": [round(b, 4)
                                                      for b in last.intervals.get("exact_match", ())]}
        return {"run": run, **out}
    finally:
        store.close()


def held_out(clone: Path, seed_dir: Path) -> dict[str, object]:
    done = subprocess.run([str(clone / ".venv" / "bin" / "showtell"), "evaluate", "--once", "--json",
                           "--beam-size", "1", "--meteor", "false", "--model-dir",
                           str(clone / "runs" / "demo" / "model"), "--data", str(seed_dir)],
                          capture_output=True, text=True, cwd=clone, check=True)
    report = json.loads(done.stdout)
    metrics, intervals = report["metrics"], report.get("intervals", {})
    return {"examples": report.get("examples"), "exact_match": round(metrics["exact_match"], 4),
            "exact_match_interval": [round(b, 4) for b in intervals.get("exact_match", ())]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="consecutive demos in the one clone")
    ap.add_argument("--held-out", type=int, default=900, help="validation scenes of seed 424242")
    ap.add_argument("--seconds", type=int, default=600, help="each demo's DEMO_SECONDS (the Makefile's 600)")
    add_out(ap, "demo")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="showtell-demo-bench-") as tmp:
        clone = Path(tmp) / "showtell"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        started = time.monotonic()
        subprocess.run(["make", "install"], cwd=clone, check=True, capture_output=True)
        report: dict[str, object] = {"install_s": round(time.monotonic() - started), "demos": []}
        seed_dir = Path(tmp) / "held-out"
        showtell = str(clone / ".venv" / "bin" / "showtell")
        subprocess.run([showtell, "data", "synthetic", "--out", str(seed_dir),
                        "--seed", str(HELD_OUT_SEED), "--train", "400", "--train-shards", "1",
                        "--val", str(args.held_out)], check=True, capture_output=True)
        for index in range(args.runs):
            started = time.monotonic()
            done = subprocess.run(["make", "demo", f"DEMO_SECONDS={args.seconds}"], cwd=clone,
                                  capture_output=True, text=True)
            seconds = round(time.monotonic() - started)
            base = clone / "runs" / "demo"
            (Path(tmp) / f"demo-{index + 1}.log").write_text(done.stdout + done.stderr)
            if done.returncode:
                raise SystemExit(f"make demo {index + 1} exited {done.returncode}: {done.stderr[-2000:]}")
            demo = {"in_all_s": seconds, **console_figures(done.stdout),
                    "pretraining": pretraining((base / "pretrain.log").read_text()),
                    "final": final_evaluations(base), "held_out_seed": held_out(clone, seed_dir)}
            print(json.dumps(demo), flush=True)
            report["demos"].append(demo)
    publish(report, args.out)


if __name__ == "__main__":
    main()
