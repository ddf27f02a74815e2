"""Raw results kept: each ``bench/results/<bench>.json`` names a commit that exists and whose
bench takes the flags it ran with, and the BENCHMARKS.md figures drawn from it are the file's
own numbers — read here from the file, never retyped."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import ROOT

RESULTS = sorted((ROOT / "bench" / "results").glob("*.json"))


def _git(*words: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *words], cwd=ROOT, capture_output=True, text=True, check=False)


def _bench_source(commit: str, bench: str) -> str:
    """The bench's source at ``commit``, with ``rounds.add_out``'s ``"--out"`` if the bench calls it."""
    if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0:
        shown = _git("show", f"{commit}:bench/{bench}.py")
        assert shown.returncode == 0, shown.stderr
        source = shown.stdout
    else:  # only a shallow clone may lack it; a full one must have it
        assert _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true", \
            f"{commit}: no such commit in this repository"
        source = (ROOT / "bench" / f"{bench}.py").read_text()
    return source + ('"--out"' if re.search(r"\badd_out\(", source) else "")


def _range(figure: dict, digits: int = 3) -> str:
    """A ratio as BENCHMARKS.md writes it: median (min–max), and "; 1.0 inside" when 1.0 lies in
    the spread (then the run cannot tell the two apart, and the row must say so)."""
    text = f"{figure['median']:.{digits}f} ({figure['min']:.{digits}f}–{figure['max']:.{digits}f}"
    return text + ("; 1.0 inside" if figure.get("one_inside_spread") else ")")


def _closed(figure: dict, digits: int = 3) -> str:
    """``_range`` with its bracket closed: "0.91 (0.80–1.02; 1.0 inside)"."""
    return _range(figure, digits) + (")" if figure.get("one_inside_spread") else "")


def _rates(figures: dict, first: str, second: str, digits: int = 1) -> str:
    """Two paths' median rates: "A vs B"."""
    return f"{figures[first]['median']:.{digits}f} vs {figures[second]['median']:.{digits}f}"


def _paired(figure: dict) -> str:
    """``rounds.paired``'s figure: "1.002 (0.962–1.037; 1.0 inside), 21/40"."""
    inside = "; 1.0 inside" if figure["one_inside"] else ""
    return (f"{figure['median']:.3f} ({figure['low']:.3f}–{figure['high']:.3f}{inside}), "
            f"{figure['above_one']}/{figure['rounds']}")


def _step_call_rows() -> list[tuple[str, Callable[[dict], str]]]:
    """``bench/step_call.py``'s rows, each a ``rounds.paired`` figure of its report."""
    rows = {"showtell's traced loop, its step a function it calls": "showtell_over_keras_fit",
            "Keras fit's function again (A/A)": "keras_fit_again_over_keras_fit",
            "showtell's loop ÷ the step inlined": "showtell_over_showtell_step_inlined"}
    return [(label, lambda r, key=key: _paired(r[key])) for label, key in rows.items()]


def _times(figure: dict) -> str:
    """A large ratio as "**16.1×** (15.7–16.1)"."""
    return f"**{figure['median']:.1f}×** ({figure['min']:.1f}–{figure['max']:.1f})"


def _clock(seconds: float) -> str:
    """Seconds as minutes:seconds, "2:47"."""
    whole = round(seconds)
    return f"{whole // 60}:{whole % 60:02d}"


def _tally(counts: dict[str, int]) -> str:
    """A soak's counts by kind, in a fixed order: "evaluator SIGKILL at a random moment 15; …"."""
    return "; ".join(f"{kind} {n}" for kind, n in sorted(counts.items()))


def _landings(kills_by: dict[str, int]) -> dict[str, int]:
    """A soak's kills by victim and where they landed, SIGKILL and SIGTERM together (the results
    file has them apart): "evaluator during an evaluation 24"."""
    out: dict[str, int] = {}
    for kind, n in kills_by.items():
        victim, _signal, landing = kind.split(" ", 2)
        out[f"{victim} {landing}"] = out.get(f"{victim} {landing}", 0) + n
    return out


def _soak(r: dict) -> tuple[str, ...]:
    """A chaos soak's row: its kills by victim and landing, resumes, recovery, checkpoints, violations."""
    trainer = "trainer" if r["cluster"] == "single" else "chief"
    return (f"{r['kills']} kills: {_tally(_landings(r['kills_by']))}; "
            f"aimed kills missed: {r['aimed_kills_missed']}",
            f"{r['trainer_resumes_checked']} {trainer} resumes checked at the newest named checkpoint "
            f"({r['trainer_killed_before_restoring']} killed again before restoring)",
            f"the evaluator back to SERVING within {r['worst_evaluator_recovery_s']} s at worst",
            f"{r['checkpoints_named']} named: {r['evaluated']} evaluated; recorded skipped: "
            f"{_tally(r['skipped'])}; {r['unseen_while_down']} deleted while the evaluator was down",
            f"| **{len(r['violations'])}** |",
            *([f"each lost ps named by the chief in one line, {r['ps_losses_named_by_the_chief']} times, or "
               f"waited for by a chief still starting, {r['ps_lost_while_the_chief_started']}"]
              if r["cluster"] == "ps" else []),
            *([_tracked(r["tracking"])] if "tracking" in r else []))


def _tracked(t: dict) -> str:
    """A tracking soak's end: the history against MLflow."""
    return (f"MLflow at the end: {t['records']} evaluations, **{t['points_missing']} points lost, "
            f"{t['points_twice']} twice**, {t['runs_twice']} runs twice; "
            f"backlog sent in {t['flushed_in_s']} s")


STREAM_PHASES = ("idle", "streams_open", "after_close")  # watch_fanout's process figures, in order

def _demos(r: dict, cell: Callable[[dict], str]) -> str:
    """One row of the demo table: each demo's cell, in order, as the table separates them."""
    return " | ".join(cell(d) for d in r["demos"])


def _scored(e: dict, extra: bool = True) -> str:
    """An exact match with its interval (and, with ``extra``, BLEU-4 and CIDEr)."""
    low, high = e["exact_match_interval"]
    text = f"{e['exact_match']:.2f} ({low:.2f}–{high:.2f})"
    return text + (f", BLEU-4 {e['bleu4']:.2f}, CIDEr {e['cider']:.2f}" if extra else "")


# results file (its bench, or bench.variant) → (the BENCHMARKS.md row it feeds, what the row must
# hold — a text, or texts — made from the file's report)
FIGURES: dict[str, list[tuple[str, Callable[[dict], str | tuple[str, ...]]]]] = {
    "eval_throughput.5000": [
        ("5,000 images: evaluator ÷ plain forward pass, images per CPU second",
         lambda r: f"**{_closed(r['ratio_evaluator_over_forward_cpu'])}**; "
                   f"{_rates(r, 'evaluator_images_per_cpu_sec', 'forward_images_per_cpu_sec', 2)} "
                   "images per CPU second"),
        ("5,000 images: per wall-clock second",
         lambda r: f"{_closed(r['ratio_evaluator_over_forward_wall'])}; "
                   f"{_rates(r, 'evaluator_images_per_sec', 'forward_images_per_sec', 2)} images/s, "
                   f"{r['minutes_per_5000_images']:.1f} min a pass"),
        ("5,000 images: METEOR's warm JVM and the tokenizer, per evaluation",
         lambda r: f"{r['meteor_cpu_sec_per_evaluation']['median']:.2f} CPU-s "
                   f"({r['meteor_share_of_an_evaluation'] * 100:.2f} %) and "
                   f"{r['tokenizer_cpu_sec_per_evaluation']['median']:.2f} CPU-s"),
    ],
    "steps_per_loop": [
        ("showtell, 10 a call ÷ Keras fit, 10 a call, fresh processes",
         lambda r: f"**{_closed(r['phase1']['showtell_10_over_keras_fit_10'])}** | "
                   f"**{_closed(r['phase2']['showtell_10_over_keras_fit_10'])}**"),
        ("showtell, 10 steps a call ÷ 1, fresh processes",
         lambda r: f"{_closed(r['phase1']['showtell_10_over_showtell_1'])} | "
                   f"{_closed(r['phase2']['showtell_10_over_showtell_1'])}"),
    ],
    "steps_per_loop.small": [
        ("32/32 model, 2,000 steps: showtell 10 ÷ Keras fit 10",
         lambda r: f"**{_closed(r['phase1']['showtell_10_over_keras_fit_10'])}**"),
        ("32/32 model, 2,000 steps: showtell 10 a call ÷ 1",
         lambda r: f"**{_closed(r['phase1']['showtell_10_over_showtell_1'])}**"),
    ],
    "steps_per_loop.control": [
        ("Keras fit ÷ Keras fit, fresh processes (A/A",
         lambda r: (_closed(r["phase1"]["control_10_over_keras_fit_10"]),
                    f"showtell ÷ fit in it: {_closed(r['phase1']['showtell_10_over_keras_fit_10'])}")),
    ],
    "step_call": _step_call_rows(),
    "step_call.small": _step_call_rows(),  # the same rows' second column
    "grpc_throughput": [
        ("gRPC `GetLatest` ÷ `Health/Check` requests/s",
         lambda r: f"{_closed(r['ratio_latest_over_health_throughput'])}; "
                   f"{r['latest']['requests_per_sec']['median']:.0f} vs "
                   f"{r['health']['requests_per_sec']['median']:.0f} requests/s, "
                   f"p99 {r['latest']['p99_ms']:.1f} / {r['health']['p99_ms']:.1f} ms"),
    ],
    "watch_fanout": [
        ("Watch streams on 100 connections",
         lambda r: (f"health p99 **{r['health']['p99_ms']:.2f} ms**, "
                    f"GetLatest p99 {r['get_latest']['p99_ms']:.2f} ms; "
                    f"a new evaluation reaches the last stream in **{r['fanout']['last_s']:.3f} s** "
                    f"(first {r['fanout']['first_s']:.3f}, median {r['fanout']['median_s']:.3f})",
                    "threads " + " → ".join(str(r[k]["threads"]) for k in STREAM_PHASES),
                    "fds " + " → ".join(str(r[k]["fds"]) for k in STREAM_PHASES))),
    ],
    "input_pipeline": [
        ("input pipeline ÷ the same batches in memory",
         lambda r: (_range(r["ratio_pipeline_over_in_memory"]),
                    _rates(r["examples_per_sec"], "pipeline", "in_memory") + " examples/s")),
    ],
    "feature_reuse": [
        ("5,000 images, the encoder's features reused: evaluator ÷ plain forward pass, images/s",
         lambda r: (f"**{r['ratio_over_forward']['reused']:.2f}×**",
                    f"{r['images_per_sec']['reused']:.1f} vs {r['images_per_sec']['forward']:.1f} images/s",
                    f"{r['seconds']['reused'] / 60:.1f} min a pass")),
        ("the same checkpoint's evaluation without kept features ÷ with",
         lambda r: (f"{r['seconds']['today_b'] / r['seconds']['reused']:.2f}×",
                    "the same path at the run's start: "
                    f"{r['seconds']['today'] / r['seconds']['reused']:.2f}×")),
        ("each part's share of the reused evaluation",
         lambda r: ", ".join(f"{k} {v * 100:.1f} %" for k, v in r["reused_parts_share"].items())),
        ("the first evaluation of a new encoder ÷ one that keeps nothing",
         lambda r: f"**{r['first_over_today']:.3f}**"),
        ("a new encoder at every checkpoint (phase 2): evaluator ÷ plain forward pass",
         lambda r: (f"**{r['ratio_over_forward']['phase2']:.3f}**",
                    f"{r['ratio_over_forward']['today']:.3f} keeping nothing at the start, "
                    f"{r['ratio_over_forward']['today_b']:.3f} at the end",
                    f"≈ {round(r['images_per_sec']['today'] * 60)} images a minute")),
        ("the encoder's digest, at every checkpoint",
         lambda r: f"{r['digest_seconds']:.3f} s: {r['digest_share_of_phase2'] * 100:.2f} %"),
        ("features reused ÷ from images, largest difference",
         lambda r: (f"| {r['reused_equals_images']['max_metric_difference']!r} in every metric, "
                    f"{r['reused_equals_images']['max_interval_difference']!r} in every interval; "
                    + ("the same captions |" if r["reused_equals_images"]["same_captions"] else
                       "other captions |"))),
        ("kept features, per image and encoder",
         lambda r: f"{r['kept_bytes_per_image_and_encoder']:,} bytes"),
        ("val2014's 40,504 images a checkpoint, projected",
         lambda r: (f"**{r['projected_val2014']['reused_minutes']:.1f} min**",
                    f"{r['projected_val2014']['first_minutes']:.1f} min")),
    ],
    "feature_cache": [
        ("training on the phase-1 feature cache ÷ on images",
         lambda r: (_times(r["train_ratio_cache_over_images"]),
                    _rates(r, "train_examples_per_sec_cache", "train_examples_per_sec_images")
                    + " examples/s")),
        ("a whole cache build (steady) ÷ a plain encoder forward pass",
         lambda r: (f"**{_range(r['build_ratio_steady_over_forward'])}",
                    _rates(r, "cache_build_images_per_sec_steady", "plain_forward_images_per_sec", 2)
                    + " images/s")),
    ],
    "strategies": [
        ("`mirrored`, 1 replica ÷ `one_device`",
         lambda r: (f"**{_range(r['strategies']['mirrored_1_over_one_device'])}",
                    _rates(r["strategies"]["examples_per_sec"], "mirrored_1", "one_device") + " examples/s")),
        ("`mirrored` over 2 logical CPUs ÷ 1 replica",
         lambda r: _range(r["strategies"]["mirrored_2_logical_over_mirrored_1"])),
        *[(f"{flag} ÷ float32",
           lambda r, lever=lever: (_range(r["levers"]["over_float32"][lever]),
                                   _rates(r["levers"]["examples_per_sec"], lever, "float32") + " examples/s"))
          for flag, lever in (("`--mixed-precision bf16`", "bf16"), ("`--jit-compile` (XLA)", "xla"))],
    ],
    "ps_cluster": [
        ("parameter-server cluster, 2 workers ÷ 1",
         lambda r: (_range(r["ratio_2_over_1"]),
                    _rates(r["steps_per_sec"], "2_workers", "1_worker", 3) + " steps/s")),
    ],
    "demo": [
        ("(the install timed apart:", lambda r: f"(the install timed apart: {r['install_s']} s)"),
        ("| first `[evaluation]` line |", lambda r: _demos(r, lambda d: _clock(d["first_evaluation_s"]))),
        ("| longest quiet on the console |", lambda r: _demos(r, lambda d: f"{d['longest_quiet_s']} s")),
        ("| evaluations |", lambda r: _demos(r, lambda d: str(d["evaluations"]))),
        ("| pretraining steps (this demo's / in all) |",
         lambda r: _demos(r, lambda d: f"{d['pretraining']['steps']} / {d['pretraining']['steps_in_all']}")),
        ("| exact match at the end on val |", lambda r: _demos(r, lambda d: _scored(d["final"]["val"]))),
        ("| the same checkpoint on the unseen set |",
         lambda r: _demos(r, lambda d: _scored(d["final"]["unseen"]))),
        ("| the final model on 900 scenes of seed 424242 |",
         lambda r: _demos(r, lambda d: _scored(d["held_out_seed"], extra=False))),
        ("| the phase-1 trainers' final checkpoint → exit |",
         lambda r: _demos(r, lambda d: ", ".join(f"{s} s"
                                                 for s in d["trainer_exit_after_final_checkpoint_s"]))),
        ("| in all |", lambda r: _demos(r, lambda d: _clock(d["in_all_s"]))),
    ],
    "demo_overhead": [
        ("the demo's phase-1 trainer beside the demo's evaluator ÷ alone",
         lambda r: (f"**{_range(r['ratio_beside_over_alone'])}",
                    _rates(r["trainer_examples_per_sec"], "beside", "alone") + " examples/s",
                    f"the evaluator used {r['evaluator']['cpu_seconds_incl_children']:.1f} CPU-s for "
                    f"{r['evaluator']['evaluations']} evaluations")),
    ],
    "image_build": [
        ("both images built from nothing (base cached)",
         lambda r: f"**{r['trainer_build_s']:.1f} + {r['evaluator_build_s']:.1f} s** (trainer, then the "
                   f"evaluator on its dependency stage), after the wheelhouse's {r['wheelhouse_s']:.1f} s"),
        ("image sizes (CPU)",
         lambda r: f"**trainer {r['trainer_image_mb']} MB, evaluator {r['evaluator_image_mb']} MB**"),
    ],
    "compose_up": [
        ("`docker compose up` (every default",
         lambda r: (f"**{_clock(r['up_to_first_evaluation_s'])}** (goal ≤ 3 min",
                    f"the longest quiet in the stack's logs meanwhile {r['longest_quiet_s']:.1f} s")),
        ("the final encoder's run: started / first evaluated",
         lambda r: f"{_clock(r['up_to_final_encoder_run_s'])} / {_clock(r['up_to_its_first_evaluation_s'])} "
                   f"(exact match {r['its_exact_match']} at its step {r['its_step']}, after "
                   "{} pretraining steps in {} s; ".format(*r["pretraining_steps_and_s"])
                   + ("the trainer container never restarted" if r["restarts"] == 0 else
                      f"the trainer container restarted {r['restarts']} times")),
    ],
    "chaos": [("single trainer, 2026-11-27", _soak)],
    "chaos.tracking": [("with MLflow, 2026-12-06", _soak)],
    "tracking_outage": [
        ("checkpoint to record, the tracker down ÷ up",
         lambda r: (f"**{r['down_over_up']:.3f}**",
                    "{:.3f} s vs {:.3f} s".format(r["checkpoint_to_record_s"]["down"]["median"],
                                                   r["checkpoint_to_record_s"]["up"]["median"]),
                    f"{r['records_down']} and {r['records_up']} records")),
        ("the backlog of a", lambda r: (f"{r['down_s'] / 60:.0f}-minute outage",
                                        f"**{r['flush_s_after_return']:.1f} s**",
                                        f"{r['backlog_at_return']} evaluations")),
        ("every evaluation of the run in MLflow",
         lambda r: f"{r['points_missing']} points missing, {r['points_twice']} twice "
                   f"({r['records']} evaluations)"),
    ],
    "split_eval": [
        ("500 images, 2 parts ÷ 1 evaluator on a core, checkpoint to record",
         lambda r: (f"**{_closed(r['wall_ratio_one_over_split'])}**",
                    f"{r['seconds']['split']['median']:.1f} s vs {r['seconds']['one']['median']:.1f} s")),
        ("2 parts ÷ 1 evaluator free on both cores",
         lambda r: (f"**{_closed(r['wall_ratio_free_over_split'])}**",
                    f"{r['seconds']['split']['median']:.1f} s vs {r['seconds']['free']['median']:.1f} s")),
        ("their CPU, 2 parts ÷ 1 on a core",
         lambda r: (f"**{_closed(r['cpu_ratio_split_over_one'])}**",
                    f"2 parts ÷ 1 free: {_closed(r['cpu_ratio_split_over_free'])}")),
        ("the merge's own cost",
         lambda r: f"{r['merge_seconds']['median']:.3f} s: {r['merge_share_of_one_evaluation'] * 100:.3f} %"),
        ("projected (evaluate ÷ N + scoring",
         lambda r: ", ".join(f"{n} parts {r['projected'][f'{n}_parts_wall_ratio']:.2f}×" for n in (2, 4, 8))),
    ],
    "coco_prep": [
        ("`showtell data coco` ÷ read + decode of the same JPEGs",
         lambda r: f"**{_range(r['ratio_prep_over_read_decode'])}**; "
                   + _rates(r["images_per_sec"], "coco_prep", "read_decode", 0) + " img/s"),
        ("shards written ÷ JPEG bytes",
         lambda r: f"**{r['ratio_shard_bytes_over_jpeg_bytes']:.3f}** "
                   f"({r['shards_mb']:.1f} MB ÷ {r['jpeg_mb']:.1f} MB"),
    ],
}

# Rows of BENCHMARKS.md no bench's results file feeds: each with what produces it instead, or why
# its bench's file is not kept yet (measured before benches kept their output; BENCHMARKS.md says
# which).  A new row must be added to FIGURES or here (tested below).
NOT_FROM_A_BENCH = {
    "`bash .ci/run` on a fresh clone": "`make test` prints it",
    "`make check` (lint + the quick in-process tests": "`make check` prints it",
    "an idle evaluator, its METEOR JVM included": "a test, run with -s",
    "rebuild after a one-line `.py` edit": "the Docker test's `docker figures` line",
    "COCO's PTB tokenizer − the regex stand-in": "two `showtell evaluate --once`",
}
NOT_KEPT_YET: dict[str, str] = {}  # every bench's row has its results file now


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.stem)
def test_a_results_file_names_a_commit_whose_bench_takes_its_flags(path: Path):
    saved = json.loads(path.read_text())
    assert {"bench", "commit", "tree_changed", "date", "argv", "machine", "report"} <= set(saved)
    assert saved["bench"] == path.stem.split(".")[0]  # chaos.ps.json: bench/chaos.py, its PS soak
    changed = saved["tree_changed"]
    assert changed == [], f"run the bench on a committed tree (changed: {changed})"
    assert re.fullmatch(r"[0-9a-f]{40}", saved["commit"]), saved["commit"]
    source = _bench_source(saved["commit"], saved["bench"])
    for flag in (a.split("=", 1)[0] for a in saved["argv"] if a.startswith("--")):
        assert f'"{flag}"' in source, f"{flag}: not a flag of bench/{saved['bench']}.py at {saved['commit']}"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", saved["date"])


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_benchmarks_figures_are_the_results_files_own(name: str):
    path = ROOT / "bench" / "results" / f"{name}.json"
    saved = json.loads(path.read_text())
    report, commit, bench = saved["report"], saved["commit"][:7], saved["bench"]
    lines = (ROOT / "BENCHMARKS.md").read_text().splitlines()
    for label, figure in FIGURES[name]:
        rows = [line for line in lines if label in line]
        assert len(rows) == 1, f"BENCHMARKS.md: {len(rows)} rows hold {label!r}"
        expected = figure(report)
        for piece in expected if isinstance(expected, tuple) else (expected,):
            assert piece in rows[0], f"{label!r}: {piece!r} is not in {rows[0]!r}"
    for label, _ in FIGURES[name]:
        assert commit in _row_commits(lines, label), \
            f"{label!r}: its row (or the caption of its table, or the row its 'same run' follows) does " \
            f"not name {commit}, the commit of bench/results/{name}.json"
    text = "\n".join(lines)
    command = " ".join([f"bench/{bench}.py", *saved["argv"]])
    assert command in " ".join(text.replace("`", " ` ").split()), \
        f"BENCHMARKS.md does not give the command the file ran: {command!r}"
    assert f"bench/results/{name}.json" in text and commit in text and saved["date"][:10] in text, \
        f"BENCHMARKS.md names not all of the results file, its commit {commit} and date {saved['date'][:10]}"


def _row_commits(lines: list[str], label: str) -> str:
    """The text that says which commit the row of ``label`` ran at: the row itself; or, for a
    row that says "same run", the nearest row above it in its table that does not; or the caption
    of its table (the paragraph just above it) — never a commit elsewhere in the file."""
    [i] = [k for k, line in enumerate(lines) if label in line]
    first = i
    while first > 0 and lines[first - 1].startswith("|"):
        first -= 1
    row = i
    while "same run" in lines[row] and row > first:
        row -= 1
    end = first - 1
    while end >= 0 and not lines[end].strip():
        end -= 1
    start = end
    while start > 0 and lines[start - 1].strip() and not lines[start - 1].startswith("#"):
        start -= 1
    caption = "" if "same run" in lines[i] else "\n".join(lines[start:end + 1])
    return lines[row] + "\n" + caption


def _table_rows(text: str) -> list[str]:
    """Every table row but headers and separators."""
    lines = text.splitlines()
    return [line for i, line in enumerate(lines) if line.startswith("|") and not line.startswith("|---")
            and not (i + 1 < len(lines) and lines[i + 1].startswith("|---"))]


def _unaccounted(text: str) -> tuple[list[str], list[str]]:
    """Rows no label accounts for, and labels no line holds (a figure in prose has a label too)."""
    labels = [label for rows in FIGURES.values() for label, _ in rows] + [*NOT_FROM_A_BENCH, *NOT_KEPT_YET]
    rows = _table_rows(text)
    return ([row[:80] for row in rows if not any(label in row for label in labels)],
            [label for label in labels if not any(label in line for line in text.splitlines())])


def test_every_benchmarks_row_is_a_results_files_or_says_where_it_comes_from():
    """Each figure row of BENCHMARKS.md is fed by a results file (FIGURES), or named with what else
    produces it, or with why its file is not kept yet; no entry outlives its row.  Planted: a new
    row, and a row removed, are both found."""
    text = (ROOT / "BENCHMARKS.md").read_text()
    assert _unaccounted(text) == ([], [])
    header = "| figure | value | command, date |\n|---|---|---|\n"
    planted = text.replace(header, header + "| a new figure | 1.5× | x |\n", 1)
    assert _unaccounted(planted)[0] == ["| a new figure | 1.5× | x |"]
    removed = "\n".join(line for line in text.splitlines() if "image sizes (CPU)" not in line)
    assert _unaccounted(removed)[1] == ["image sizes (CPU)"]


def test_a_paired_interval_holds_the_median_as_often_as_it_says():
    """``rounds.paired``'s interval, drawn on samples whose median is known (1.0): it holds it in
    95–97 % of 4,000 draws of 30 rounds (the sign test's exact 95.7 %) and one rank narrower would
    not; 6 rounds give min–max; 5 are refused."""
    import random
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from rounds import paired

    draw = random.Random(7)
    held = narrower = 0
    for _ in range(4000):
        ratios = [draw.lognormvariate(0.0, 0.1) for _ in range(30)]
        figure = paired(ratios, [1.0] * 30)
        held += figure["one_inside"]
        ranked = sorted(ratios)
        shown = [round(r, 3) for r in ranked]  # as the figure rounds them
        low, high = shown.index(figure["low"]), len(shown) - 1 - shown[::-1].index(figure["high"])
        narrower += ranked[low + 1] <= 1.0 <= ranked[high - 1]
    assert 0.95 <= held / 4000 <= 0.97 and narrower / 4000 < 0.95
    six = paired([1.1, 0.9, 1.0, 1.2, 0.8, 1.05], [1.0] * 6)
    assert (six["low"], six["high"], six["above_one"]) == (0.8, 1.2, 3)
    with pytest.raises(SystemExit, match="5 rounds: too few"):
        paired([1.0] * 5, [1.0] * 5)
