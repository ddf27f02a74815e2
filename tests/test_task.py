"""``CaptionTask`` only builds: model, optimizers, global step, datasets and steps.  Built alone —
no model dir, no trainer — it trains a step; nothing is written and nothing is set on it after
construction (the checkpoints, the feature cache, scratch dirs and the rates a resume resets are
the ``Trainer``'s).  In process: nothing crosses a process boundary."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from showtell.captioning.config import CacheConfig, InputConfig, ModelConfig
from showtell.trainer import build_task
from showtell.trainer.config import OptimizerConfig, TrainConfig
from showtell.trainer.experiment import Source, TrainExperiment
from showtell.trainer.step.task import CaptionTask


def _files(root: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in root.rglob("*")}


def test_a_task_builds_alone_and_trains_a_step_with_no_model_dir(tiny_data: Path, tmp_path: Path,
                                                                 tmp_path_factory, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # a copy: other workers' trainers write the shared set's feature cache meanwhile
    tiny_data = Path(shutil.copytree(tiny_data, tmp_path_factory.mktemp("task") / "data"))
    data_before = _files(tiny_data)
    task = build_task(TrainExperiment(
        source=Source(data=tiny_data, train_inception=False),
        model=ModelConfig(embedding_size=16, lstm_units=16),
        input=InputConfig(batch_size=2, shuffle_buffer=8, deterministic=True),
        optimizer=OptimizerConfig(name="adam", learning_rate=1e-3, epochs_per_decay=0),
        train=TrainConfig(seed=1), cache=CacheConfig(enabled=False)))
    assert isinstance(task, CaptionTask) and not task.phase.trains_encoder and task.model_config.vocab_size
    # the assembly's other parts, called alone: no cluster; no model dir, nothing resolved
    from showtell.trainer.assembly import resolved_sections
    from showtell.trainer.distribution.placement import Site, locate

    experiment = TrainExperiment(source=Source(data=tiny_data))
    site = locate(experiment.distribution, None)
    assert site == Site(None, "auto") and site.is_chief and not site.serves  # auto: place() decides
    assert resolved_sections(experiment) == {}
    built = dict(vars(task))
    assert not {"checkpoints", "scratch", "_cache", "is_chief"} & set(built)  # the trainer's, not the task's
    dataset = task.dataset()
    step = task.make_train_step(dataset.element_spec)
    task.make_train_loop()
    loss = float(step(next(iter(dataset))))
    assert np.isfinite(loss) and loss > 0 and task.step == 1
    after = dict(vars(task))
    assert after.keys() == built.keys() and all(after[k] is built[k] for k in built)  # nothing set later
    assert _files(tiny_data) == data_before and os.listdir(tmp_path) == []  # nothing written
