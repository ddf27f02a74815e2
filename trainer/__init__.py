"""The trainer service: training loop, checkpoint schedule, summaries, CLI."""

from showtell.common.errors import require_tensorflow

require_tensorflow()
