"""The trainer service as a library: ``run(experiment)`` trains a ``TrainExperiment`` (its
assembly: ``assembly``), with no command line — ``showtell train`` is one caller of it."""

from showtell.common.errors import require_tensorflow

require_tensorflow()

_EXPORTS = {"run": "assembly", "build_task": "assembly", "TrainExperiment": "experiment"}


def __getattr__(name: str):
    """``showtell.trainer.run`` and friends, imported when first used (the package stays cheap)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
