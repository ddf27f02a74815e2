"""``--config FILE``: a YAML file of settings on ``train``, ``pretrain``, ``evaluate`` and ``demo`` —
flags override the file, the file overrides the defaults, each value is checked as its flag
would be, and a bad file is one line naming the file, the key and what is allowed (exit 2).
In process (``showtell_main``, ``--print-config``): nothing crosses a process boundary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.helpers import printed_settings


def _print(showtell_main, *argv: str) -> dict:
    """The settings ``--print-config`` prints (YAML, by section), by argument name."""
    result = showtell_main("train", *argv, "--print-config")
    assert result.returncode == 0, result.stderr[-2000:] + result.logs[-2000:]
    return printed_settings(result.stdout)["settings"]


def test_print_config_reads_back_to_the_same_settings_without_data_or_a_model_dir(tmp_path: Path,
                                                                                   showtell_main):
    """The round trip: what ``--print-config`` prints, ``--config`` reads back to the same settings
    (nulls are the defaults), and prints again the same; several files merge in order; a run's
    record is a config file too (its last revision's settings)."""
    first = showtell_main("train", "--steps", "7", "--devices", "CPU:0", "--learning-rate", "0.01",
                          "--profile-steps", "3:5", "--print-config")
    assert first.returncode == 0, first.stderr[-2000:]
    printed = tmp_path / "printed.yaml"
    printed.write_text(first.stdout)
    assert yaml.safe_load(first.stdout)["train"]["first_save_secs"] is None  # null: the default, read back
    assert yaml.safe_load(first.stdout)["runtime"]["profile_steps"] == "3:5"  # as its flag writes it
    again = showtell_main("train", "--config", str(printed), "--print-config")
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout == first.stdout

    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("batch-size: 8\nsteps: 3\n")
    b.write_text("steps: 5\nsave-every-secs: null\n")  # null: never, as --save-every-secs 0 records it
    merged = _print(showtell_main, "--config", str(a), "--config", str(b))
    assert (merged["batch_size"], merged["steps"], merged["save_every_secs"]) == (8, 5, None)
    assert "config" not in merged and "print_config" not in merged  # how settings came, not settings

    record = tmp_path / "runs" / "r.json"  # a run's record, as the trainer writes it (abridged)
    record.parent.mkdir()
    first = {"at": "…", "step": 0, "settings": {"steps": 2, "batch_size": 4, "devices": ["CPU:0"],
                                                 "config": ["x.yaml"], "print_config": False, "data": "d"},
             "resolved": {"global_batch": 4}, "environment": {"python": "3.11"}}
    record.write_text(json.dumps({"run_id": "r", "revisions": [first]}))
    repeated = _print(showtell_main, "--config", str(record), "--model-dir", str(tmp_path / "new"))
    assert (repeated["steps"], repeated["batch_size"], repeated["devices"], repeated["data"],
            repeated["model_dir"]) == (2, 4, "CPU:0", "d", str(tmp_path / "new"))
    # resumed with other settings: two revisions, which no one revision's settings repeat — refused
    # in one line naming the second, and the record left as it was
    second = {"at": "…", "step": 2, "changed": ["--steps: 2 → 4"],
              "settings": {"steps": 4, "batch_size": 4, "devices": ["CPU:0"], "data": "d"}}
    record.write_text(text := json.dumps({"run_id": "r", "revisions": [first, second]}))
    refused = showtell_main("train", "--config", str(record), "--model-dir", str(tmp_path / "new"),
                            "--print-config")
    assert refused.returncode == 2 and "run r has 2 revisions — revision 2 changed --steps: 2 → 4 at step 2" \
        in refused.stderr and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert record.read_text() == text
    missing = showtell_main("train", "--steps", "3")
    assert missing.returncode == 2
    assert missing.stderr.strip() == ("showtell train: error: the following arguments are required: --data, "
                                      "--model-dir (see --help)")


@pytest.mark.slow
def test_flags_override_the_file_and_the_file_the_defaults(tiny_data: Path, tmp_path: Path, showtell_main):
    config = tmp_path / "recipe.yaml"
    config.write_text(f"data: {tiny_data}\nmodel-dir: {tmp_path / 'm'}\nbatch_size: 8\noptimizer: adam\n"
                      "learning-rate: 0.01\ndeterministic-input: true\nsteps: 5\nembedding-size: 32\n"
                      "lstm-units: 32\ntrain-inception: false\nmixed-precision: off\n")
    settings = _print(showtell_main, "--config", str(config), "--batch-size", "16")
    assert settings["batch_size"] == 16  # the flag wins
    assert (settings["optimizer"], settings["learning_rate"], settings["steps"]) == ("adam", 0.01, 5)
    assert settings["deterministic_input"] is True and settings["train_inception"] is False
    assert settings["mixed_precision"] == "off"  # YAML 1.1 reads a bare off as false: taken as meant
    assert settings["data"] == str(tiny_data)  # a required flag given by the file
    assert settings["save_every_secs"] == 600.0  # a default
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(("text", "error"), [
    ("batch_sise: 8\n", "unknown key 'batch_sise' (did you mean batch-size?); keys are the flags of "
                        "showtell train without the dashes, or dotted keys in sections"),
    ("batch-size: 0\n", "batch-size: must be ≥ 1 (got 0)"),
    ("batch-size: null\n", "batch-size: expected a value (null is not one for this flag)"),
    ("batch-size: many\n", "batch-size: invalid positive integer value: 'many'"),
    ("optimizer: rmsprop\n", "optimizer: 'rmsprop' is not one of sgd, momentum, adam"),
    ("deterministic-input: sometimes\n", "deterministic-input: expected true or false (got 'sometimes')"),
    ("- batch-size\n", "expected settings as a mapping, e.g. 'batch-size: 32'"),
    ("batch-size: [1, 2\n", "not YAML (while parsing a flow sequence)"),
])
def test_a_bad_file_is_one_line_naming_the_file_and_key(tmp_path: Path, showtell_main, text: str, error: str):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    result = showtell_main("train", "--config", str(config), "--data", "d",
                           "--model-dir", str(tmp_path / "m"))
    assert result.returncode == 2
    assert result.stderr.strip() == f"showtell train: error: --config {config}: {error} (see --help)"
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("command", ["pretrain", "evaluate", "demo"])
def test_every_long_running_command_reads_a_config_file(tmp_path: Path, showtell_main, command: str):
    config = tmp_path / "c.yaml"
    config.write_text("no-such-setting: 1\n")
    result = showtell_main(command, "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"showtell {command}: error: --config {config}: unknown key 'no-such-setting'")


@pytest.mark.parametrize(("command", "argv", "key", "shown"), [
    ("pretrain", ["--data", "{data}", "--out", "{tmp}/e.weights.h5", "--batch-size", "8"], "batch-size", 8),
    ("evaluate", ["--model-dir", "{tmp}/m", "--data", "{data}", "--eval-set", "unseen={data}:5",
                  "--eval-set", "all={data}", "--policy", "all"],
     "eval-set", ["unseen={data}:5", "all={data}"]),
    ("demo", ["--phases", "0.5,0.5,0", "--seconds", "90"], "phases", "0.5,0.5,0"),
])
def test_every_command_prints_settings_its_config_reads_back(tiny_data: Path, tmp_path: Path, showtell_main,
                                                             command: str, argv: list[str], key: str, shown):
    """The round trip on each command that takes ``--config``: ``--print-config`` prints YAML
    (a repeated flag as a list, a flag's own type as its text) that ``--config`` reads back to the
    same settings, printed again the same; nothing is written."""
    def filled(value):
        text = {"data": str(tiny_data), "tmp": str(tmp_path)}
        return [filled(v) for v in value] if isinstance(value, list) else (
            value.format(**text) if isinstance(value, str) else value)

    first = showtell_main(command, *filled(argv), "--print-config")
    assert first.returncode == 0, first.stderr[-2000:]
    assert yaml.safe_load(first.stdout)[key] == filled(shown)
    printed = tmp_path / "printed.yaml"
    printed.write_text(first.stdout)
    again = showtell_main(command, "--config", str(printed), "--print-config")
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout == first.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["printed.yaml"]  # nothing written


def test_any_key_by_its_dotted_name_in_flags_files_or_the_environment(tmp_path: Path, showtell_main,
                                                                     monkeypatch):
    """``--set optimizer.learning_rate=0.1``, ``--optimizer.learning_rate 0.1`` and ``=0.1``, a
    file's section (``optimizer: {learning_rate: …}``) and ``SHOWTELL_OPTIMIZER__LEARNING_RATE``
    reach the setting ``--learning-rate`` does: defaults ← files ← environment ← command line."""
    printed = _print(showtell_main, "--set", "optimizer.learning_rate=0.1", "--optimizer.name", "adam",
                     "--model.lstm_units=64", "--set", "input.deterministic=true", "--set",
                     "distribution.devices=CPU:0,CPU:1")
    assert (printed["learning_rate"], printed["optimizer"], printed["lstm_units"]) == (0.1, "adam", 64)
    assert printed["deterministic_input"] is True and printed["devices"] == "CPU:0,CPU:1"
    # the last of a flag and its dotted key wins, as for a flag given twice
    assert _print(showtell_main, "--learning-rate", "0.2", "--set", "optimizer.learning_rate=0.3")[
        "learning_rate"] == 0.3
    assert _print(showtell_main, "--set", "optimizer.learning_rate=0.3", "--learning-rate", "0.2")[
        "learning_rate"] == 0.2
    # … true/false keys too: a false after the flag undoes it, the flag after a false sets it
    for argv, expected in ((("--deterministic-input", "--set", "input.deterministic=false"), False),
                           (("--deterministic-input", "--input.deterministic", "false"), False),
                           (("--set", "input.deterministic=false", "--deterministic-input"), True)):
        assert _print(showtell_main, *argv)["deterministic_input"] is expected, argv

    nested = tmp_path / "nested.yaml"
    nested.write_text("optimizer:\n  name: momentum\n  learning_rate: 0.3\ntrain:\n  steps: 9\n"
                      "input:\n  deterministic: true\nbatch-size: 8\n")
    from_file = _print(showtell_main, "--config", str(nested))
    assert (from_file["optimizer"], from_file["learning_rate"], from_file["steps"], from_file["batch_size"],
            from_file["deterministic_input"]) == ("momentum", 0.3, 9, 8, True)
    monkeypatch.setenv("SHOWTELL_TRAIN__STEPS", "11")  # the environment over the file …
    monkeypatch.setenv("SHOWTELL_INPUT__DETERMINISTIC", "false")
    monkeypatch.setenv("SHOWTELL_EVALUATION__BEAM_SIZE", "2")  # the evaluator's, in a shared environment
    from_environment = _print(showtell_main, "--config", str(nested))
    assert (from_environment["steps"], from_environment["deterministic_input"]) == (11, False)
    assert _print(showtell_main, "--config", str(nested), "--set", "train.steps=12")["steps"] == 12  # … flags
    # An older named variable is a default: a file overrides it, as guide.md says.
    monkeypatch.setenv("SHOWTELL_STRATEGY", "mirrored")
    assert _print(showtell_main)["strategy"] == "mirrored"
    (tmp_path / "strategy.yaml").write_text("strategy: one_device\n")
    assert _print(showtell_main, "--config", str(tmp_path / "strategy.yaml"))["strategy"] == "one_device"



UNKNOWN = "unknown key 'optimizer.learnin_rate' (did you mean optimizer.learning_rate?)"


@pytest.mark.parametrize(("argv", "environment", "error"), [
    (["--set", "optimizer.learnin_rate=1"], {}, f"--set: {UNKNOWN}; the keys are listed in docs/cli.md"),
    (["--set", "optimizer.learning_rate"], {},
     "--set optimizer.learning_rate: expected KEY=VALUE, e.g. optimizer.learning_rate=0.1"),
    (["--optimizer.learning_rate", "-1"], {},
     "--optimizer.learning_rate: optimizer.learning_rate: must be > 0 (got -1)"),
    (["--set", "optimizer.name=rmsprop"], {},
     "--set: optimizer.name: 'rmsprop' is not one of sgd, momentum, adam"),
    ([], {"SHOWTELL_TRAIN__STEPS": "0"},
     "environment SHOWTELL_TRAIN__STEPS: train.steps: must be ≥ 1 (got 0)"),
    ([], {"SHOWTELL_OPTIMIZER__LERNING_RATE": "0.5"},  # a slip, refused as --set refuses it
     "environment SHOWTELL_OPTIMIZER__LERNING_RATE: names no setting of this command (did you mean "
     "SHOWTELL_OPTIMIZER__LEARNING_RATE?); the keys are listed in docs/cli.md (SHOWTELL_<SECTION>__<FIELD>)"),
    ([], {"SHOWTELL_OPTIMISER__LEARNING_RATE": "0.5"},  # a slip in the section
     "environment SHOWTELL_OPTIMISER__LEARNING_RATE: names no setting of this command (did you mean "
     "SHOWTELL_OPTIMIZER__LEARNING_RATE?); the keys are listed in docs/cli.md (SHOWTELL_<SECTION>__<FIELD>)"),
    ([], {"SHOWTELL_STRATEGY": "mirored"},  # an older named variable, checked as its key is
     "environment SHOWTELL_STRATEGY: distribution.strategy: 'mirored' is not one of auto, one_device, "
     "mirrored, parameter_server, multi_worker"),
    (["--config", "{file}"], {}, f"--config {{file}}: {UNKNOWN}; keys are the flags of showtell train "
                                 "without the dashes, or dotted keys in sections"),
])
def test_a_bad_dotted_key_is_one_line_naming_where_it_came_from(tmp_path: Path, showtell_main, monkeypatch,
                                                                 argv: list[str], environment: dict,
                                                                 error: str):
    file = tmp_path / "bad.yaml"
    file.write_text("optimizer:\n  learnin_rate: 0.3\n")
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    result = showtell_main("train", *[a.format(file=file) for a in argv], "--data", "d",
                           "--model-dir", str(tmp_path / "m"))
    assert result.returncode == 2
    assert result.stderr.strip() == f"showtell train: error: {error.format(file=file)} (see --help)"
    assert not (tmp_path / "m").exists()
