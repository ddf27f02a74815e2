"""User-facing errors.

A ``ShowtellError`` carries a one-line message that names the file or flag at fault and
says what to do.  Command-line entry points print it as a single line and exit non-zero,
instead of a traceback; library code raises it wherever bad input is detected.
"""

import importlib.util

# The one line a user sees, not a traceback ending in "No module named 'tensorflow'": TensorFlow
# comes from an extra (CPU or CUDA build) because the two builds cannot share an environment.
NO_TENSORFLOW = ("TensorFlow is not installed: install showtell with one of its extras, "
                 "pip install 'showtell[cpu]' (CPU) or 'showtell[and-cuda]' (NVIDIA GPUs)")


def require_tensorflow() -> None:
    """Raise ``NO_TENSORFLOW`` as the ModuleNotFoundError importing it would raise; finds the
    module without importing it, so packages call it at import and ``--help`` stays instant."""
    if importlib.util.find_spec("tensorflow") is None:
        raise ModuleNotFoundError(NO_TENSORFLOW, name="tensorflow")


class ShowtellError(Exception):
    """An error caused by the user's input (flags, files); the message is for humans."""

    exit_code = 1


class UsageError(ShowtellError):
    """The command used wrongly (an unknown run id, words missing): exit 2, as argparse exits on a
    bad flag — a script tells "you asked wrongly" from "it failed"."""

    exit_code = 2


class DataError(ShowtellError):
    """A dataset directory, shard, record or image that cannot be used."""


class ModelDirError(ShowtellError):
    """A model directory whose contents do not match the requested model."""


class ModelDirIncomplete(ModelDirError):
    """A file the model dir should hold is not there (yet: a synced copy may still be arriving)."""


class WeightsError(ShowtellError):
    """Pretrained weights that cannot be found, read, or mapped onto the encoder."""


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message (TensorFlow's run to dozens), or its type's name."""
    message = getattr(exc, "message", None)  # TensorFlow's OpError: without the op's traceback
    text = message if isinstance(message, str) else str(exc)
    return (text.strip().splitlines() or [type(exc).__name__])[0][:limit]
