"""A run's whole configuration, recorded in its model dir: every setting after flags, environment
and defaults are resolved, what they resolved to (the phase, the strategy, the steps per call),
and the versions, devices, data and encoder it ran with — one history per run,
``<model-dir>/runs/<run id>.json``, written atomically at every start of the run, and beside it
``<run id>.yaml``: the run as it stands, in ``--print-config``'s form, which
``showtell train --config <run id>.yaml --model-dir NEW`` repeats.

A resume whose settings differ (more steps, another save interval or learning rate: the ones
that may change mid-run; model shape and optimizer are refused earlier, by
``modeldir.check_model_dir``) appends a revision saying what changed, so the file answers "what
exactly trained this checkpoint" and a run can be repeated from its model dir (Model Garden's
``params.yaml``, big_vision's saved config).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import platform
import time
from pathlib import Path
from typing import Any

from showtell.captioning.data.manifest import MANIFEST
from showtell.common.files import write_atomic
from showtell.common.run_records import RUNS, differences
from showtell.common.setting_sources import settings_yaml
from showtell.common.versions import installed_version
from showtell.trainer.experiment import TrainExperiment, keys, settings

log = logging.getLogger(__name__)

# Sections a printed configuration holds besides the settings: read by people, passed over by --config.
SECTIONS = ("resolved", "environment")


def resolved(task: Any, strategy: str, steps_per_loop: int) -> dict[str, Any]:
    """What the settings resolved to in this task (``CaptionTask``)."""
    optimizer = task.phase.encoder_optimizer
    return {
        "model": dataclasses.asdict(task.model_config),
        "input": dataclasses.asdict(task.input_config),
        "optimizer": dataclasses.asdict(task.optimizer_config),
        "encoder_optimizer": dataclasses.asdict(optimizer) if optimizer else None,
        "train": dataclasses.asdict(task.train_config),
        "compute": {**dataclasses.asdict(task.compute), "steps_per_loop": steps_per_loop},
        "phase": task.phase.describe(), "uses_cache": task.uses_cache,
        "strategy": strategy, "replicas": task.strategy.num_replicas_in_sync, "global_batch": task.batch_size,
        "steps_per_epoch": task.steps_per_epoch,
    }


def environment(task: Any, encoder: bool = True) -> dict[str, Any]:
    """Versions, devices, the data's identity and (``encoder``: once its weights are in place)
    the encoder's values at the start."""
    import keras
    import tensorflow as tf

    from showtell.captioning.weights.encoder import weights_digest

    manifest = task.data_dir / MANIFEST
    return {
        "showtell": installed_version(), "tensorflow": tf.__version__, "keras": keras.__version__,
        "python": platform.python_version(), "platform": platform.platform(),
        "devices": [d.name for d in tf.config.list_logical_devices()],
        "data": {"dir": str(task.data_dir), "builder": task.manifest.builder,
                 "manifest_sha256": hashlib.sha256(manifest.read_bytes()).hexdigest()},
        **({"encoder_sha256": weights_digest(task.model.encoder_weights)} if encoder else {}),
    }


def configuration(experiment: TrainExperiment, task: Any, strategy: str, steps_per_loop: int,
                  encoder: bool = True) -> dict[str, Any]:
    """The whole configuration of this start of a run: every setting, read from the experiment."""
    return {"command": "train", "settings": settings(experiment),
            "resolved": resolved(task, strategy, steps_per_loop),
            "environment": environment(task, encoder)}


def record(model_dir: Path, run_id: str, config: dict[str, Any], step: int) -> list[str]:
    """Write ``config`` as the run's first revision, or — resumed — a new revision when a setting
    differs from the last one's.  Returns what changed (``flag: old → new``; [] when nothing did)."""
    path = model_dir / RUNS / f"{run_id or 'unnamed'}.json"
    history = _read(path)
    revision = {"at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "step": step, **config}
    changed: list[str] = []
    if history["revisions"]:
        last = history["revisions"][-1]
        changed = differences(last["settings"], config["settings"])
        if not changed:
            return []
        revision["changed"] = changed
    history["revisions"].append(revision)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(history, indent=2) + "\n")
    return changed


def record_yaml(model_dir: Path, run_id: str, config: dict[str, Any], step: int) -> Path:
    """``runs/<run id>.yaml``: this start's settings and sections as ``--print-config`` prints them
    — the file to repeat the run from (rewritten at every start: the run as it stands)."""
    path = model_dir / RUNS / f"{run_id or 'unnamed'}.yaml"
    header = (f"showtell train: run {run_id or 'unnamed'} as it started at step {step}; repeat it with "
              f"showtell train --config {path.name} --model-dir NEW")
    path.parent.mkdir(parents=True, exist_ok=True)
    revisions = _read(model_dir / RUNS / f"{run_id or 'unnamed'}.json")["revisions"]
    # Which start of the run this is (--config refuses a later revision: it would not repeat the run)
    revision = {"number": max(1, len(revisions)), "run_id": run_id or "unnamed", "step": step,
                **({"changed": revisions[-1].get("changed", [])} if len(revisions) > 1 else {})}
    write_atomic(path, settings_yaml(config["settings"], header,
                                     {**{k: config[k] for k in SECTIONS}, "revision": revision}, keys()))
    return path


def ended(model_dir: Path, run_id: str, step: int, reason: str, finished: bool) -> None:
    """A start of the run ended: at which step, why, and whether the run is done (``showtell runs``
    shows the last)."""
    path = model_dir / RUNS / f"{run_id or 'unnamed'}.json"
    history = _read(path)
    history.setdefault("ends", []).append({"at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "step": step,
                                           "reason": reason, "finished": finished})
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(history, indent=2) + "\n")


def _read(path: Path) -> dict[str, Any]:
    """The run's record so far; an unreadable one is moved aside (named in the log), never lost."""
    try:
        history = json.loads(path.read_text())
        if isinstance(history.get("revisions"), list):
            return history
        raise ValueError("no revisions list")
    except FileNotFoundError:
        return {"run_id": path.stem, "revisions": []}
    except (OSError, ValueError) as exc:
        aside = path.with_suffix(f".unreadable-{int(time.time())}")
        path.rename(aside)
        log.warning("%s: unreadable (%s); moved aside to %s, this run's configuration starts again",
                    path, exc, aside.name)
        return {"run_id": path.stem, "revisions": []}
