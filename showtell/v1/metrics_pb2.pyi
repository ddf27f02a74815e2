import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SampleCaption(_message.Message):
    __slots__ = ("image_id", "caption", "references")
    IMAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CAPTION_FIELD_NUMBER: _ClassVar[int]
    REFERENCES_FIELD_NUMBER: _ClassVar[int]
    image_id: int
    caption: str
    references: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, image_id: _Optional[int] = ..., caption: _Optional[str] = ..., references: _Optional[_Iterable[str]] = ...) -> None: ...

class Evaluation(_message.Message):
    __slots__ = ("global_step", "checkpoint_path", "checkpoint_mtime", "evaluated_at", "eval_duration", "num_examples", "metrics", "samples", "status", "reason", "export_path", "run_id", "scoring", "train_time", "intervals", "bootstrap", "eval_set", "costs")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATUS_UNSPECIFIED: _ClassVar[Evaluation.Status]
        STATUS_OK: _ClassVar[Evaluation.Status]
        STATUS_FAILED: _ClassVar[Evaluation.Status]
        STATUS_SKIPPED: _ClassVar[Evaluation.Status]
    STATUS_UNSPECIFIED: Evaluation.Status
    STATUS_OK: Evaluation.Status
    STATUS_FAILED: Evaluation.Status
    STATUS_SKIPPED: Evaluation.Status
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class IntervalsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Interval
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Interval, _Mapping]] = ...) -> None: ...
    GLOBAL_STEP_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_PATH_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_MTIME_FIELD_NUMBER: _ClassVar[int]
    EVALUATED_AT_FIELD_NUMBER: _ClassVar[int]
    EVAL_DURATION_FIELD_NUMBER: _ClassVar[int]
    NUM_EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EXPORT_PATH_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SCORING_FIELD_NUMBER: _ClassVar[int]
    TRAIN_TIME_FIELD_NUMBER: _ClassVar[int]
    INTERVALS_FIELD_NUMBER: _ClassVar[int]
    BOOTSTRAP_FIELD_NUMBER: _ClassVar[int]
    EVAL_SET_FIELD_NUMBER: _ClassVar[int]
    COSTS_FIELD_NUMBER: _ClassVar[int]
    global_step: int
    checkpoint_path: str
    checkpoint_mtime: _timestamp_pb2.Timestamp
    evaluated_at: _timestamp_pb2.Timestamp
    eval_duration: _duration_pb2.Duration
    num_examples: int
    metrics: _containers.ScalarMap[str, float]
    samples: _containers.RepeatedCompositeFieldContainer[SampleCaption]
    status: Evaluation.Status
    reason: str
    export_path: str
    run_id: str
    scoring: Scoring
    train_time: _duration_pb2.Duration
    intervals: _containers.MessageMap[str, Interval]
    bootstrap: Bootstrap
    eval_set: str
    costs: Costs
    def __init__(self, global_step: _Optional[int] = ..., checkpoint_path: _Optional[str] = ..., checkpoint_mtime: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., evaluated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., eval_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., num_examples: _Optional[int] = ..., metrics: _Optional[_Mapping[str, float]] = ..., samples: _Optional[_Iterable[_Union[SampleCaption, _Mapping]]] = ..., status: _Optional[_Union[Evaluation.Status, str]] = ..., reason: _Optional[str] = ..., export_path: _Optional[str] = ..., run_id: _Optional[str] = ..., scoring: _Optional[_Union[Scoring, _Mapping]] = ..., train_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., intervals: _Optional[_Mapping[str, Interval]] = ..., bootstrap: _Optional[_Union[Bootstrap, _Mapping]] = ..., eval_set: _Optional[str] = ..., costs: _Optional[_Union[Costs, _Mapping]] = ...) -> None: ...

class Costs(_message.Message):
    __slots__ = ("features", "images_reused", "images_computed", "encoder", "seconds")
    class SecondsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    IMAGES_REUSED_FIELD_NUMBER: _ClassVar[int]
    IMAGES_COMPUTED_FIELD_NUMBER: _ClassVar[int]
    ENCODER_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    features: str
    images_reused: int
    images_computed: int
    encoder: str
    seconds: _containers.ScalarMap[str, float]
    def __init__(self, features: _Optional[str] = ..., images_reused: _Optional[int] = ..., images_computed: _Optional[int] = ..., encoder: _Optional[str] = ..., seconds: _Optional[_Mapping[str, float]] = ...) -> None: ...

class Interval(_message.Message):
    __slots__ = ("lower", "upper")
    LOWER_FIELD_NUMBER: _ClassVar[int]
    UPPER_FIELD_NUMBER: _ClassVar[int]
    lower: float
    upper: float
    def __init__(self, lower: _Optional[float] = ..., upper: _Optional[float] = ...) -> None: ...

class Bootstrap(_message.Message):
    __slots__ = ("samples", "confidence", "seed")
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    samples: int
    confidence: float
    seed: int
    def __init__(self, samples: _Optional[int] = ..., confidence: _Optional[float] = ..., seed: _Optional[int] = ...) -> None: ...

class Scoring(_message.Message):
    __slots__ = ("tokenizer", "scorers")
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    SCORERS_FIELD_NUMBER: _ClassVar[int]
    tokenizer: str
    scorers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tokenizer: _Optional[str] = ..., scorers: _Optional[_Iterable[str]] = ...) -> None: ...

class GetLatestRequest(_message.Message):
    __slots__ = ("run_id", "eval_set")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EVAL_SET_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    eval_set: str
    def __init__(self, run_id: _Optional[str] = ..., eval_set: _Optional[str] = ...) -> None: ...

class GetLatestResponse(_message.Message):
    __slots__ = ("evaluation",)
    EVALUATION_FIELD_NUMBER: _ClassVar[int]
    evaluation: Evaluation
    def __init__(self, evaluation: _Optional[_Union[Evaluation, _Mapping]] = ...) -> None: ...

class ListEvaluationsRequest(_message.Message):
    __slots__ = ("from_step", "page_size", "page_token", "run_id", "eval_set")
    FROM_STEP_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EVAL_SET_FIELD_NUMBER: _ClassVar[int]
    from_step: int
    page_size: int
    page_token: str
    run_id: str
    eval_set: str
    def __init__(self, from_step: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., run_id: _Optional[str] = ..., eval_set: _Optional[str] = ...) -> None: ...

class ListEvaluationsResponse(_message.Message):
    __slots__ = ("evaluations", "next_page_token")
    EVALUATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    evaluations: _containers.RepeatedCompositeFieldContainer[Evaluation]
    next_page_token: str
    def __init__(self, evaluations: _Optional[_Iterable[_Union[Evaluation, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetBestRequest(_message.Message):
    __slots__ = ("metric", "mode", "run_id", "eval_set")
    class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        MODE_UNSPECIFIED: _ClassVar[GetBestRequest.Mode]
        MODE_MAX: _ClassVar[GetBestRequest.Mode]
        MODE_MIN: _ClassVar[GetBestRequest.Mode]
    MODE_UNSPECIFIED: GetBestRequest.Mode
    MODE_MAX: GetBestRequest.Mode
    MODE_MIN: GetBestRequest.Mode
    METRIC_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EVAL_SET_FIELD_NUMBER: _ClassVar[int]
    metric: str
    mode: GetBestRequest.Mode
    run_id: str
    eval_set: str
    def __init__(self, metric: _Optional[str] = ..., mode: _Optional[_Union[GetBestRequest.Mode, str]] = ..., run_id: _Optional[str] = ..., eval_set: _Optional[str] = ...) -> None: ...

class GetBestResponse(_message.Message):
    __slots__ = ("evaluation",)
    EVALUATION_FIELD_NUMBER: _ClassVar[int]
    evaluation: Evaluation
    def __init__(self, evaluation: _Optional[_Union[Evaluation, _Mapping]] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: EvaluatorStatus
    def __init__(self, status: _Optional[_Union[EvaluatorStatus, _Mapping]] = ...) -> None: ...

class BestExport(_message.Message):
    __slots__ = ("metric", "maximize", "step", "path", "value")
    METRIC_FIELD_NUMBER: _ClassVar[int]
    MAXIMIZE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    metric: str
    maximize: bool
    step: int
    path: str
    value: float
    def __init__(self, metric: _Optional[str] = ..., maximize: _Optional[bool] = ..., step: _Optional[int] = ..., path: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...

class EvaluatorStatus(_message.Message):
    __slots__ = ("checkpoint_dir", "policy", "last_seen_step", "evaluating_step", "pending_steps", "evaluations", "failures", "uptime", "observer", "last_error", "best_export", "run_id", "runs", "images_done", "images_total", "time_left", "eval_sets", "last_costs", "parts", "waiting_for_parts", "tracking")
    CHECKPOINT_DIR_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_STEP_FIELD_NUMBER: _ClassVar[int]
    EVALUATING_STEP_FIELD_NUMBER: _ClassVar[int]
    PENDING_STEPS_FIELD_NUMBER: _ClassVar[int]
    EVALUATIONS_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    UPTIME_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    BEST_EXPORT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    IMAGES_DONE_FIELD_NUMBER: _ClassVar[int]
    IMAGES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TIME_LEFT_FIELD_NUMBER: _ClassVar[int]
    EVAL_SETS_FIELD_NUMBER: _ClassVar[int]
    LAST_COSTS_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_PARTS_FIELD_NUMBER: _ClassVar[int]
    TRACKING_FIELD_NUMBER: _ClassVar[int]
    checkpoint_dir: str
    policy: str
    last_seen_step: int
    evaluating_step: int
    pending_steps: _containers.RepeatedScalarFieldContainer[int]
    evaluations: int
    failures: int
    uptime: _duration_pb2.Duration
    observer: str
    last_error: str
    best_export: BestExport
    run_id: str
    runs: int
    images_done: int
    images_total: int
    time_left: _duration_pb2.Duration
    eval_sets: _containers.RepeatedScalarFieldContainer[str]
    last_costs: Costs
    parts: int
    waiting_for_parts: _containers.RepeatedCompositeFieldContainer[WaitingForParts]
    tracking: Tracking
    def __init__(self, checkpoint_dir: _Optional[str] = ..., policy: _Optional[str] = ..., last_seen_step: _Optional[int] = ..., evaluating_step: _Optional[int] = ..., pending_steps: _Optional[_Iterable[int]] = ..., evaluations: _Optional[int] = ..., failures: _Optional[int] = ..., uptime: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., observer: _Optional[str] = ..., last_error: _Optional[str] = ..., best_export: _Optional[_Union[BestExport, _Mapping]] = ..., run_id: _Optional[str] = ..., runs: _Optional[int] = ..., images_done: _Optional[int] = ..., images_total: _Optional[int] = ..., time_left: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., eval_sets: _Optional[_Iterable[str]] = ..., last_costs: _Optional[_Union[Costs, _Mapping]] = ..., parts: _Optional[int] = ..., waiting_for_parts: _Optional[_Iterable[_Union[WaitingForParts, _Mapping]]] = ..., tracking: _Optional[_Union[Tracking, _Mapping]] = ...) -> None: ...

class Tracking(_message.Message):
    __slots__ = ("tracker", "backlog", "last_error")
    TRACKER_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    tracker: str
    backlog: int
    last_error: str
    def __init__(self, tracker: _Optional[str] = ..., backlog: _Optional[int] = ..., last_error: _Optional[str] = ...) -> None: ...

class WaitingForParts(_message.Message):
    __slots__ = ("run_id", "step", "checkpoint", "missing_parts")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    MISSING_PARTS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    step: int
    checkpoint: str
    missing_parts: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, run_id: _Optional[str] = ..., step: _Optional[int] = ..., checkpoint: _Optional[str] = ..., missing_parts: _Optional[_Iterable[int]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("after_step", "run_id", "eval_set")
    AFTER_STEP_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EVAL_SET_FIELD_NUMBER: _ClassVar[int]
    after_step: int
    run_id: str
    eval_set: str
    def __init__(self, after_step: _Optional[int] = ..., run_id: _Optional[str] = ..., eval_set: _Optional[str] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("evaluation",)
    EVALUATION_FIELD_NUMBER: _ClassVar[int]
    evaluation: Evaluation
    def __init__(self, evaluation: _Optional[_Union[Evaluation, _Mapping]] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("metric", "target", "page_size", "page_token")
    METRIC_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    metric: str
    target: float
    page_size: int
    page_token: str
    def __init__(self, metric: _Optional[str] = ..., target: _Optional[float] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class RunSummary(_message.Message):
    __slots__ = ("run_id", "evaluations", "latest_step", "best_value", "best_step", "time_to_target", "target_step", "started", "step", "steps", "status")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EVALUATIONS_FIELD_NUMBER: _ClassVar[int]
    LATEST_STEP_FIELD_NUMBER: _ClassVar[int]
    BEST_VALUE_FIELD_NUMBER: _ClassVar[int]
    BEST_STEP_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_TARGET_FIELD_NUMBER: _ClassVar[int]
    TARGET_STEP_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    evaluations: int
    latest_step: int
    best_value: float
    best_step: int
    time_to_target: _duration_pb2.Duration
    target_step: int
    started: _timestamp_pb2.Timestamp
    step: int
    steps: int
    status: str
    def __init__(self, run_id: _Optional[str] = ..., evaluations: _Optional[int] = ..., latest_step: _Optional[int] = ..., best_value: _Optional[float] = ..., best_step: _Optional[int] = ..., time_to_target: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., target_step: _Optional[int] = ..., started: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., step: _Optional[int] = ..., steps: _Optional[int] = ..., status: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[RunSummary]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[RunSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ("run_id", "record_json")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RECORD_JSON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    record_json: str
    def __init__(self, run_id: _Optional[str] = ..., record_json: _Optional[str] = ...) -> None: ...

class EvaluationRef(_message.Message):
    __slots__ = ("run_id", "step", "best", "eval_set")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    BEST_FIELD_NUMBER: _ClassVar[int]
    EVAL_SET_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    step: int
    best: str
    eval_set: str
    def __init__(self, run_id: _Optional[str] = ..., step: _Optional[int] = ..., best: _Optional[str] = ..., eval_set: _Optional[str] = ...) -> None: ...

class CompareRequest(_message.Message):
    __slots__ = ("a", "b", "samples", "confidence")
    A_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    a: EvaluationRef
    b: EvaluationRef
    samples: int
    confidence: float
    def __init__(self, a: _Optional[_Union[EvaluationRef, _Mapping]] = ..., b: _Optional[_Union[EvaluationRef, _Mapping]] = ..., samples: _Optional[int] = ..., confidence: _Optional[float] = ...) -> None: ...

class MetricComparison(_message.Message):
    __slots__ = ("metric", "a", "b", "difference", "interval", "p_value", "significant", "higher_is_better")
    METRIC_FIELD_NUMBER: _ClassVar[int]
    A_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    DIFFERENCE_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_FIELD_NUMBER: _ClassVar[int]
    P_VALUE_FIELD_NUMBER: _ClassVar[int]
    SIGNIFICANT_FIELD_NUMBER: _ClassVar[int]
    HIGHER_IS_BETTER_FIELD_NUMBER: _ClassVar[int]
    metric: str
    a: float
    b: float
    difference: float
    interval: Interval
    p_value: float
    significant: bool
    higher_is_better: bool
    def __init__(self, metric: _Optional[str] = ..., a: _Optional[float] = ..., b: _Optional[float] = ..., difference: _Optional[float] = ..., interval: _Optional[_Union[Interval, _Mapping]] = ..., p_value: _Optional[float] = ..., significant: _Optional[bool] = ..., higher_is_better: _Optional[bool] = ...) -> None: ...

class CompareResponse(_message.Message):
    __slots__ = ("a", "b", "comparisons", "images", "bootstrap", "only_in_a", "only_in_b", "not_compared")
    class NotComparedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    A_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    COMPARISONS_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    BOOTSTRAP_FIELD_NUMBER: _ClassVar[int]
    ONLY_IN_A_FIELD_NUMBER: _ClassVar[int]
    ONLY_IN_B_FIELD_NUMBER: _ClassVar[int]
    NOT_COMPARED_FIELD_NUMBER: _ClassVar[int]
    a: Evaluation
    b: Evaluation
    comparisons: _containers.RepeatedCompositeFieldContainer[MetricComparison]
    images: int
    bootstrap: Bootstrap
    only_in_a: _containers.RepeatedScalarFieldContainer[str]
    only_in_b: _containers.RepeatedScalarFieldContainer[str]
    not_compared: _containers.ScalarMap[str, str]
    def __init__(self, a: _Optional[_Union[Evaluation, _Mapping]] = ..., b: _Optional[_Union[Evaluation, _Mapping]] = ..., comparisons: _Optional[_Iterable[_Union[MetricComparison, _Mapping]]] = ..., images: _Optional[int] = ..., bootstrap: _Optional[_Union[Bootstrap, _Mapping]] = ..., only_in_a: _Optional[_Iterable[str]] = ..., only_in_b: _Optional[_Iterable[str]] = ..., not_compared: _Optional[_Mapping[str, str]] = ...) -> None: ...
