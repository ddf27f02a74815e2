"""The installed version of a package, for ``showtell --version`` and a run's record."""

from __future__ import annotations

import importlib.metadata

NOT_INSTALLED = "(not installed)"


def installed_version(package: str = "showtell") -> str:
    """``package``'s version; ``(not installed)`` when run from a source tree not installed."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return NOT_INSTALLED
