"""``showtell train``'s configuration flags come from the config dataclasses: each option is
written once (``showtell.captioning.config``), and flags and configs agree both ways."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from showtell.captioning.config import CacheConfig, InputConfig, ModelConfig
from showtell.commands import train as cli
from showtell.common.flags import Parser, config_flags
from showtell.trainer.config import ComputeConfig, OptimizerConfig, TrainConfig
from showtell.trainer.experiment import SECTIONS, Source, TrainExperiment, from_flags, settings


@pytest.fixture
def parser() -> Parser:
    p = Parser(prog="showtell train")
    cli.add_arguments(p)
    return p


def test_unset_flags_give_the_dataclass_defaults(parser):
    built = from_flags(vars(parser.parse_args(["--data", "d", "--model-dir", "m"])))
    assert built == TrainExperiment(source=Source(data=Path("d"), model_dir=Path("m")),
                                    input=InputConfig(seed=TrainConfig().seed))
    assert (built.train, built.model, built.optimizer, built.cache, built.compute) == (
        TrainConfig(), ModelConfig(), OptimizerConfig(), CacheConfig(), ComputeConfig())


def test_each_flag_sets_exactly_its_field(parser):
    built = from_flags(vars(parser.parse_args([
        "--data", "d", "--model-dir", "m", "--lstm-units", "7", "--save-every-secs", "0", "--cache-dir", "/c",
        "--optimizer", "adam", "--deterministic-input", "--feature-cache", "false", "--seed", "5",
        "--devices", "CPU:0,CPU:1", "--gpus", "2", "--follow-encoder", "true",
        "--inception-weights", "e.weights.h5"])))
    assert built.model == dataclasses.replace(ModelConfig(), lstm_units=7)
    assert built.train == dataclasses.replace(TrainConfig(), save_every_secs=None, seed=5)
    assert built.cache == CacheConfig(root="/c", enabled=False)
    assert built.optimizer == OptimizerConfig(name="adam")
    assert built.input == InputConfig(deterministic=True, seed=5)
    assert built.distribution.devices == ("CPU:0", "CPU:1") and built.distribution.gpus == 2
    assert built.followed_encoder == Path("e.weights.h5")
    recorded = settings(built)  # the run's record, read from the experiment
    assert recorded["lstm_units"] == 7 and recorded["devices"] == ["CPU:0", "CPU:1"]
    assert recorded["profile_steps"] is None and recorded["data"] == "d"


def test_more_gpus_than_tensorflow_sees_is_one_line_naming_the_flag():
    from showtell.common.errors import UsageError
    from showtell.trainer.distribution.placement import configure_devices

    with pytest.raises(UsageError, match=r"^--gpus 1: TensorFlow sees 0 GPUs here; give --gpus all or"):
        configure_devices(None, gpus=1)  # this machine has none


def _help_entries(parser) -> dict[str, str]:
    """Flag → its help text, as ``--help`` prints it (whitespace normalised)."""
    entries, flag = {}, None
    for line in parser.format_help().splitlines():
        stripped = line.strip()
        if stripped.startswith("-"):  # "--flag …", or "-v, --verbose …"
            words = stripped.split()
            flag = words[1] if words[0].endswith(",") else words[0]
            entries[flag] = stripped
        elif flag and line.startswith(" " * 10):
            entries[flag] += " " + stripped
        else:
            flag = None
    return entries


def test_every_option_field_has_its_default_in_its_help_shown_or_kept_for_the_keys(parser):
    entries = _help_entries(parser)
    hidden = parser.hidden_help
    for config in SECTIONS.values():
        for field, flag in config_flags(config):
            dest = flag.lstrip("-").replace("-", "_")
            assert (flag in entries) != (dest in hidden), flag  # in --help, or in the keys' reference
            text = entries[flag] if flag in entries else " ".join(hidden[dest].split())
            if field.default is not None and field.metadata["argparse"].get("action") != "store_true":
                value = field.default
                shown = str(value).lower() if isinstance(value, bool) else \
                    f"{value:g}" if isinstance(value, float) else str(value)
                assert text.endswith(f"(default {shown})"), text


DESIGN_FLAGS = ("--data", "--model-dir", "--steps", "--batch-size", "--image-size", "--save-every-secs",
                "--save-every-steps", "--keep", "--inception-weights", "--train-inception", "--strategy",
                "--devices", "--logical-cpus", "--ps-hosts", "--worker-hosts", "--chief-host", "--job-name",
                "--task-index")


def test_the_help_fits_a_screen_and_every_setting_has_a_dotted_key(parser):
    """``--help``: at most 32 flags — the design's command line and the everyday ones; every other
    flag still parses, and every setting (shown or not) has a dotted key whose flag it is."""
    import argparse

    from showtell.common.setting_sources import keys_of
    from showtell.trainer.experiment import keys

    shown = [a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS]
    names = {name for a in shown for name in a.option_strings}
    assert len(shown) <= 32, sorted(names)
    assert names <= {w.strip("[],") for w in parser.format_help().split()}  # what --help prints
    assert set(DESIGN_FLAGS) <= names
    assert {"--config", "--set", "--learning-rate", "--evaluator", "--prometheus-port", "--log-format",
            "--verbose"} <= names
    settings = {a.dest for a in parser._actions if a.option_strings} - {"help", "config", "print_config",
                                                                          "set"}
    assert set(keys_of(parser).values()) == settings == set(keys().values())
    hidden = parser.parse_args(["--data", "d", "--model-dir", "m", "--lstm-units", "7",
                                "--shuffle-buffer", "9"])
    assert (hidden.lstm_units, hidden.shuffle_buffer) == (7, 9)  # left out of --help, still a flag


def test_the_evaluator_cli_builds_a_typed_config_and_refuses_combinations_in_one_line(showtell_main):
    from showtell.commands.evaluate import config_from_args
    from showtell.evaluator.config import EvaluatorConfig, Finish
    from showtell.evaluator.records.workdir import WorkDir
    from tests.helpers import parse_cli

    args = parse_cli("showtell.commands.evaluate", ["--model-dir", "runs/m", "--data", "d", "--policy", "all",
                                             "--port", "0", "--exit-when-trained", "--export-best", "cider"])
    config = config_from_args(args)
    assert isinstance(config, EvaluatorConfig) and config.work == WorkDir(Path("runs/m-eval"))
    assert (config.watch.policy, config.serve.port, config.serve.host) == ("all", 0, "127.0.0.1")
    assert config.finish == Finish(when_trained=True) and config.export.export_best == "cider"
    assert (config.evaluation.beam_size, config.evaluation.meteor, config.watch.arrival_timeout) == \
        (3, True, 300.0)
    once_and_an_end = ("--until-step, --max-evaluations and --exit-when-trained end the service; --once "
                       "already evaluates one checkpoint")
    for flags, problem in (
            (["--once", "--until-step", "5"], once_and_an_end),
            (["--json"], "--checkpoint and --json go with --once")):
        result = showtell_main("evaluate", "--model-dir", "m", "--data", "d", *flags)
        assert result.returncode == 2
        assert result.stderr == f"showtell evaluate: error: {problem} (see --help)\n"


def test_a_background_threads_uncaught_exception_is_one_log_record(monkeypatch, caplog):
    """One record is one write: a command's one-line error cannot land inside its traceback (it
    did in a parameter-server chief's log, after TensorFlow's coordinator thread failed)."""
    import threading

    from showtell.common.flags import setup_logging

    monkeypatch.setattr(threading, "excepthook", threading.__excepthook__)  # as in a fresh process
    setup_logging()
    assert threading.excepthook is not threading.__excepthook__
    thread = threading.Thread(target=lambda: 1 / 0, name="coordinator")
    thread.start()
    thread.join()
    [record] = [r for r in caplog.records if "uncaught exception in thread coordinator" in r.getMessage()]
    assert record.exc_info[0] is ZeroDivisionError and record.levelname == "ERROR"
