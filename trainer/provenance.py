"""What a run's record says trained it (Model Garden's ``params.yaml``, big_vision's saved config):
every setting after flags, environment and defaults are resolved, what they resolved to in the
task (the phase, the strategy, the steps per call), and the versions, devices, data and encoder it
ran with.  ``ModelDir.revise`` keeps it in ``<model-dir>/runs/<run id>.json``, a revision per
start whose settings changed, and beside it the ``.yaml`` that ``showtell train --config`` repeats.
"""

from __future__ import annotations

import dataclasses
import hashlib
import platform
from typing import Any

from showtell.captioning.data.dataset import MANIFEST
from showtell.common.versions import installed_version


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


def configuration(settings: dict[str, Any], task: Any, strategy: str, steps_per_loop: int,
                  encoder: bool = True) -> dict[str, Any]:
    """The whole configuration of this start of a run: every setting (by flag), what they resolved
    to, and where it runs."""
    return {"command": "train", "settings": dict(settings),
            "resolved": resolved(task, strategy, steps_per_loop),
            "environment": environment(task, encoder)}
