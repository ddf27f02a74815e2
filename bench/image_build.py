"""Both images built from nothing, as the Docker test builds them: a private ``dockerd`` (root;
``apt-get`` installs what is missing), the debootstrap base (cached in /var/cache/showtell-docker
after its first build: not counted), then ``docker-compose build trainer`` and ``evaluator``.
Prints one JSON line: each build's seconds, the wheelhouse's, and the images' sizes.

    .venv/bin/python bench/image_build.py                    # this checkout, wheels from a wheelhouse
    .venv/bin/python bench/image_build.py --no-wheelhouse    # … the builds fetching from PyPI
    .venv/bin/python bench/image_build.py --checkout DIR     # another commit's tests/docker_engine.py

Run it alone on the machine: the builds use both cores.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

from rounds import add_out, publish


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the checkout to build (its own tests/docker_engine.py builds it)")
    parser.add_argument("--no-wheelhouse", action="store_true",
                        help="let the builds fetch their wheels from PyPI, as a user's `up` does")
    add_out(parser, "image_build")
    args = parser.parse_args()
    sys.path.insert(0, str(args.checkout))
    engine = importlib.import_module("tests.docker_engine")
    started = time.monotonic()
    # an older checkout's prebuild has no wheelhouse to turn off
    build = engine.prebuild(args.checkout, use_wheelhouse=False) if args.no_wheelhouse \
        else engine.prebuild(args.checkout)
    try:
        result = build.wait()
        figures = dict(result.figures)
        for service in ("trainer", "evaluator"):
            image = result.engine.client.images.get(f"showtell-{service}:test").attrs
            figures[f"{service}_image_mb"] = round(image["Size"] / 1e6)
        figures["wall_s"] = round(time.monotonic() - started, 1)
        publish({"checkout": str(args.checkout), "wheelhouse": not args.no_wheelhouse, **figures}, args.out,
                indent=None)
    finally:
        engine.stop_prebuild()


if __name__ == "__main__":
    main()
