"""The default compose stack from `up`: its first evaluation over gRPC, the longest quiet in its
logs meanwhile, and the switch to the finished pretraining's encoder.

Runs the real ``docker-compose.yml`` with every default (only the host ports moved) on the tests'
private dockerd (``tests/docker_engine.py``: Debian's docker.io, a debootstrap base image, both
images built first — not timed), then ``down -v``.  Alone on the machine: the stack takes both
cores.  Prints one JSON object.

    .venv/bin/python bench/compose_up.py            # to the first evaluation
    .venv/bin/python bench/compose_up.py --switch   # and on to the final encoder's first evaluation
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rounds import add_out, publish  # noqa: E402

from tests import docker_engine  # noqa: E402 - the tests' engine harness, from the checkout
from tests.helpers import wait_for  # noqa: E402
from tests.measure import free_ports  # noqa: E402


def latest(port: int) -> dict | None:
    result = subprocess.run([sys.executable, "-m", "showtell", "metrics", "latest", "--json", "--timeout",
                             "5", "--server", f"127.0.0.1:{port}"], capture_output=True, text=True, cwd=ROOT)
    if result.returncode:
        return None
    evaluation = json.loads(result.stdout)
    return evaluation if evaluation["status"] == "STATUS_OK" else None


def longest_quiet(logs: str, since: datetime.datetime) -> float:
    """The longest time between two log lines of any service (``docker-compose logs -t``)."""
    stamps = sorted(datetime.datetime.fromisoformat(s[:26]).replace(tzinfo=datetime.UTC)
                    for s in re.findall(r"\| (\d{4}-\d\d-\d\dT[\d:.]+)Z", logs))
    stamps = [since, *(s for s in stamps if s >= since)]
    return max(((b - a).total_seconds() for a, b in itertools.pairwise(stamps)), default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--switch", action="store_true",
                    help="also wait for the final encoder's first evaluation")
    add_out(ap, "compose_up")
    args = ap.parse_args()
    build = docker_engine.prebuild(ROOT).wait()
    grpc_port, board_port = free_ports(2)
    stack = docker_engine.Stack(build.engine, build.project, "showtell-bench", {
        **docker_engine.BUILD_ENV, "SHOWTELL_GRPC_PORT": str(grpc_port),
        "SHOWTELL_TENSORBOARD_PORT": str(board_port)}, ["docker-compose.yml"])
    figures: dict[str, object] = {"images_built": build.figures}
    try:
        since, started = datetime.datetime.now(datetime.UTC), time.monotonic()
        stack.run("up", "-d")
        first = wait_for(lambda: latest(grpc_port), 900, "a first evaluation", interval=2)
        logs = stack.run("logs", "-t", "--no-color").stdout
        figures.update(up_to_first_evaluation_s=round(time.monotonic() - started, 1),
                       first_step=first["global_step"], first_exact_match=first["metrics"].get("exact_match"),
                       longest_quiet_s=round(longest_quiet(logs, since), 1))
        if args.switch:
            wait_for(lambda: "kept aside" in stack.logs("trainer"), 900, "the final encoder's run",
                     interval=5)
            figures["up_to_final_encoder_run_s"] = round(time.monotonic() - started, 1)
            final = wait_for(lambda: (e := latest(grpc_port)) and e["run_id"] != first["run_id"] and e, 900,
                             "an evaluation of the final encoder's run", interval=3)
            steps = re.findall(r"pretrained (\d+) steps in (\d+) s", stack.logs("pretrain"))
            figures["pretraining_steps_and_s"] = [int(x) for x in steps[-1]] if steps else None
            figures.update(up_to_its_first_evaluation_s=round(time.monotonic() - started, 1),
                           its_step=final["global_step"], its_exact_match=final["metrics"].get("exact_match"),
                           restarts=stack.container("trainer").attrs["RestartCount"])
    finally:
        stack.run("down", "-v", "--remove-orphans", check=False)
        docker_engine.stop_prebuild()
    publish(figures, args.out, indent=None)


if __name__ == "__main__":
    main()
