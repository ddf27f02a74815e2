"""Early stop across the two services: the trainer follows the evaluator's ``Watch`` stream and
stops itself once a metric meets its target in N consecutive evaluations.

The listener runs in a background thread of the chief only.  An unreachable evaluator is
retried with exponential backoff (logged once per attempt) while training goes on; when the
target is met, the listener raises the trainer's ``StopRequest`` with a reason naming the
evaluation that triggered it, and the training loop saves a final checkpoint and exits 0.
"""

from __future__ import annotations

import logging
import operator
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc

from showtell import metrics as registry
from showtell.api.client import WatchFollower
from showtell.api.transport import ClientSecurity
from showtell.common.errors import ShowtellError
from showtell.trainer.loop.signals import StopRequest
from showtell.v1 import metrics_pb2

if TYPE_CHECKING:
    from showtell.trainer.experiment import EarlyStopSettings

log = logging.getLogger(__name__)

_CONDITION = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(>=|<=)\s*(-?[0-9.]+(?:[eE][-+]?\d+)?)\s*$")
_OPS = {">=": operator.ge, "<=": operator.le}
STOP_WHEN_BY = ("value", "interval")
MAX_BACKOFF_SECS = 30.0


@dataclass(frozen=True)
class StopWhen:
    metric: str
    op: str
    target: float
    patience: int = 1
    by: str = "value"  # or "interval": the interval's far bound must meet the target

    @classmethod
    def parse(cls, text: str, patience: int = 1, by: str = "value") -> StopWhen:
        match = _CONDITION.match(text)
        if not match:
            raise ShowtellError(f"--stop-when '{text}': expected METRIC>=X or METRIC<=X, e.g. 'cider>=0.9'")
        if by not in STOP_WHEN_BY:
            raise ShowtellError(f"--stop-when-by {by}: choose one of {', '.join(STOP_WHEN_BY)}")
        if registry.get(match.group(1)) is None:
            raise ShowtellError(f"--stop-when '{text}': {registry.unknown_metric(match.group(1))}")
        return cls(match.group(1), match.group(2), float(match.group(3)), patience, by)

    def met(self, value: float) -> bool:
        return _OPS[self.op](value, self.target)

    def judged(self, evaluation) -> float | None:
        """What is held against the target: the value, or with ``by`` interval the bound that must
        clear it (the lower one for ``>=``, the upper for ``<=``) — met only beyond noise.  None:
        the evaluation does not say (no such metric, or no interval recorded)."""
        if self.metric not in evaluation.metrics:
            return None
        if self.by == "value":
            return evaluation.metrics[self.metric]
        bounds = evaluation.intervals.get(self.metric)
        if bounds is None:
            return None
        return bounds.lower if self.op == ">=" else bounds.upper

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.target:g}"


class EarlyStop:
    """Follows ``Watch`` on ``address``; requests ``stop`` after ``patience`` qualifying evaluations.

    The stream resumes after the last step it saw when the evaluator restarts, so no
    evaluation is counted twice toward the streak.
    """

    def __init__(self, condition: StopWhen, address: str, stop: StopRequest,
                 security: ClientSecurity | None = None,
                 run: Callable[[], str | None] = lambda: None) -> None:
        """``run``: this training's run id, read when an evaluation comes (the model dir names it
        once the trainer has started): only its evaluations count — an evaluator that follows
        another model dir (the original of a replayed run) must not stop this one."""
        self.condition, self.address, self.stop, self.run = condition, address, stop, run
        self.ignored: dict[str, int] = {}  # other runs' evaluations seen, by run
        self.security = security or ClientSecurity()
        self.security.channel(address).close()  # a bad --evaluator-ca/token file fails now, in one line
        self.streak = 0
        self.triggered_by: int | None = None
        self._follower = WatchFollower(target=address, security=self.security, persistent=True,
                                       on_retry=self._on_retry, max_backoff=MAX_BACKOFF_SECS)
        self._thread = threading.Thread(target=self._follow, name="early-stop", daemon=True)

    @classmethod
    def listen(cls, settings: EarlyStopSettings, stop: StopRequest,
               run: Callable[[], str | None]) -> EarlyStop:
        """``--stop-when``'s listener to ``--evaluator``, started."""
        s = settings
        return cls(StopWhen.parse(s.stop_when, s.patience, s.by), s.evaluator, stop,
                   ClientSecurity(s.ca, s.auth_token_file, s.tls_server_name), run).start()

    def start(self) -> EarlyStop:
        log.info("early stop: when %s in %d consecutive evaluation(s) from %s", self.condition,
                 self.condition.patience, self.address)
        self._thread.start()
        return self

    def close(self) -> None:
        self._follower.close()  # ends a blocking Watch
        self._thread.join(timeout=5)

    def _on_retry(self, error: grpc.RpcError, wait: float) -> None:
        if error.code() == grpc.StatusCode.UNAUTHENTICATED:
            log.error("early stop: evaluator %s refused the call (%s); check --evaluator-auth-token-file; "
                      "retrying in %.0f s, training goes on", self.address, error.details(), wait)
        else:
            log.warning("early stop: evaluator %s unreachable (%s); retrying in %.0f s, training goes on",
                        self.address, error.code().name, wait)

    def _follow(self) -> None:
        for evaluation in self._follower:
            if self._consider(evaluation) or self.stop:
                self._follower.close()
                return

    def _consider(self, evaluation) -> bool:
        """Count a successful evaluation toward (or reset) the streak; True once stopped."""
        own = self.run()
        if own and evaluation.run_id and evaluation.run_id != own:
            if evaluation.run_id not in self.ignored:
                log.warning("early stop: evaluator %s evaluates run %s, not this one (%s): its "
                            "evaluations do not count toward --stop-when", self.address,
                            evaluation.run_id, own)
            self.ignored[evaluation.run_id] = self.ignored.get(evaluation.run_id, 0) + 1
            return False
        ok = evaluation.status == metrics_pb2.Evaluation.STATUS_OK
        value = self.condition.judged(evaluation) if ok else None
        if value is None:
            if ok and self.condition.metric in evaluation.metrics:  # by interval, and none recorded
                log.warning("early stop: step %d has no interval on %s (an evaluator from before "
                            "intervals?): it does not count toward --stop-when-by interval",
                            evaluation.global_step, self.condition.metric)
            return False  # failed/skipped, or no such metric: neither counts nor resets
        what = self.condition.metric + (" (interval's bound)" if self.condition.by == "interval" else "")
        self.streak = self.streak + 1 if self.condition.met(value) else 0
        log.info("early stop: step %d %s %.6g (%d/%d)", evaluation.global_step, what, value,
                 self.streak, self.condition.patience)
        if self.streak < self.condition.patience:
            return False
        self.triggered_by = evaluation.global_step
        reason = (f"early stop: {what} {value:.6g} meets {self.condition} at the evaluation "
                  f"of step {evaluation.global_step} ({self.streak} consecutive)")
        log.info("%s", reason)
        self.stop.request(reason, final=True)
        return True
