"""What the demo shows and whom it supervises: the console (tagged lines, a heartbeat), a relay of
each child's log, and the children themselves — each stopped by its PID, whatever happens."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path

from showtell.common import processes


class Console:
    """Everything the demo prints, one tagged line at a time with the minutes since it started;
    and a heartbeat: after ``quiet`` seconds without a line it says what is running."""

    def __init__(self, quiet: float = 25.0) -> None:
        self.started = self.last = time.monotonic()
        self.quiet = quiet
        self.status = "starting"
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, name="demo-heartbeat", daemon=True)
        self._heartbeat.start()

    def say(self, tag: str, text: str, *more: str) -> None:
        with self._lock:
            elapsed = time.monotonic() - self.started
            stamp = f"{int(elapsed // 60):2d}:{int(elapsed % 60):02d}"
            print(f"{stamp} [{tag}] {text}", *more, sep="\n", flush=True)
            self.last = time.monotonic()

    def close(self) -> None:
        self._done.set()

    def _beat(self) -> None:
        while not self._done.wait(1.0):
            if time.monotonic() - self.last >= self.quiet:
                self.say("demo", self.status)


class Relay:
    """Follows a child's log file and passes its progress to the console: lines matching
    ``keep`` at once, the newest ``progress`` line at most every ``every`` seconds (a phase-1
    trainer logs several a second), with the time left in its phase."""

    _PREFIX = re.compile(r"^\d\d:\d\d:\d\d [A-Z] [\w.]+: ")

    def __init__(self, *, console: Console, tag: str, path: Path, keep: str, progress: str = r"(?!)",
                 ends_at: float | None = None, every: float = 20.0) -> None:
        self.console, self.tag, self.path = console, tag, path
        self.keep, self.progress = re.compile(keep), re.compile(progress)
        self.ends_at, self.every = ends_at, every
        self.final_at: float | None = None  # when its "final checkpoint" line was read (monotonic)
        self._offset = path.stat().st_size if path.exists() else 0  # only this run's lines
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"relay-{tag}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        shown, pending = 0.0, None
        while True:
            stopping = self._stop.wait(1.0)
            for line in self._new_lines():
                text = self._PREFIX.sub("", line)
                if self.keep.search(text):
                    self.console.say(self.tag, text)
                    if text.startswith("final checkpoint"):  # said again when the trainer has exited
                        self.final_at = time.monotonic()
                        self.console.status = f"{self.tag}: final checkpoint written; waiting for it to exit"
                elif self.progress.search(text):
                    pending = text
            if pending and (stopping or time.monotonic() - shown >= self.every):
                left = "" if self.ends_at is None else \
                    f"; {max(0, self.ends_at - time.monotonic()):.0f} s left"
                self.console.say(self.tag, pending + left)
                shown, pending = time.monotonic(), None
            if stopping:
                return

    def _new_lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except FileNotFoundError:
            return []
        complete = chunk[:chunk.rfind(b"\n") + 1]  # a line still being written waits for its end
        self._offset += len(complete)
        return complete.decode(errors="replace").replace("\r", "\n").splitlines()


class Children:
    """The demo's processes, each stopped by its PID whatever happens; a child started with a
    ``relay`` has its progress passed to the console."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.running: dict[str, subprocess.Popen] = {}
        self.relays: dict[str, Relay] = {}

    def start(self, name: str, args: list[str], log_path: Path,
              relay: dict | None = None) -> subprocess.Popen:
        if relay is not None:
            tag = "train" if name == "trainer" else name
            self.relays[name] = Relay(console=self.console, tag=tag, path=log_path, **relay)
        proc = processes.start(args, log_path)
        self.running[name] = proc
        self.console.say("demo", f"{name} pid {proc.pid} (log {log_path})")
        return proc

    def wait(self, name: str) -> int:
        code = self.running[name].wait()  # still listed while waited for: an interrupt stops it
        exited = time.monotonic()
        del self.running[name]
        if name in self.relays:
            relay = self.relays.pop(name)
            relay.close()  # its last lines first
            if relay.final_at is not None:  # read up to a second late: the log is read every second
                after = max(0.0, exited - relay.final_at)
                self.console.say("demo", f"the {name} exited {code}, {after:.0f} s after its final "
                                         "checkpoint")
        return code

    def stop_all(self) -> None:
        """Each running child by its PID, said on the console like every other line."""
        for name, proc in reversed(list(self.running.items())):
            if proc.poll() is None:
                self.console.say("demo", f"stopping the {name} (pid {proc.pid})")
            code = processes.stop(proc, 60.0)
            self.console.say("demo", f"the {name} (pid {proc.pid}) exited {code}")
        self.running.clear()
        for relay in self.relays.values():
            relay.close()
        self.relays.clear()


def wait_for_file(path: Path, children: Children, name: str) -> bool:
    """Wait (asleep, a second at a time) until ``path`` exists; False if child ``name`` ended first."""
    while not path.is_file():
        proc = children.running.get(name)
        if proc is None or proc.poll() is not None:
            return path.is_file()
        time.sleep(1.0)
    return True
