"""A model dir, opened once per process: every file name in it, and its run record's lifecycle.

``ModelDir`` is the one address of what a model dir holds:

* ``showtell-model.json`` (the metadata): the model's shape, its data's origin, the encoder's
  start and the current run id — written when a run begins in a dir without checkpoints;
* ``runs/<run id>.json``: the run's configuration, a revision per start whose settings changed,
  and each start's end; ``runs/<run id>.yaml``: the run as it stands, for ``--config``;
* ``showtell-finished.json``: the trainer's last checkpoint, written when a run ends on its own terms;
* the checkpoints (``ckpt-<step>``) and the state file that names them (``checkpoint``).

The trainer writes through it (``begin``, ``revise``, ``end``); the evaluator and ``showtell runs``
read through it.  Local paths are read with Python's own file calls, so the light client needs no
TensorFlow; a URL (``gs://…``) through ``tf.io.gfile``, imported then.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from showtell.common.errors import ModelDirError, ModelDirIncomplete, ShowtellError
from showtell.common.files import is_url, write_atomic

log = logging.getLogger(__name__)

# Sections a printed configuration holds besides the settings: read by people, passed over by --config.
RECORD_SECTIONS = ("resolved", "environment")
# Flags that say where or how a process runs, not what it trains: not compared between runs.
PLACEMENT = ("ps_hosts", "worker_hosts", "chief_host", "job_name", "task_index", "log_device_placement",
             "verbose", "evaluator", "evaluator_ca", "evaluator_auth_token_file", "evaluator_tls_server_name",
             "profile_steps", "print_config", "server_grace_secs", "tracking_uri", "tracking_experiment")


class ModelDir:
    """One model dir (a local path or a ``tf.io.gfile`` URL)."""

    METADATA = "showtell-model.json"
    RUNS = "runs"
    FINISHED = "showtell-finished.json"
    STATE_FILE = "checkpoint"  # names the checkpoints; renamed into place after their data files
    CHECKPOINT_NAME = "ckpt"  # CheckpointManager's prefix: ckpt-<global step>
    VOCAB = "vocab.txt"  # the training data's vocabulary, copied in: `showtell caption` needs no --data
    ENCODER_INIT_REPORT = "encoder-init.tsv"  # which tensor of the weights file went where
    # What a watcher of the dir reacts to besides the state file: the end of training, a new run.
    SIGNALS = (FINISHED, METADATA)

    def __init__(self, location: str | os.PathLike) -> None:
        text = os.fspath(location)
        self.root = text.rstrip("/") or text
        self._run_id: str | None = None
        self._run_id_read = False

    def __str__(self) -> str:
        return self.root

    def __repr__(self) -> str:
        return f"ModelDir({self.root!r})"

    @property
    def path(self) -> Path:
        """The dir as a local ``Path`` (a URL has none: only the trainer writes, and locally)."""
        if is_url(self.root):
            raise ShowtellError(f"{self.root}: a URL model dir is read, not written; train into a local dir")
        return Path(self.root)

    def file(self, name: str) -> str:
        """The path (or URL) of ``name`` in the dir."""
        return f"{self.root}/{name}"

    # -- the run id: read once ---------------------------------------------------------------

    @property
    def run_id(self) -> str | None:
        """The current run's id, read once ('' before run ids; None: no record yet).  ``begin``
        sets it; a reader that must notice a new run asks ``read_run_id`` at each look."""
        if not self._run_id_read:
            self._run_id, self._run_id_read = self.read_run_id(), True
        return self._run_id

    def read_run_id(self) -> str | None:
        """The run id the metadata records now ('' before run ids; None while it is missing or
        being replaced — keep the run you knew)."""
        try:
            return str(json.loads(_read(self.file(self.METADATA))).get("run_id", ""))
        except (OSError, ValueError, AttributeError):
            return None

    # -- the metadata -----------------------------------------------------------------------

    def begin(self, model: dict[str, Any], data: dict[str, Any], encoder_init: dict[str, Any],
              optimizer: str | None = None) -> str:
        """A run begins in a dir without checkpoints: record the model's shape, its data's origin,
        the encoder's start (source and sha256), the optimizer whose state its checkpoints will
        hold (none for an import) — and a new run id, so evaluators tell this run's ``ckpt-2``
        from an earlier run's.  Returns the run id."""
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        record = {"run_id": run_id, "model": model, "data": data, "encoder_init": encoder_init}
        if optimizer is not None:
            record["optimizer"] = optimizer
        self.path.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path / self.METADATA, json.dumps(record, indent=2) + "\n")
        self._run_id, self._run_id_read = run_id, True
        return run_id

    def keep_vocabulary(self, vocabulary: Path) -> None:
        """The training data's vocabulary travels with the checkpoints."""
        shutil.copyfile(vocabulary, self.path / self.VOCAB)

    def keep_encoder_report(self, report: str) -> None:
        """Which tensor of the encoder's weights file went where, for a pretrained start."""
        (self.path / self.ENCODER_INIT_REPORT).write_text(report)

    def has_metadata(self) -> bool:
        return _exists(self.file(self.METADATA))

    def metadata(self, hint: str) -> dict[str, Any]:
        """The metadata with its ``model`` section; one line (``hint``: what to do) when unreadable,
        ``ModelDirIncomplete`` when missing."""
        path = self.file(self.METADATA)
        try:
            record = json.loads(_read(path))
            if "model" not in record:
                raise KeyError("model")  # a record without its model section is unreadable
            return record
        except FileNotFoundError as exc:
            raise ModelDirIncomplete(f"{path}: missing; is {self.root} a showtell model directory?") from exc
        except (OSError, ValueError, KeyError, AttributeError, TypeError) as exc:
            raise ModelDirError(f"{path}: unreadable ({exc}); {hint}") from exc

    def encoder_init(self) -> dict | None:
        """Where the encoder's starting weights came from (None: a new model dir)."""
        path = self.file(self.METADATA)
        try:
            return json.loads(_read(path)).get("encoder_init") or {"kind": "none"}
        except FileNotFoundError:
            return None
        except (OSError, ValueError, AttributeError) as exc:
            raise ModelDirError(f"{path}: unreadable ({exc}); use a new --model-dir") from exc

    def started(self) -> float | None:
        """When the current run began (its metadata was written)."""
        return modified(self.file(self.METADATA)) or None

    # -- the run's record: runs/<run id>.json ------------------------------------------------

    def revise(self, config: dict[str, Any], step: int, as_yaml: Callable[[str, dict], str]) -> list[str]:
        """Record this start's ``config`` as the run's first revision, or — resumed — a new revision
        when a setting differs from the last one's; rewrite ``runs/<run id>.yaml``, the settings as
        ``as_yaml(header, sections)`` writes them (``--print-config``'s form).  Returns what changed
        (``--flag: old → new``)."""
        run_id = self.run_id or "unnamed"
        path = self.path / self.RUNS / f"{run_id}.json"
        history = self._history(path)
        revision = {"at": _now(), "step": step, **config}
        changed: list[str] = []
        if history["revisions"]:
            changed = differences(history["revisions"][-1]["settings"], config["settings"])
            if changed:
                revision["changed"] = changed
        if changed or not history["revisions"]:
            history["revisions"].append(revision)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, json.dumps(history, indent=2) + "\n")
        self._write_yaml(run_id, config, step, history["revisions"], as_yaml)
        return changed

    def _write_yaml(self, run_id: str, config: dict[str, Any], step: int, revisions: list[dict],
                    as_yaml: Callable[[str, dict], str]) -> None:
        """``runs/<run id>.yaml``: this start's settings and sections as ``--print-config`` prints
        them — the file to repeat the run from (rewritten at every start: the run as it stands)."""
        path = self.path / self.RUNS / f"{run_id}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        header = (f"showtell train: run {run_id} as it started at step {step}; repeat it with "
                  f"showtell train --config {path.name} --model-dir NEW")
        # Which start of the run this is (--config refuses a later revision: it would not repeat the run)
        revision = {"number": max(1, len(revisions)), "run_id": run_id, "step": step,
                    **({"changed": revisions[-1].get("changed", [])} if len(revisions) > 1 else {})}
        write_atomic(path, as_yaml(header, {**{k: config[k] for k in RECORD_SECTIONS}, "revision": revision}))

    def end(self, step: int, checkpoint: str, reason: str, finished: bool, record: bool = True) -> None:
        """A start of the run ended: the finished marker when it ended on its own terms (evaluators
        read it), and — ``record`` — the end in the run's record (``showtell runs`` shows the last)."""
        if finished:
            marker = {"step": step, "checkpoint": Path(checkpoint).name, "reason": reason}
            write_atomic(self.path / self.FINISHED, json.dumps(marker) + "\n")
        if record:
            path = self.path / self.RUNS / f"{self.run_id or 'unnamed'}.json"
            history = self._history(path)
            history.setdefault("ends", []).append({"at": _now(), "step": step, "reason": reason,
                                                   "finished": finished})
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, json.dumps(history, indent=2) + "\n")

    def _history(self, path: Path) -> dict[str, Any]:
        """The run's record so far; an unreadable one is moved aside (named in the log), never lost."""
        try:
            history = json.loads(path.read_text())
            if isinstance(history.get("revisions"), list):
                return history
            raise ValueError("no revisions list")
        except FileNotFoundError:
            return {"run_id": path.stem, "revisions": []}
        except (OSError, ValueError, AttributeError) as exc:
            aside = path.with_suffix(f".unreadable-{int(time.time())}")
            path.rename(aside)
            log.warning("%s: unreadable (%s); moved aside to %s, this run's configuration starts again",
                        path, exc, aside.name)
            return {"run_id": path.stem, "revisions": []}

    def run_record(self, run_id: str) -> dict | None:
        """A run's record, or None: none written (an import, a run from before records), or
        unreadable (the trainer moves such a file aside), or without a revision."""
        try:
            record = json.loads(_read(self.file(f"{self.RUNS}/{run_id or 'unnamed'}.json")))
            return record if isinstance(record.get("revisions"), list) and record["revisions"] else None
        except (OSError, ValueError, AttributeError):
            return None

    def run_settings(self, run_id: str) -> str | None:
        """``runs/<run id>.yaml``: the run's settings as it last started (None: none written)."""
        try:
            return _read(self.file(f"{self.RUNS}/{run_id or 'unnamed'}.yaml"))
        except OSError:
            return None

    def load_run(self, run_id: str) -> dict:
        """A run's record, whatever it holds; one line naming the file when it cannot be read."""
        path = self.file(f"{self.RUNS}/{run_id}.json")
        try:
            record = json.loads(_read(path))
        except (OSError, ValueError) as exc:
            raise ShowtellError(f"{path}: unreadable run record ({exc}); move it aside") from exc
        if not isinstance(record, dict):
            raise ShowtellError(f"{path}: not a run record (a JSON object); move it aside")
        return record

    def run_ids(self) -> list[str]:
        """The runs the dir has a record file of, by id, sorted."""
        return sorted(name[:-len(".json")] for name in _glob(self.file(self.RUNS), "*.json"))

    def runs(self) -> dict[str, dict]:
        """run id → record of every readable run with a revision (``run_record``'s rule)."""
        found = {}
        for run_id in self.run_ids():
            record = self.run_record(run_id)
            if record is not None:
                found[run_id] = record
        return found

    # -- the finished marker ----------------------------------------------------------------

    def finished(self) -> dict | None:
        """The trainer's finished marker, or None: still training, or a marker being replaced."""
        try:
            record = json.loads(_read(self.file(self.FINISHED)))
            return record if isinstance(record.get("step"), int) else None
        except (OSError, ValueError, AttributeError):
            return None

    def clear_finished(self) -> bool:
        """A run starts: the dir's training is no longer finished.  True if a marker went."""
        try:
            (self.path / self.FINISHED).unlink()
            return True
        except FileNotFoundError:
            return False

    # -- checkpoints (TensorFlow's CheckpointManager layout) ---------------------------------

    @classmethod
    def checkpoint_name(cls, step: int) -> str:
        """The file prefix of the checkpoint at ``step`` (``ckpt-1200``)."""
        return f"{cls.CHECKPOINT_NAME}-{step}"

    @staticmethod
    def step_of(path: str) -> int:
        """``…/ckpt-1200`` → 1200 (CheckpointManager names checkpoints by global step); -1 otherwise."""
        try:
            return int(str(path).rsplit("-", 1)[1])
        except (IndexError, ValueError):
            return -1

    def checkpoint_steps(self) -> list[int]:
        """Steps of the complete-looking checkpoints on disk (an ``.index`` file), whether the state
        file names them or not; ascending."""
        names = _glob(self.root, f"{self.CHECKPOINT_NAME}-*.index")
        return sorted(s for s in (self.step_of(n[:-len(".index")]) for n in names) if s >= 0)

    def prefix(self, name: str) -> str:
        """A checkpoint name the state file holds as the path it names (absolute, or in the dir)."""
        return name if os.path.isabs(name) or is_url(name) else os.path.join(self.root, name)

    @staticmethod
    def saved_at(prefix: str) -> float:
        """When the checkpoint ``prefix`` was written (its ``.index`` file's modification time, in
        seconds); 0 when it cannot be read (deleted, not arrived)."""
        return modified(prefix + ".index")


def _shown(value: Any) -> str:
    return "unset" if value is None else json.dumps(value) if not isinstance(value, str) else value


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``--flag: old → new`` for every setting that differs (where the process runs aside)."""
    keys = sorted((set(old) | set(new)) - set(PLACEMENT))
    return [f"--{k.replace('_', '-')}: {_shown(old.get(k))} → {_shown(new.get(k))}"
            for k in keys if old.get(k) != new.get(k)]


def modified(path: str) -> float:
    """A file's modification time in seconds; 0 when it cannot be read."""
    try:
        if not is_url(path):
            return os.stat(path).st_mtime_ns / 1e9
        import tensorflow as tf

        return tf.io.gfile.stat(path).mtime_nsec / 1e9
    except Exception:  # OSError locally; tf.errors.OpError for a URL
        return 0.0


def _read(path: str) -> str:
    """A whole file's text; ``FileNotFoundError`` when missing, ``OSError`` when unreadable."""
    if not is_url(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    import tensorflow as tf

    try:
        return tf.io.gfile.GFile(path).read()
    except tf.errors.NotFoundError as exc:
        raise FileNotFoundError(path) from exc
    except tf.errors.OpError as exc:
        raise OSError(f"{path}: {exc.message}") from exc


def _exists(path: str) -> bool:
    if not is_url(path):
        return os.path.isfile(path)
    import tensorflow as tf

    return tf.io.gfile.exists(path)


def _glob(directory: str, pattern: str) -> list[str]:
    """The names in ``directory`` matching ``pattern`` ([] when it is missing)."""
    if not is_url(directory):
        return [p.name for p in Path(directory).glob(pattern)]
    import tensorflow as tf

    try:
        return [p.rsplit("/", 1)[-1] for p in tf.io.gfile.glob(f"{directory}/{pattern}")]
    except tf.errors.OpError:
        return []


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
