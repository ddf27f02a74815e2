"""The service's messages: a history record as a ``showtell.v1`` ``Evaluation`` (and its parts:
times, costs, the bootstrap), a Watch message, the page tokens ``List`` and ``ListRuns`` hand out
and read back, the status's best export and a run's start."""

from __future__ import annotations

import base64
import binascii
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from showtell.evaluator.records.record import Record
from showtell.v1 import metrics_pb2 as pb

MAX_PAGE = 1000
DEFAULT_PAGE = 100
_STATUS = {"ok": pb.Evaluation.STATUS_OK, "failed": pb.Evaluation.STATUS_FAILED,
           "skipped": pb.Evaluation.STATUS_SKIPPED}


def _timestamp(seconds: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def duration(seconds: float | None) -> Duration | None:
    """``seconds`` as a Duration; None (the field stays unset) when not known."""
    if seconds is None:
        return None
    value = Duration()
    value.FromNanoseconds(round(seconds * 1e9))
    return value


def scoring(text: str) -> pb.Scoring | None:
    """The record's ``tokenizer=ptb scorers=bleu,cider`` (CaptionScorer.scoring) as a message."""
    fields = dict(part.split("=", 1) for part in text.split() if "=" in part)
    if not fields:
        return None
    return pb.Scoring(tokenizer=fields.get("tokenizer", ""),
                      scorers=[s for s in fields.get("scorers", "").split(",") if s])


def to_proto(record: Record) -> pb.Evaluation:
    return pb.Evaluation(
        global_step=record.step,
        checkpoint_path=record.checkpoint,
        checkpoint_mtime=_timestamp(record.checkpoint_mtime),
        evaluated_at=_timestamp(record.evaluated_at),
        eval_duration=duration(record.eval_seconds),
        num_examples=record.num_examples,
        metrics=record.metrics,
        samples=[pb.SampleCaption(image_id=s["image_id"], caption=s["caption"],
                                  references=s["references"]) for s in record.samples],
        status=_STATUS[record.status],
        reason=record.reason,
        run_id=record.run,
        scoring=scoring(record.scoring),
        train_time=duration(record.train_seconds),
        intervals={k: pb.Interval(lower=low, upper=high) for k, (low, high) in record.intervals.items()},
        bootstrap=bootstrap_proto(record.bootstrap) if record.intervals else None,
        eval_set=record.eval_set,
        costs=costs_proto(record.costs),
    )


def costs_proto(costs: dict) -> pb.Costs | None:
    if not costs:
        return None
    return pb.Costs(features=costs.get("features", ""), images_reused=int(costs.get("images_reused", 0)),
                    images_computed=int(costs.get("images_computed", 0)), encoder=costs.get("encoder", ""),
                    seconds={k: float(v) for k, v in costs.get("seconds", {}).items()})


def bootstrap_proto(drawn: dict) -> pb.Bootstrap:
    return pb.Bootstrap(samples=int(drawn.get("samples", 0)), confidence=float(drawn.get("confidence", 0.0)),
                        seed=int(drawn.get("seed", 0)))


def watch_message(record: Record) -> pb.WatchResponse:
    return pb.WatchResponse(evaluation=to_proto(record))


def encode_token(from_step: int, offset: int) -> str:
    return base64.urlsafe_b64encode(f"v1:{from_step}:{offset}".encode()).decode()


def decode_token(token: str) -> tuple[int, int]:
    try:
        version, from_step, offset = base64.urlsafe_b64decode(token.encode()).decode().split(":")
        if version != "v1" or int(offset) < 0:
            raise ValueError(token)
        return int(from_step), int(offset)
    except (ValueError, UnicodeDecodeError, binascii.Error) as exc:
        raise ValueError("page_token is not one this server issued") from exc


RUN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")  # a file name in runs/, never a path


def encode_runs_token(offset: int) -> str:
    return base64.urlsafe_b64encode(f"runs-v1:{offset}".encode()).decode()


def decode_runs_token(token: str) -> int:
    try:
        version, offset = base64.urlsafe_b64decode(token.encode()).decode().split(":")
        if version != "runs-v1" or int(offset) < 0:
            raise ValueError(token)
        return int(offset)
    except (ValueError, UnicodeDecodeError, binascii.Error) as exc:
        raise ValueError("page_token is not one this server issued for ListRuns") from exc


class ExportView(Protocol):
    """What the service reads of the default set's best export (``best_export.BestExport``)."""

    metric: str
    maximize: bool

    def path(self) -> Path | None: ...

    def current(self) -> dict | None: ...


def best_export_proto(exporter: ExportView | None) -> pb.BestExport | None:
    """The default set's best export as the status reports it (None: no ``--export-best``)."""
    if exporter is None:
        return None
    answer = pb.BestExport(metric=exporter.metric, maximize=exporter.maximize)
    info = exporter.current()
    if info is not None:
        answer.step, answer.value, answer.path = info["step"], info["value"], str(exporter.path())
    return answer


class TrackingView(Protocol):
    """What the status reads of the tracker's outbox (``records/tracking.Outbox``)."""

    backlog: int
    last_error: str

    def describe(self) -> str: ...


def tracking_proto(outbox: TrackingView | None) -> pb.Tracking | None:
    """How far the history reached the tracker (None: no ``--tracking-uri``)."""
    if outbox is None:
        return None
    return pb.Tracking(tracker=outbox.describe(), backlog=outbox.backlog, last_error=outbox.last_error)


def set_started(summary: pb.RunSummary, started: str) -> None:
    """A run's recorded start (``%Y-%m-%dT%H:%M:%S%z``) as ``summary.started``; unreadable: unset."""
    try:
        when = datetime.strptime(started, "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return  # a record without a readable start: the field stays unset
    summary.started.FromDatetime(when.astimezone(UTC).replace(tzinfo=None))
