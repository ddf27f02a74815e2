"""Words of the gRPC contract that the proto (``protos/showtell/v1/metrics.proto``) cannot carry:
the run id meaning "every run", how the evaluator ends its streams when it stops, and how an
evaluation's ``Costs`` read to a person.  Server and clients both import them from here."""

from collections.abc import Mapping

ALL_RUNS = "*"  # a request's run_id for every run (empty: the model dir's current run)
STOPPING = "the evaluator is stopping; reconnect to its next instance"  # how its streams end
DEFAULT_SET = "val"  # the evaluation set of --data's validation split; a request's empty eval_set
ALL_SETS = "*"  # a request's eval_set for every set
POLICIES = ("latest", "all")  # EvaluatorStatus.policy: which checkpoints an evaluator takes
COST_PARTS = ("restore", "digest", "features", "decoder", "scoring", "intervals")  # Costs.seconds' keys


def describe_costs(features: str, reused: int, computed: int, seconds: Mapping[str, float]) -> str:
    """``features reused (5000 of 5000 images); features 9.1 s, decoder 61.0 s, …`` — the log line's
    and ``showtell metrics status``' words for a ``Costs``."""
    parts = ", ".join(f"{k} {seconds[k]:.1f} s" for k in COST_PARTS if k in seconds)
    said = f"features {features} ({reused} of {reused + computed} images reused)"
    return f"{said}; {parts}" if parts else said
