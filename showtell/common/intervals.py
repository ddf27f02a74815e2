"""How a metric with its confidence interval is written, wherever it is shown (``showtell
metrics``, ``evaluate --once``, the demo): ``0.7700 (0.6900–0.8500)``."""

from __future__ import annotations

from collections.abc import Sequence


def with_interval(value: float, bounds: Sequence[float] | None = None, digits: int = 4) -> str:
    """``value`` and, when known, its interval's bounds in brackets."""
    if bounds is None or len(bounds) != 2:
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} ({bounds[0]:.{digits}f}–{bounds[1]:.{digits}f})"
