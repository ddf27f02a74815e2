"""MLflow, where teams compare runs and promote models: one MLflow run per showtell run, which the
trainer and the evaluator both find by its tag (``showtell.run_id``) — whoever comes first creates
it, and two that create it at once both keep the first one created (``Tracker.run_of``).

Off unless ``--tracking-uri`` (or MLflow's own ``MLFLOW_TRACKING_URI``) names a tracker; then the
client (``pip install 'showtell[tracking]'``: mlflow-skinny) is imported, never before.  Every call
goes through ``Tracker.call``, which turns the client's exceptions into two kinds: ``TrackerDown``
(try again later: unreachable, slow, a server error) and ``TrackerRefused`` (nothing changes until
someone acts: a refused credential, a deleted experiment, a bad URI), each with one line to say.
The client's own retries are turned down (to none, 10 s a request): the callers retry on their own
schedule, on their own thread, and must notice an outage in seconds, not minutes.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from showtell.common.errors import ShowtellError
from showtell.common.options import Invalid, check, option

log = logging.getLogger(__name__)

RUN_TAG = "showtell.run_id"  # the MLflow run of a showtell run is the one with this tag
# What the client may do on its own before it gives a call back (a user's environment wins).
CLIENT_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
                   "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}  # our log says where the run is
# Error codes that another try cannot fix (MLflow's ``databricks_pb2`` names).
REFUSED = {"INVALID_PARAMETER_VALUE", "PERMISSION_DENIED", "UNAUTHENTICATED", "RESOURCE_DOES_NOT_EXIST",
           "INVALID_STATE", "BAD_REQUEST", "RESOURCE_ALREADY_EXISTS", "FEATURE_DISABLED"}
T = TypeVar("T")


@check("tracking URI")
def tracking_uri(text: str) -> str:
    """A tracker's address without credentials: it is recorded with the run."""
    parts = urlsplit(text)
    if parts.password:
        raise Invalid("holds a password; give it in MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) "
                      "instead: the URI is recorded with the run")
    return text


@dataclass(frozen=True)
class TrackingConfig:
    """MLflow: the run's configuration, training scalars, evaluations and best exports."""

    tracking_uri: str | None = option(
        None, "send the run to this MLflow tracker (http://host:5000, databricks, …; default: "
              "MLFLOW_TRACKING_URI, else off): its configuration as params, its training scalars, every "
              "evaluation and each best export as a registered model version", type=tracking_uri,
        metavar="URI", env="MLFLOW_TRACKING_URI")
    tracking_experiment: str = option(
        "showtell", "the MLflow experiment the runs go in (default: MLFLOW_EXPERIMENT_NAME, else showtell)",
        metavar="NAME", env="MLFLOW_EXPERIMENT_NAME")

    @property
    def enabled(self) -> bool:
        return bool(self.tracking_uri)

    def describe(self) -> str:
        """Where the runs go, for a log line (no query string: it may carry a token)."""
        parts = urlsplit(self.tracking_uri or "")
        port = f":{parts.port}" if parts.port else ""
        where = f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}" if parts.netloc \
            else self.tracking_uri
        return f"MLflow {where}, experiment {self.tracking_experiment}"


def require_client(config: TrackingConfig) -> None:
    """Tracking asked for without the client installed: one line at start, not a thread that fails."""
    import importlib.util

    if config.enabled and importlib.util.find_spec("mlflow") is None:
        raise ShowtellError(f"--tracking-uri {config.tracking_uri} (or MLFLOW_TRACKING_URI): the MLflow "
                            "client is not installed; pip install 'showtell[tracking]', or unset it")


class TrackerDown(ShowtellError):
    """The tracker did not answer, or failed: the same call may work later."""


class TrackerRefused(ShowtellError):
    """The tracker (or its address) refuses the call: it will until someone acts."""


def param_value(value: Any) -> str:
    """A setting as an MLflow param: strings as they are, the rest as JSON (null, true, 2.0, [..])."""
    return value if isinstance(value, str) else json.dumps(value)


def run_params(settings: str | None) -> dict[str, str]:
    """A run's settings file (``runs/<run id>.yaml``, ``--print-config``'s form) as params: every
    setting by its dotted key, and what the run resolved to (``resolved.*``); lists as JSON, nested
    values and the environment left out.  Read at the run's first start: params never change, a
    later revision's changes are tags."""
    import yaml

    try:
        sections = yaml.safe_load(settings or "") or {}
    except yaml.YAMLError:
        return {}
    params = {}
    for section, values in sections.items() if isinstance(sections, dict) else ():
        if section in ("environment", "revision") or not isinstance(values, dict):
            continue
        for name, value in values.items():
            if value is None or isinstance(value, (bool, int, float, str, list)):
                params[f"{section}.{name}"] = param_value(value)
    return dict(sorted(params.items()))


def revision_tags(record: Mapping[str, Any] | None) -> dict[str, str]:
    """Each later revision's changes as tags (``showtell.revision.2``: ``--steps: 100 → 200``)."""
    revisions = (record or {}).get("revisions", [])
    tags = {"showtell.revisions": str(max(1, len(revisions)))}
    for number, revision in enumerate(revisions[1:], start=2):
        tags[f"showtell.revision.{number}"] = f"at step {revision.get('step')}: " + "; ".join(
            revision.get("changed", []))
    return tags


class Tracker:
    """An MLflow client for ``config``, made on first use; every call through ``call``."""

    def __init__(self, config: TrackingConfig) -> None:
        self.config = config
        self._client: Any = None
        self._experiment_id: str | None = None

    @property
    def client(self) -> Any:
        if self._client is None:
            for name, value in CLIENT_DEFAULTS.items():
                os.environ.setdefault(name, value)
            from mlflow import MlflowClient  # require_client said so at start when it is missing

            for name in ("mlflow", "alembic"):  # the client's notices ("View run at …") are not ours
                logging.getLogger(name).setLevel(logging.WARNING)
            self._client = self.call("connect", MlflowClient, self.config.tracking_uri,
                                     self.config.tracking_uri)
        return self._client

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``; its failure as ``TrackerDown`` or ``TrackerRefused``, one line
        naming the tracker and ``what`` was asked."""
        try:
            return fn(*args, **kwargs)
        except ShowtellError:
            raise
        except Exception as exc:  # the client raises MlflowException, requests' and urllib3's errors
            code = getattr(exc, "error_code", "")
            text = " ".join(str(getattr(exc, "message", exc)).split())[:240]
            line = f"--tracking-uri {self.config.describe()}: {what}: {text or type(exc).__name__}"
            if code in REFUSED or "registered tracking store" in text or "Invalid" in type(exc).__name__:
                raise TrackerRefused(line) from exc
            raise TrackerDown(line) from exc

    def experiment_id(self) -> str:
        """The experiment's id, created when missing; a deleted one is refused with what to do."""
        if self._experiment_id is None:
            name, client = self.config.tracking_experiment, self.client
            found = self.call("read the experiment", client.get_experiment_by_name, name)
            if found is not None and found.lifecycle_stage == "deleted":
                raise TrackerRefused(
                    f"--tracking-experiment {name}: deleted in {self.config.describe()} (id "
                    f"{found.experiment_id}); restore it (mlflow experiments restore --experiment-id "
                    f"{found.experiment_id}) or name another")
            self._experiment_id = found.experiment_id if found is not None else self.call(
                "create the experiment", client.create_experiment, name)
        return self._experiment_id

    def find(self, showtell_run: str) -> str | None:
        """The MLflow run of ``showtell_run`` (the first created, if two were), or None."""
        runs = self.call("find the run", self.client.search_runs, [self.experiment_id()],
                         filter_string=f"tags.`{RUN_TAG}` = '{showtell_run}'",
                         order_by=["attributes.start_time ASC"], max_results=10)
        runs = sorted(runs, key=lambda run: (run.info.start_time, run.info.run_id))
        return runs[0].info.run_id if runs else None

    def run_of(self, showtell_run: str, tags: Mapping[str, str] = (), params: Mapping[str, str] = ()) -> str:
        """The MLflow run of ``showtell_run``: found by its tag, or created (named by the run id,
        with ``tags`` and ``params``).  Created at the same moment elsewhere too, both keep the first
        created and the other is deleted — before anything was logged into it."""
        found = self.find(showtell_run)
        if found is not None:
            return found
        created = self.call("create the run", self.client.create_run, self.experiment_id(),
                            tags={RUN_TAG: showtell_run, **dict(tags)}, run_name=showtell_run or "unnamed")
        run_id = created.info.run_id
        first = self.find(showtell_run)
        if first is not None and first != run_id:
            self.call("delete a run created twice", self.client.delete_run, run_id)
            return first
        if params:
            self.log_params(run_id, params)
        return run_id

    def page(self, run_id: str) -> str:
        """Where a browser shows the run (": http://…/#/experiments/1/runs/…"), for an HTTP tracker."""
        uri = self.config.tracking_uri or ""
        if not uri.startswith(("http://", "https://")):
            return ""
        return f": {uri.rstrip('/')}/#/experiments/{self.experiment_id()}/runs/{run_id}"

    def log_params(self, run_id: str, params: Mapping[str, str]) -> None:
        """``params`` (logged again with the same values: a no-op), 100 a request (MLflow's limit)."""
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in params.items()]
        for start in range(0, len(items), 100):
            self.call("log the params", self.client.log_batch, run_id, params=items[start:start + 100])
