"""``showtell train``'s whole configuration as one typed object: ``TrainExperiment``, built once by
the command (defaults ← ``--config`` files ← environment ← flags, in ``showtell/commands/train.py``)
and passed down whole — Model Garden's ``ExperimentConfig``, big_vision's config.  Nothing below
the command sees its flags.

Every section is a dataclass whose ``option`` fields are the flags and dotted keys, each written
once where it is defined: the config dataclasses (model, input, optimizer, schedule, feature cache,
compute, monitoring, tracking) and, here, where a run reads and writes, whom it follows, how it is
distributed and how it reports.  The run's record (``settings``: every setting by flag name) is
derived from the experiment, never carried beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from showtell.captioning.config import (
    MIN_IMAGE_SIZE,
    WEIGHTS_IMAGENET,
    WEIGHTS_NONE,
    CacheConfig,
    InputConfig,
    ModelConfig,
)
from showtell.common.exposition import MonitoringConfig
from showtell.common.logs import FORMATS
from showtell.common.options import Invalid, boolean, check, config_flags, option, or_auto, positive_float
from showtell.common.options import positive_int as _positive_int
from showtell.common.tracking import TrackingConfig
from showtell.trainer.config import ComputeConfig, OptimizerConfig, TrainConfig
from showtell.trainer.distribution.cluster import Distribution


@check("image size")
def image_size(text: str) -> int:
    value = _positive_int(text)
    if value < MIN_IMAGE_SIZE:
        raise Invalid(f"must be ≥ {MIN_IMAGE_SIZE}, Inception v3's minimum (got {text})")
    return value


class StepRange(NamedTuple):
    """``--profile-steps A:B``: global steps A to B; printed as its flag writes it."""

    first: int
    last: int

    def __str__(self) -> str:
        return f"{self.first}:{self.last}"


@check("step range A:B")
def step_range(text: str) -> StepRange:
    first, _, last = text.partition(":")
    try:
        a, b = int(first), int(last)
    except ValueError:
        a = b = 0
    if not 1 <= a <= b:
        raise Invalid(f"expected A:B with 1 ≤ A ≤ B, e.g. 100:110 (got '{text}')")
    return StepRange(a, b)


@dataclass(frozen=True)
class Source:
    """Where the run reads and writes, and where its encoder starts."""

    # required, but not by argparse: --print-config prints a config without them (the command checks)
    data: Path | None = option(None, "dataset directory (from `showtell data`); required", type=Path,
                               shown=True)
    model_dir: Path | None = option(None, "checkpoints and summaries go here; required", type=Path,
                                    shown=True)
    image_size: int | None = option(None, "model input pixels (default: the dataset's image size)",
                                    type=image_size, shown=True)
    inception_weights: str = option(
        WEIGHTS_NONE, "encoder start for a new model dir: a Keras .h5/.weights.h5 file, a TF-slim "
                      f"inception_v3.ckpt, {WEIGHTS_IMAGENET} (download) or {WEIGHTS_NONE}",
        metavar="SOURCE", shown=True)
    train_inception: bool | None = option(
        None, "train the encoder (phase 2); default (auto) false for a pretrained encoder (phase 1, "
              "frozen), true from scratch", type=or_auto(boolean), shown=True)


@dataclass(frozen=True)
class Follow:
    """Following a pretraining's encoder (--follow-encoder)."""

    enabled: bool = option(
        False, "wait for the --inception-weights file, and when a pretraining writes a newer encoder "
               "there, end the run and start a new one on it (the run before is kept in "
               "<model-dir>-preview): a trainer started beside `showtell pretrain --first-save-after`, as "
               "compose does",
        flag="--follow-encoder", type=boolean, shown=True)
    preview_secs: float = option(
        60.0, "with --follow-encoder, on a first encoder (its pretraining not done): train S seconds, "
              "then wait, asleep, for the final one (the pretraining gets the CPU back)",
        type=positive_float, metavar="S")


@dataclass(frozen=True)
class EarlyStopSettings:
    """Early stop (follows an evaluator)."""

    stop_when: str | None = option(
        None, "stop (final checkpoint, exit 0) when the evaluator reports this, e.g. 'cider>=0.9' or "
              "'loss<=2.1'", metavar="'METRIC>=X'", shown=True)
    patience: int = option(1, "consecutive qualifying evaluations needed", type=_positive_int)
    by: str = option("value", "value: the metric itself meets the target; interval: its confidence "
                              "interval's far bound does — met beyond noise, later and surer",
                     flag="--stop-when-by", choices=("value", "interval"))
    evaluator: str | None = option(None, "the evaluator's gRPC address for --stop-when",
                                   metavar="HOST:PORT", shown=True)
    ca: Path | None = option(None, "PEM CA bundle (or self-signed cert) that signed --evaluator's "
                                   "certificate: connect with TLS", flag="--evaluator-ca", type=Path,
                             env="SHOWTELL_CA")
    auth_token_file: Path | None = option(None, "send the first token in this file to --evaluator",
                                          flag="--evaluator-auth-token-file", type=Path,
                                          env="SHOWTELL_AUTH_TOKEN_FILE")
    tls_server_name: str | None = option(
        None, "the name the certificate was issued to, when it differs from the host you dial",
        flag="--evaluator-tls-server-name", env="SHOWTELL_TLS_SERVER_NAME")


@dataclass(frozen=True)
class Runtime:
    """How this process reports."""

    profile_steps: StepRange | None = option(
        None, "write a TensorFlow profiler trace of global steps A to B into the model dir's TensorBoard "
              "run (TensorBoard's Profile tab; pip install tensorboard-plugin-profile)", type=step_range,
        metavar="A:B")
    verbose: bool = option(False, "debug logs, and TensorFlow's native start-up notices (hidden by default)",
                           short="-v", action="store_true", shown=True)
    log_format: str = option("text", "text or json: one JSON object a line (time, level, logger, message, "
                                     "run and step where known), for log pipelines", choices=FORMATS,
                             shown=True)


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
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    @property
    def followed_encoder(self) -> Path | None:
        """The encoder file ``--follow-encoder`` follows (None: off, or a source that is not a file)."""
        if not self.follow.enabled or self.source.inception_weights in (WEIGHTS_NONE, WEIGHTS_IMAGENET):
            return None
        return Path(self.source.inception_weights)


# Every section, in the experiment's order: each ``option`` field is a flag and a dotted key.
SECTIONS = {"source": Source, "model": ModelConfig, "input": InputConfig, "optimizer": OptimizerConfig,
            "train": TrainConfig, "cache": CacheConfig, "compute": ComputeConfig,
            "monitoring": MonitoringConfig, "follow": Follow, "early_stop": EarlyStopSettings,
            "distribution": Distribution, "runtime": Runtime, "tracking": TrackingConfig}


def from_flags(flags: dict[str, Any]) -> TrainExperiment:
    """The experiment from every flag's value by dest (``vars(args)``), each placed by its dotted
    key — the one table (``keys``) that says which flag is which field."""
    values: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for key, dest in keys().items():
        section, name = key.split(".", 1)
        values[section][name] = flags[dest]
    built = {name: cls(**values[name]) for name, cls in SECTIONS.items()}
    built["input"] = replace(built["input"], seed=built["train"].seed)  # the run's seed orders its input
    return TrainExperiment(**built)


def keys() -> dict[str, str]:
    """Every setting of ``showtell train`` by its dotted key → its flag's dest, in the order of
    ``TrainExperiment``'s sections."""
    return {f"{section}.{f.name}": flag.lstrip("-").replace("-", "_")
            for section, config in SECTIONS.items() for f, flag in config_flags(config)}


def settings(experiment: TrainExperiment) -> dict[str, Any]:
    """Every setting by its flag's dest, JSON-ready and sorted: what the run's record holds, a
    resume compares and ``--print-config`` prints — read from the experiment itself."""
    found = {}
    for key, dest in keys().items():
        section, name = key.split(".", 1)
        found[dest] = _plain(getattr(getattr(experiment, section), name))
    return dict(sorted(found.items()))


def _plain(value: Any) -> Any:
    if isinstance(value, Path) or (isinstance(value, tuple) and type(value).__str__ is not tuple.__str__):
        return str(value)  # a path, or a flag's own tuple type (--profile-steps 3:5) as its flag writes it
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
