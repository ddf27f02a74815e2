"""Configuration options written once, on the config dataclasses: ``option(default, help, …)``
and the checks their values must pass (``positive_int``, ``fraction`` …).

A leaf: it imports nothing of showtell, so the model's and the services' configurations
(``captioning/config.py``, ``trainer/config.py``, ``evaluator/config.py``) depend on no command
line.  ``common/flags.py`` makes each option a flag and each check an argparse type.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable


class Invalid(ValueError):
    """A value a check refuses; the message says what is allowed (``must be ≥ 1 (got 0)``)."""


class Check:
    """A named parse-and-check of one value given as text; raises ``Invalid`` with what is allowed
    (or ``ValueError``, which the flag reports as "invalid <name> value")."""

    def __init__(self, name: str, parse: Callable[[str], object]) -> None:
        self.name, self.parse = name, parse

    def __call__(self, text: str):
        return self.parse(text)

    def __repr__(self) -> str:  # what argparse names the type by
        return self.name


def check(name: str) -> Callable[[Callable], Check]:
    """Decorator: ``@check("positive integer")`` over a parse function."""
    return lambda parse: Check(name, parse)


def _at_least(value, low, text: str, strict: bool = False):
    if value < low or (strict and value == low):
        raise Invalid(f"must be {'>' if strict else '≥'} {low} (got {text})")
    return value


@check("positive integer")
def positive_int(text: str) -> int:
    return _at_least(int(text), 1, text)


@check("positive integer or 'auto'")
def positive_int_or_auto(text: str) -> int | str:
    return "auto" if text == "auto" else _at_least(int(text), 1, text)


@check("integer ≥ 0")
def non_negative_int(text: str) -> int:
    return _at_least(int(text), 0, text)


@check("number ≥ 0")
def non_negative_float(text: str) -> float:
    return _at_least(float(text), 0, text)


@check("number > 0")
def positive_float(text: str) -> float:
    return _at_least(float(text), 0, text, strict=True)


@check("seconds, 0 for never")
def seconds_or_never(text: str) -> float | None:
    return _at_least(float(text), 0, text) or None


@check("fraction")
def fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise Invalid(f"must be in [0, 1) (got {text})")
    return value


@check("fraction")
def open_fraction(text: str) -> float:
    value = float(text)
    if not 0.0 < value < 1.0:
        raise Invalid(f"must be between 0 and 1, both excluded (got {text})")
    return value


@check("true|false")
def boolean(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise Invalid(f"expected true or false (got {text})")


def or_auto(parse: Check) -> Check:
    """``parse``, plus ``auto`` for the option's default (None): a compose file or a preset always
    passes the flag, and ``auto`` is how it says "as if not given"."""
    return Check(f"{parse.name}|auto", lambda text: None if text.lower() == "auto" else parse(text))


# --mixed-precision → the Keras dtype policy the network is built under: a value both the model
# (``captioning/model/network.py``) and the trainer's compute options (``trainer/config.py``) read.
PRECISIONS = {"off": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


def option(default, help: str, *, flag: str | None = None, shown: bool = False, env: str | None = None,
           short: str | None = None, **argparse_kwargs):
    """A config dataclass field that is also a command-line flag (``--<field-name>`` unless
    ``flag`` names it; ``short`` adds a one-letter alias).  Its default and help are written here
    once; ``common/flags.py`` makes the flag and reads it back.  ``shown``: in ``--help`` (a
    command that keeps its help to one screen leaves the rest to docs/cli.md); ``env``: an older
    named environment variable that sets it (below ``--config`` files), checked as the flag is."""
    metadata = {"flag": flag, "help": help, "argparse": argparse_kwargs, "shown": shown, "env": env,
                "short": short}
    return dataclasses.field(default=default, metadata=metadata)


def config_flags(config_cls) -> list[tuple[dataclasses.Field, str]]:
    """The (field, flag) pairs of a config dataclass's ``option`` fields."""
    return [(f, f.metadata["flag"] or "--" + f.name.replace("_", "-"))
            for f in dataclasses.fields(config_cls) if "help" in f.metadata]
