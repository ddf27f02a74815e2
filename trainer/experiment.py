"""``showtell train``'s whole configuration as one typed object: ``TrainExperiment``, built once by
the command (defaults ← ``--config`` files ← environment ← flags, in ``trainer/cli.py``) and
passed down as it is — Model Garden's ``ExperimentConfig``, big_vision's config.  Nothing below
the command sees its flags.

Its sections are the config dataclasses (model, input, optimizer, schedule, feature cache,
compute, monitoring — each field also a flag, written once where it is defined) and the few
settings that say where a run reads and writes, whom it follows and how it is distributed.
``settings`` keeps every setting by flag name as given: what the run's record holds and a resume
compares (``trainer/run_config.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, NamedTuple

from showtell.captioning.config import WEIGHTS_IMAGENET, WEIGHTS_NONE, CacheConfig, InputConfig, ModelConfig
from showtell.common.exposition import MonitoringConfig
from showtell.common.options import config_flags
from showtell.trainer.config import ComputeConfig, OptimizerConfig, TrainConfig


@dataclass(frozen=True)
class Source:
    """Where the run reads and writes, and where its encoder starts."""

    data: Path | None = None
    model_dir: Path | None = None
    image_size: int | None = None  # None: the dataset's
    inception_weights: str = WEIGHTS_NONE  # a weights file, "imagenet" or "none"
    train_inception: bool | None = None  # None: frozen when pretrained, trained from scratch


@dataclass(frozen=True)
class Follow:
    """``--follow-encoder``: a run on a pretraining's encoder that starts again on a newer one."""

    enabled: bool = False
    preview_secs: float = 60.0


@dataclass(frozen=True)
class EarlyStopSettings:
    """``--stop-when``: the evaluator followed, the condition and how it reaches the evaluator."""

    stop_when: str | None = None
    patience: int = 1
    by: str = "value"
    evaluator: str | None = None
    ca: Path | None = None
    auth_token_file: Path | None = None
    tls_server_name: str | None = None


@dataclass(frozen=True)
class Distribution:
    """How the run is spread over devices and tasks (``tf.distribute``)."""

    strategy: str = "auto"
    devices: tuple[str, ...] | None = None
    logical_cpus: int | None = None
    ps_hosts: str | None = None
    worker_hosts: str | None = None
    chief_host: str | None = None
    job_name: str | None = None
    task_index: int | None = None
    log_device_placement: bool = False


class StepRange(NamedTuple):
    """``--profile-steps A:B``: global steps A to B; printed as its flag writes it."""

    first: int
    last: int

    def __str__(self) -> str:
        return f"{self.first}:{self.last}"


@dataclass(frozen=True)
class Runtime:
    """How this process reports: a profiler trace of steps A to B, debug logs, the log format."""

    profile_steps: StepRange | None = None
    verbose: bool = False
    log_format: str = "text"


@dataclass(frozen=True)
class TrainExperiment:
    """One run's configuration, every section typed."""

    source: Source = field(default_factory=Source)
    model: ModelConfig = field(default_factory=ModelConfig)
    input: InputConfig = field(default_factory=InputConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    monitoring: MonitoringConfig = field(default_factory=MonitoringConfig)
    follow: Follow = field(default_factory=Follow)
    early_stop: EarlyStopSettings = field(default_factory=EarlyStopSettings)
    distribution: Distribution = field(default_factory=Distribution)
    runtime: Runtime = field(default_factory=Runtime)
    settings: dict[str, Any] = field(default_factory=dict, compare=False)  # by flag name, as given

    @property
    def followed_encoder(self) -> Path | None:
        """The encoder file ``--follow-encoder`` follows (None: off, or a source that is not a file)."""
        if not self.follow.enabled or self.source.inception_weights in (WEIGHTS_NONE, WEIGHTS_IMAGENET):
            return None
        return Path(self.source.inception_weights)


# The sections made of config dataclasses: each ``option`` field is a flag and a dotted key.
CONFIG_SECTIONS = {"model": ModelConfig, "input": InputConfig, "optimizer": OptimizerConfig,
                   "train": TrainConfig, "cache": CacheConfig, "compute": ComputeConfig,
                   "monitoring": MonitoringConfig}
# The other sections' keys → their flags' dests (the flags are written in ``trainer/cli.py``).
OTHER_KEYS = {
    "source.data": "data", "source.model_dir": "model_dir", "source.image_size": "image_size",
    "source.inception_weights": "inception_weights", "source.train_inception": "train_inception",
    "follow.enabled": "follow_encoder", "follow.preview_secs": "preview_secs",
    "early_stop.stop_when": "stop_when", "early_stop.patience": "patience", "early_stop.by": "stop_when_by",
    "early_stop.evaluator": "evaluator", "early_stop.ca": "evaluator_ca",
    "early_stop.auth_token_file": "evaluator_auth_token_file",
    "early_stop.tls_server_name": "evaluator_tls_server_name",
    **{f"distribution.{f}": f for f in ("strategy", "devices", "logical_cpus", "ps_hosts", "worker_hosts",
                                        "chief_host", "job_name", "task_index", "log_device_placement")},
    "runtime.profile_steps": "profile_steps", "runtime.verbose": "verbose",
    "runtime.log_format": "log_format",
}


SECTIONS = {"source": Source, **CONFIG_SECTIONS, "follow": Follow, "early_stop": EarlyStopSettings,
            "distribution": Distribution, "runtime": Runtime}


def from_flags(flags: dict[str, Any], settings: dict[str, Any]) -> TrainExperiment:
    """The experiment from every flag's value by dest (``vars(args)``), each placed by its dotted
    key — the one table (``keys``) that says which flag is which field."""
    values: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for key, dest in keys().items():
        section, name = key.split(".", 1)
        values[section][name] = flags[dest]
    devices = values["distribution"]["devices"]
    values["distribution"]["devices"] = tuple(devices) if devices else None
    built = {name: cls(**values[name]) for name, cls in SECTIONS.items()}
    built["input"] = replace(built["input"], seed=built["train"].seed)  # the run's seed orders its input
    return TrainExperiment(**built, settings=settings)


def keys() -> dict[str, str]:
    """Every setting of ``showtell train`` by its dotted key → its flag's dest, in the order of
    ``TrainExperiment``'s sections."""
    found = {f"{section}.{f.name}": flag.lstrip("-").replace("-", "_")
             for section, config in CONFIG_SECTIONS.items() for f, flag in config_flags(config)}
    every = {**found, **OTHER_KEYS}
    order = [f.name for f in fields(TrainExperiment)]
    return dict(sorted(every.items(), key=lambda item: order.index(item[0].split(".")[0])))
