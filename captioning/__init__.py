"""Shared core of showtell: the settings both services share (``config``), data (datasets and
their splits, records, the input pipeline, the feature cache), the model (network, beam search,
validation, export, restoring a model dir's checkpoints) and pretrained-weight import.

Both services (``trainer`` and ``evaluator``) import this package; it imports neither.
"""

from showtell.common.errors import require_tensorflow

require_tensorflow()
