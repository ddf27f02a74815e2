"""For the docs, not a benchmark nor part of the suite: docs/tracking.md's screenshots of a showtell
run in MLflow's UI, made from real parts — a real ``mlflow server`` (tests/tracking_server.py), a
tiny model trained with ``--tracking-uri``, its evaluator (``--export-best bleu4:max``) sending every
evaluation and registering each best export — photographed by Debian's ``chromium`` headless:

* ``docs/images/mlflow-run.png``: ``val/bleu4`` with its interval's bounds (``.lo``, ``.hi``) by step;
* ``docs/images/mlflow-model.png``: the registered model's versions, one per best export.

    apt-get install -y chromium
    .venv/bin/python bench/mlflow_screenshot.py [--steps 800]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from showtell.common import processes  # noqa: E402
from tests.helpers import TINY_DATA, TINY_SIZES  # noqa: E402
from tests.tracking_server import MlflowServer  # noqa: E402

IMAGES = ROOT / "docs" / "images"


def shoot(url: str, out: Path, size: str = "2000,900") -> None:
    """A headless Chromium screenshot of ``url`` after its scripts had 20 s of virtual time."""
    browser = shutil.which("chromium") or sys.exit("no chromium: apt-get install -y chromium")
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={size}", "--virtual-time-budget=20000", f"--screenshot={out}", url],
                   check=True, capture_output=True, timeout=180)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=800)
    args = p.parse_args()
    from showtell.captioning.data import synthetic

    base = Path(tempfile.mkdtemp(prefix="mlflow-screenshot-"))
    synthetic.build(base / "data", TINY_DATA)
    server = MlflowServer(base / "mlflow").start()
    try:
        tracked = ["--tracking-uri", server.uri]
        # the tiny decoder at SGD's default rate: captions worth scoring within a minute of training
        trained = processes.run("train", "--data", str(base / "data"), "--model-dir", str(base / "model"),
                                *TINY_SIZES[:-4], "--train-inception", "false", "--steps", str(args.steps),
                                "--save-every-secs", "0", "--save-every-steps", str(args.steps // 10),
                                "--log-every-steps", "20", *tracked)
        assert trained.returncode == 0, trained.stderr[-2000:]
        evaluated = processes.run("evaluate", "--model-dir", str(base / "model"),
                                  "--data", str(base / "data"),
                                  "--work-dir", str(base / "eval"), "--port", "0", "--policy", "all",
                                  "--meteor", "false", "--export-best", "bleu4:max", "--exit-when-trained",
                                  *tracked, timeout=900)
        assert evaluated.returncode == 0, evaluated.stderr[-2000:]
        client = server.client()
        experiment = client.get_experiment_by_name("showtell").experiment_id
        [run] = client.search_runs([experiment])
        keys = ["val/bleu4", "val/bleu4.lo", "val/bleu4.hi"]
        query = urllib.parse.urlencode({"runs": json.dumps([run.info.run_id]), "metric": json.dumps(keys[0]),
                                        "experiments": json.dumps([experiment]),
                                        "plot_metric_keys": json.dumps(keys), "plot_layout": "{}",
                                        "x_axis": "step"})
        IMAGES.mkdir(parents=True, exist_ok=True)
        shoot(f"{server.uri}/#/metric?{query}", IMAGES / "mlflow-run.png")
        shoot(f"{server.uri}/#/models/showtell", IMAGES / "mlflow-model.png", "2000,700")
        versions = client.search_model_versions("name = 'showtell'")
        print(json.dumps({"run": run.info.run_id, "versions": len(versions),
                          "images": [str(IMAGES / "mlflow-run.png"), str(IMAGES / "mlflow-model.png")]}))
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
