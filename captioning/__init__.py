"""Shared core of showtell: config, vocabulary, data, model, inference, metrics.

Both services (``trainer`` and ``evaluator``) import this package; it imports neither.
"""

from showtell.common.errors import require_tensorflow

require_tensorflow()
