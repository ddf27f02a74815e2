"""Words of the gRPC contract that the proto (``protos/showtell/v1/metrics.proto``) cannot carry:
the run id meaning "every run", and how the evaluator ends its streams when it stops.  Server
and clients both import them from here."""

ALL_RUNS = "*"  # a request's run_id for every run (empty: the model dir's current run)
STOPPING = "the evaluator is stopping; reconnect to its next instance"  # how its streams end
DEFAULT_SET = "val"  # the evaluation set of --data's validation split; a request's empty eval_set
ALL_SETS = "*"  # a request's eval_set for every set
POLICIES = ("latest", "all")  # EvaluatorStatus.policy: which checkpoints an evaluator takes
