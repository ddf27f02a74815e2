"""The evaluator service: validate checkpoints of a model dir, report metrics."""

from showtell.common.errors import require_tensorflow

require_tensorflow()
