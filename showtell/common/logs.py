"""How every command logs: human lines by default, or ``--log-format json`` — one JSON object a
line (time, level, logger, message, and the run and step where known) for log pipelines
(Loki, Cloud Logging, Elasticsearch) that would otherwise parse free text.

The run and step of a record come from ``extra={"run": …, "step": …}`` where the code knows
them, else from ``CONTEXT`` (a service sets the run it works on once it knows it).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from datetime import UTC, datetime

FORMATS = ("text", "json")
CONTEXT: dict[str, object] = {}  # e.g. {"run": "20261126-…"}: added to every JSON record
_state = {"format": "text"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (a traceback goes in its ``exception`` field)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
                                                                .replace("+00:00", "Z"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        for key in ("run", "step"):
            value = getattr(record, key, CONTEXT.get(key))
            if value is not None and value != "":
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def setup_logging(verbose: bool = False, log_format: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
        logging.captureWarnings(True)  # Python's warnings too, as records rather than raw text
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname).1s %(name)s: %(message)s",
                                               datefmt="%H:%M:%S"))
    _state["format"] = log_format
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    logging.getLogger("absl").setLevel(logging.ERROR)
    if not verbose:  # TensorFlow's own INFO lines (closure waits, reduce plans) drown ours
        logging.getLogger("tensorflow").setLevel(logging.WARNING)
    if threading.excepthook is threading.__excepthook__:  # not one someone else installed
        threading.excepthook = _log_thread_exception


def progress_bars() -> bool:
    """Whether long loops draw tqdm bars: not under JSON logs, where every line must be JSON."""
    return _state["format"] != "json"


def error_line(prog: str, message: str) -> str:
    """A command's one-line error as it goes to stderr: text, or a JSON record under json logs."""
    if _state["format"] == "json":
        record = logging.LogRecord("showtell", logging.ERROR, "", 0, f"{prog}: error: {message}", None, None)
        return JsonFormatter().format(record)
    return f"{prog}: error: {message}"


def _log_thread_exception(args: threading.ExceptHookArgs) -> None:
    """A background thread's uncaught exception as one log record (one write).  Python's own hook
    writes a traceback piece by piece, and a command's one-line error could land inside it — seen
    when TensorFlow's cluster coordinator thread failed as a parameter-server chief gave up."""
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    logging.getLogger("showtell").error("uncaught exception in thread %s", name,
                                        exc_info=(args.exc_type, args.exc_value, args.exc_traceback))
