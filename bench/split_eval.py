"""One evaluation split across evaluators (``evaluate --shard I/N``) against one evaluator: real
``showtell evaluate`` services on a real checkpoint, in rounds (``rounds.py``: each round runs
every configuration once, in alternating order, and a ratio is the median of the per-round ones).

* ``one``: one evaluator pinned to core 0 (``taskset -c 0``, ``--threads 1``);
* ``split``: part 0 pinned to core 0 and part 1 to core 1, the same flags plus ``--shard``;
* ``free``: one evaluator free on both cores, TensorFlow's own threads — what a user tries first.

Each configuration starts on an empty model dir (COCO's shape: 299 px, 5 captions an image, the
512/512 model, a 12,000-word vocabulary, beam 3, METEOR where Java runs, every interval); once it
serves, checkpoint ``ckpt-1`` is published (the state file renamed in last, as TensorFlow does)
and evaluated — the warm-up: the model built, its functions traced, the scorers' JVMs started —
then ``ckpt-2``, whose encoder differs (a phase-2 checkpoint: no features to reuse).  Timed on
``ckpt-2``: from its state file's rename to its record in the served history (the merged one for
the split), and the CPU every process of the configuration used meanwhile (their JVMs
included).  The merge's own cost is the merged record's ``costs.seconds.merge``: reading the
parts' files and interleaving them (its scoring is the scoring one evaluator does too).

Projected to N parts: the encoder and decoder's time divides by N (each part's images); the
scoring and the intervals stay whole, on part 0; so an evaluation takes
``evaluate / N + scoring`` of the median round's ``one`` figures, against ``evaluate + scoring``.

    .venv/bin/python bench/split_eval.py [--images 500] [--rounds 3] [--out bench/results/split_eval.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf
from eval_throughput import COCO_VOCABULARY
from feature_reuse import dataset
from rounds import add_out, alternate, publish, ratio, spread

from showtell.captioning.config import ModelConfig
from showtell.captioning.data.dataset import VOCAB, load_dataset
from showtell.captioning.data.vocab import Vocabulary
from showtell.captioning.model.network import build_model
from showtell.common import processes
from showtell.common.model_dir import ModelDir

log = logging.getLogger("split_eval")


def checkpoints(root: Path, data: Path, image_size: int) -> tuple[Path, list[Path]]:
    """The model's files (metadata, vocabulary) in ``model`` and two checkpoints beside it, each
    a directory of its files and state file, to publish one by one; ckpt-2's encoder differs."""
    _, vocab = load_dataset(data)
    filler = tuple(f"word{i}" for i in range(COCO_VOCABULARY - len(vocab)))
    big = Vocabulary(vocab.words + filler, vocab.counts + (1,) * len(filler))
    config = ModelConfig(vocab_size=len(big), image_size=image_size)
    model = build_model(config)
    model((tf.zeros([1, image_size, image_size, 3]), tf.zeros([1, 2], tf.int32)))
    staged, saver = [], tf.train.Checkpoint(model=model)
    for step in (1, 2):
        out = root / f"staged-{step}"
        out.mkdir()
        assert saver.save(str(out / "ckpt")).endswith(f"ckpt-{step}")  # as the trainer's manager names them
        (out / ModelDir.STATE_FILE).write_text(f'model_checkpoint_path: "ckpt-{step}"\n'
                                      f'all_model_checkpoint_paths: "ckpt-{step}"\n')
        staged.append(out)
        for w in model.encoder_weights[-4:]:  # the last block's BN: every feature moves
            w.assign(w + tf.random.uniform(w.shape, 0.0, 0.1, seed=step))
    model_dir = root / "template"
    model_dir.mkdir()
    ModelDir(model_dir).begin(config.shape_fields(), {"dir": str(data)}, {})
    big.save(model_dir / VOCAB)
    return model_dir, staged


def publish_checkpoint(model_dir: Path, staged: Path) -> float:
    """Copy a checkpoint's files in, then its state file by a rename: when the evaluator may see it."""
    for f in staged.iterdir():
        if f.name != ModelDir.STATE_FILE:
            shutil.copy(f, model_dir / f.name)
    shutil.copy(staged / ModelDir.STATE_FILE, model_dir / f".{ModelDir.STATE_FILE}.tmp")
    os.replace(model_dir / f".{ModelDir.STATE_FILE}.tmp", model_dir / ModelDir.STATE_FILE)
    return time.monotonic()


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` (with its reaped children: a PTB tokenizer's JVM) and of its live
    descendants (METEOR's JVM)."""
    def own(p: int) -> float:
        fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")

    total = own(pid)
    for child in processes.descendants(pid):
        with contextlib.suppress(OSError):  # ended meanwhile
            total += own(child)
    return total


def recorded(history: Path, step: int) -> str | None:
    """``step``'s record's costs in a history (None: not yet); an evaluation that failed ends the bench."""
    if not history.exists():
        return None
    with sqlite3.connect(f"file:{history}?mode=ro", uri=True, timeout=5) as db:
        try:
            row = db.execute("SELECT status, reason, costs FROM evaluations WHERE step=? AND eval_set='val'",
                             (step,)).fetchone()
        except sqlite3.Error:
            return None
    if row and row[0] != "ok":
        raise SystemExit(f"step {step}: {row[0]}: {row[1]}")
    return row[2] if row else None


# configuration → (evaluators, pinned one to a core with --threads 1)
CONFIGURATIONS = {"one": (1, True), "split": (2, True), "free": (1, False)}


def run(config: str, root: Path, data: Path, template: Path, staged: list[Path], common: list[str]) -> dict:
    """One configuration's evaluation of ``ckpt-2``, on fresh directories under ``root``."""
    parts, pinned = CONFIGURATIONS[config]
    where = Path(tempfile.mkdtemp(prefix=f"{config}-", dir=root))
    model_dir = where / "model"
    shutil.copytree(template, model_dir)
    procs, logs = [], []
    for index in range(parts):
        split = ["--shard", f"{index}/{parts}", "--parts-dir", str(where / "parts")] if parts > 1 else []
        log_path = where / f"part{index}.log"
        logs.append(log_path)
        pin = ["taskset", "-c", str(index)] if pinned else []
        threads = ["--threads", "1"] if pinned else []
        argv = [*pin, *processes.command(
            "evaluate", "--model-dir", str(model_dir), "--data", str(data),
            "--work-dir", str(where / f"work{index}"), "--host", "127.0.0.1", "--port", "0",
            *common, *threads, *split)]
        handle = open(log_path, "w")  # noqa: SIM115 - closed below
        procs.append((subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
                                       env=processes.environment()), handle))
    history = where / "work0" / "evaluations.sqlite"
    try:
        _wait(lambda: all("work dir" in p.read_text() for p in logs), 600, "the evaluators to start", procs)
        publish_checkpoint(model_dir, staged[0])
        _wait(lambda: recorded(history, 1), 3600, "ckpt-1's record", procs)
        cpu_before = sum(tree_cpu(p.pid) for p, _ in procs)
        t0 = publish_checkpoint(model_dir, staged[1])
        costs = _wait(lambda: recorded(history, 2), 7200, "ckpt-2's record", procs)
        seconds = time.monotonic() - t0
        cpu = sum(tree_cpu(p.pid) for p, _ in procs) - cpu_before
        # --exit-when-trained: each ends by itself
        ModelDir(model_dir).end(2, "ckpt-2", "bench", True, record=False)
        for p, _ in procs:
            p.wait(timeout=300)
    finally:
        for p, handle in procs:
            if p.poll() is None:
                processes.kill_tree(p.pid)
                p.wait()
            handle.close()
    costs = json.loads(costs)
    log.info("%s: ckpt-2 recorded %.1f s after it was published, %.1f CPU-s; %s", config, seconds, cpu, costs)
    shutil.rmtree(where, ignore_errors=True)  # a round's checkpoints and features: GBs at 5,000 images
    return {"seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2), "costs": costs}


def _wait(predicate, timeout: float, what: str, procs):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if any(p.poll() is not None for p, _ in procs):
            raise SystemExit(f"an evaluator ended while waiting for {what}")
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--image-size", type=int, default=299)
    parser.add_argument("--rounds", type=int, default=3)
    add_out(parser, "split_eval")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s: %(message)s")
    # A SIGTERM (a harness's timeout) ends through ``run``'s clean-up: the evaluators it started
    # lead sessions of their own and would outlive the bench (one did, from a killed run).
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("needs 2 cores: one per part")
    common = ["--policy", "all", "--exit-when-trained"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = dataset(root, args.images, args.image_size)
        template, staged = checkpoints(root, data, args.image_size)
        # each run warms itself up (ckpt-1): no untimed round
        runs = alternate({name: lambda name=name: run(name, root, data, template, staged, common)
                          for name in CONFIGURATIONS}, rounds=args.rounds, warm=0)
    seconds = {name: [r["seconds"] for r in done] for name, done in runs.items()}
    cpu = {name: [r["cpu_seconds"] for r in done] for name, done in runs.items()}
    middle = sorted(runs["one"], key=lambda r: r["seconds"])[len(runs["one"]) // 2]  # the median round's
    phases = middle["costs"]["seconds"]
    scoring = phases.get("scoring", 0.0) + phases.get("intervals", 0.0)
    evaluate = middle["seconds"] - scoring
    merges = [r["costs"]["seconds"].get("merge", 0.0) for r in runs["split"]]
    report = {
        "images": args.images, "image_size": args.image_size, "vocabulary": COCO_VOCABULARY, "beam_size": 3,
        "rounds": args.rounds,
        "configurations": {"one": "one evaluator, core 0, --threads 1",
                           "split": "parts 0/2, 1/2 on cores 0, 1, --threads 1 each",
                           "free": "one evaluator on both cores, TensorFlow's threads"},
        "seconds": {name: spread(values) for name, values in seconds.items()},
        "cpu_seconds": {name: spread(values) for name, values in cpu.items()},
        "wall_ratio_one_over_split": ratio(seconds["one"], seconds["split"]),
        "wall_ratio_free_over_split": ratio(seconds["free"], seconds["split"]),
        "cpu_ratio_split_over_one": ratio(cpu["split"], cpu["one"]),
        "cpu_ratio_split_over_free": ratio(cpu["split"], cpu["free"]),
        "merge_seconds": spread(merges, 3),
        "merge_share_of_one_evaluation": round(max(merges) / min(seconds["one"]), 5),
        "projected": {
            "method": "evaluate / N + scoring, the median round's one-evaluator figures (scoring and "
                      "intervals stay whole, on part 0)",
            **{f"{n}_parts_wall_ratio": round(middle["seconds"] / (evaluate / n + scoring), 2)
               for n in (2, 4, 8)}},
        "runs": runs,
    }
    publish(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
