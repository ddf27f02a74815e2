"""The evaluator's configuration: typed dataclasses, each ``option`` field also a flag of
``showtell evaluate`` (written once, here — as the trainer's in ``captioning/config.py``).  The
CLI builds an ``EvaluatorConfig`` from the flags and checks their combinations; nothing below
it sees ``argparse``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from showtell.api.contract import POLICIES
from showtell.common.exposition import MonitoringConfig
from showtell.common.options import (
    Invalid,
    boolean,
    check,
    non_negative_int,
    open_fraction,
    option,
    positive_float,
    positive_int,
    positive_int_or_auto,
)
from showtell.common.tracking import TrackingConfig
from showtell.evaluator.records.workdir import WorkDir

if TYPE_CHECKING:
    from showtell.evaluator.records.record import Record

SET_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")  # a label, a TensorBoard tag prefix, a directory name


@dataclass(frozen=True)
class EvalSet:
    """One evaluation set: a dataset's validation split under a name (``--eval-set NAME=PATH[:N]``;
    the default one is ``--data``'s, named ``val``), its first ``max_examples`` images (None: all)."""

    name: str
    data: Path
    max_examples: int | None = None

    @classmethod
    def parse(cls, text: str) -> EvalSet:
        """``NAME=PATH[:EXAMPLES]``; ``ValueError`` says what is wrong."""
        name, equals, rest = text.partition("=")
        if not equals or not rest:
            raise ValueError(f"--eval-set {text}: expected NAME=PATH[:EXAMPLES], e.g. unseen=data/unseen:500")
        if not SET_NAME.fullmatch(name):
            raise ValueError(f"--eval-set {text}: the name {name!r} must be a letter then letters, digits, "
                             "_ or - (32 at most)")
        path, colon, examples = rest.rpartition(":")
        if colon and examples.isdigit():
            if int(examples) < 1:
                raise ValueError(f"--eval-set {text}: EXAMPLES must be ≥ 1")
            return cls(name, Path(path), int(examples))
        return cls(name, Path(rest))

    def __str__(self) -> str:
        """The flag's own text, which ``parse`` reads back (``--print-config`` prints this)."""
        return f"{self.name}={self.data}" + (f":{self.max_examples}" if self.max_examples else "")


TOKENIZERS = ("auto", "ptb", "regex")


@dataclass(frozen=True)
class EvaluationConfig:
    """What one evaluation of a checkpoint is."""

    max_eval_examples: int | str | None = option(
        None, "evaluate the first N validation images (each with all its captions); auto: as many as "
              "fit in half of the trainer's checkpoint interval at this evaluator's rate, chosen once "
              "per run; default all", type=positive_int_or_auto, metavar="N|auto")
    beam_size: int = option(3, "beam width of the generated captions (1: greedy)", type=positive_int)
    threads: int | None = option(None, "TensorFlow threads (share a host politely)", type=positive_int)
    jit_compile: bool = option(False, "compile the evaluation step with XLA (for accelerators: on 2 CPU "
                                      "cores it evaluated 0.86x as many images per CPU second; compiles "
                                      "once per batch shape and caption length)", type=boolean)
    meteor: bool = option(True, "compute METEOR when java is present", type=boolean)
    bootstrap: int = option(1000, "resamples of the evaluated images behind each metric's confidence "
                                  "interval (and `metrics compare`'s paired test)", type=positive_int,
                            metavar="N")
    confidence: float = option(0.95, "the intervals' confidence level", type=open_fraction, metavar="P")
    feature_cache_keep: int = option(
        2, "keep each evaluation set's encoder features (<work-dir>/features, ≈ 41 MB per 5,000 images "
           "and encoder) for the N most recent encoders: checkpoints whose encoder weights are the same "
           "(a frozen-encoder phase) reuse them instead of running Inception again; 0: compute them "
           "every time", type=non_negative_int, metavar="N")
    tokenizer: str = option("auto", "how captions are tokenized for scoring: ptb (COCO's PTBTokenizer, "
                                    "needs java; scores comparable with published ones), regex, or auto: "
                                    "ptb when java is present", choices=TOKENIZERS)


@dataclass(frozen=True)
class WatchConfig:
    """Which checkpoints are evaluated, and how they are noticed."""

    policy: str = option("latest", "latest: skip to the newest when behind; all: every checkpoint in order",
                         choices=POLICIES, env="SHOWTELL_EVAL_POLICY")
    poll_secs: float | None = option(
        None, "poll the state file every S seconds instead of inotify (network filesystems)",
        type=positive_float)
    arrival_timeout: float = option(
        300.0, "how long a checkpoint the state file names may stay incomplete (a synced copy still "
               "arriving) before it is recorded skipped", type=positive_float, metavar="S")


@dataclass(frozen=True)
class ServeConfig:
    """The gRPC service."""

    host: str = option("127.0.0.1", "gRPC bind address")
    port: int = option(50051, "gRPC port, 0 picks a free one", type=int)
    health_port: int | None = option(
        None, "also serve grpc.health.v1 alone, in plaintext, on --host:PORT — for probes that cannot "
              "do TLS (Kubernetes' gRPC probes) when --tls-cert is on (default: off)",
        type=int, metavar="PORT")
    max_streams: int = option(10_000, "concurrent Watch streams served; more get RESOURCE_EXHAUSTED",
                              type=positive_int)


@dataclass(frozen=True)
class ExportConfig:
    """``--export-best``: SavedModels of the best evaluations."""

    export_best: str | None = option(
        None, "export each better evaluation's model as a SavedModel version <work-dir>/export/best/<step>/, "
              "TensorFlow Serving's layout (e.g. cider:max, loss:min)", metavar="METRIC[:max|min]")
    export_keep: int = option(3, "export versions kept, newest first", type=positive_int, metavar="K")
    export_best_when: str = option(
        "better", "better: export each evaluation better on the metric; significant: only one better "
                  "beyond noise (the paired interval of the difference from the export excludes 0 — fewer, "
                  "surer versions; small real gains wait until they add up)",
        choices=("better", "significant"))
    registered_model: str = option(
        "showtell", "with --tracking-uri: each export becomes a version of this MLflow registered model "
                    "(another evaluation set's: NAME-<set>)", metavar="NAME")


@dataclass(frozen=True)
class Finish:
    """When a finite evaluator is done: Keras' SidecarEvaluator ``max_evaluations``, Orbit's
    timeout, and the trainer's own word that it has finished (a Kubernetes job completes)."""

    until_step: int | None = option(None, "exit 0 after evaluating a checkpoint at step N or later",
                                    type=non_negative_int, metavar="N")
    max_evaluations: int | None = option(
        None, "exit 0 after K evaluations by this process (skipped checkpoints do not count)",
        type=positive_int, metavar="K")
    when_trained: bool = option(
        False, "exit 0 once the trainer has finished (--steps, --max-seconds or early stop; not a SIGTERM "
               "or crash) and its final checkpoint is evaluated", flag="--exit-when-trained",
        action="store_true")

    def describe(self) -> str:
        parts = []
        if self.until_step is not None:
            parts.append(f"a checkpoint at step ≥ {self.until_step} is evaluated")
        if self.max_evaluations is not None:
            parts.append(f"{self.max_evaluations} evaluation(s) are done")
        if self.when_trained:
            parts.append("the trainer's final checkpoint is evaluated")
        return " or ".join(parts)

    def reason(self, record: Record, evaluations: int) -> str | None:
        """Why we are done after recording ``record`` (the ``evaluations``-th of this process)."""
        if self.until_step is not None and record.step >= self.until_step:
            return f"step {record.step} reaches --until-step {self.until_step}"
        if self.max_evaluations is not None and evaluations >= self.max_evaluations:
            return f"{evaluations} evaluation(s) done (--max-evaluations {self.max_evaluations})"
        return None


@dataclass(frozen=True)
class Shard:
    """``--shard I/N``: part I (from 0) of N of every evaluation (``records/parts.py``)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def pair(self) -> tuple[int, int]:
        return self.index, self.count

    @property
    def merges(self) -> bool:
        """Part 0 merges every part's results, records them and serves them."""
        return self.index == 0


@check("I/N, 0 ≤ I < N")
def shard(text: str) -> Shard:
    index, slash, count = text.partition("/")
    if not (slash and index.strip().isdigit() and count.strip().isdigit()):
        raise Invalid(f"expected I/N, e.g. 0/2 (got {text!r})")
    one = Shard(int(index), int(count))
    if one.count < 1 or one.index >= one.count:
        raise Invalid(f"I must be 0 … N - 1 and N ≥ 1 (got {text})")
    return one


@dataclass(frozen=True)
class ShardConfig:
    """One evaluation split across evaluators: each part evaluates its images of every checkpoint;
    part 0 merges them into the record one evaluator would write, and serves it."""

    shard: Shard | None = option(
        None, "evaluate part I (0 … N - 1) of N of every evaluation set, for every checkpoint: the images at "
              "positions I, I + N …; part 0 merges the parts' results into one record and serves it "
              "(Kubernetes: --shard $(JOB_COMPLETION_INDEX)/N); needs --parts-dir and --policy all",
        type=shard, metavar="I/N", env="SHOWTELL_SHARD")
    parts_dir: Path | None = option(
        None, "with --shard: the directory every part writes its results to and part 0 reads (shared "
              "storage: a volume all of them mount)", type=Path, metavar="DIR", env="SHOWTELL_PARTS_DIR")

    @property
    def split(self) -> bool:
        """More than one part."""
        return self.shard is not None and self.shard.count > 1


@dataclass(frozen=True)
class EvaluatorConfig:
    """Everything an evaluator runs on — the service and ``--once`` alike.

    Args:
      model_dir: the trainer's model directory (local path or ``tf.io.gfile`` URL).
      data: the dataset whose validation split is evaluated.
      work: this evaluator's own directory (the service's always; ``--once``'s only when named,
        for kept features — None keeps nothing).
    """

    model_dir: str
    data: Path
    work: WorkDir | None
    evaluation: EvaluationConfig = EvaluationConfig()
    watch: WatchConfig = WatchConfig()
    serve: ServeConfig = ServeConfig()
    export: ExportConfig = ExportConfig()
    finish: Finish = Finish()
    monitoring: MonitoringConfig = field(default_factory=MonitoringConfig)
    eval_sets: tuple[EvalSet, ...] = ()  # besides --data's (named val)
    sharding: ShardConfig = ShardConfig()
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
