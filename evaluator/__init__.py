"""The evaluator service: validate checkpoints of a model dir, report metrics."""
