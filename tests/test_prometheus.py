"""Prometheus: a real Prometheus server (Debian's ``prometheus``, installed by the tests' one apt
path) scrapes a real trainer and evaluator started with ``--prometheus-port`` and answers PromQL
for "steps behind" and "evaluations total"; the pages hold no paths or host names; the compose
stack's scrape config and alert rules pass ``promtool``, and the alerts fire on the series they
are for (``promtool test rules``); a port in use is one line naming it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import tensorflow as tf
import yaml

from tests import system_packages
from tests.helpers import ROOT, TINY_MODEL, error_lines, start_evaluator, wait_for
from tests.measure import free_ports

PROMETHEUS = {"prometheus": "prometheus", "promtool": "prometheus"}


@pytest.fixture(scope="module")
def prometheus_tools() -> None:
    system_packages.require(system_packages.unavailable(PROMETHEUS))
    system_packages.ensure(PROMETHEUS)


def _page(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return answer.read().decode()


def _query(port: int, promql: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.loads(answer.read())
    except OSError:
        return []
    assert body["status"] == "success", body
    return body["data"]["result"]


@pytest.mark.e2e
def test_a_real_prometheus_scrapes_the_trainer_and_the_evaluator(prometheus_tools, tiny_data: Path,
                                                                  tmp_path: Path, procs):
    trainer_port, evaluator_port, server_port = free_ports(3)
    model_dir = tmp_path / "model"
    trainer_log = tmp_path / "train.log"
    trainer = procs.start("train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_MODEL,
                          "--steps", "100000", "--save-every-secs", "0", "--save-every-steps", "100",
                          "--log-every-steps", "50", "--prometheus-port", str(trainer_port), log=trainer_log)
    evaluator, _ = start_evaluator(procs, model_dir, tiny_data, tmp_path / "eval", tmp_path / "eval.log",
                                   "--max-eval-examples", "4", "--prometheus-port", str(evaluator_port))
    # the compose stack's scrape config (its jobs and labels), with this test's ports and a 1 s interval
    config = tmp_path / "prometheus.yml"
    scrape = yaml.safe_load((ROOT / "deploy" / "monitoring" / "prometheus.yml").read_text())
    ports = {"showtell-trainer": trainer_port, "showtell-evaluator": evaluator_port}
    assert {job["job_name"] for job in scrape["scrape_configs"]} == {*ports, "showtell-pretrain"}
    jobs = [job for job in scrape["scrape_configs"] if job["job_name"] in ports]  # no pretraining here
    for job in jobs:
        job["static_configs"][0]["targets"] = [f"127.0.0.1:{ports[job['job_name']]}"]
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                                      "scrape_configs": jobs}))
    server = procs.start_program("prometheus", f"--config.file={config}",
                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{server_port}",
                                 log=tmp_path / "prometheus.log")

    def answered(promql: str) -> list[dict]:
        assert server.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
        return _query(server_port, promql)

    ok = wait_for(lambda: answered('showtell_evaluator_evaluations_total{status="ok"} >= 2'), 240,
                  "Prometheus to see two evaluations")
    assert ok[0]["metric"]["job"] == "showtell-evaluator"
    # the frozen encoder's features: computed for the first checkpoint, read back for the next
    assert answered('showtell_evaluator_features_total{result="computed"} >= 4')
    assert answered('showtell_evaluator_features_total{result="reused"} >= 4')
    assert answered('showtell_evaluator_part_seconds_total{part="decoder"} > 0')
    # steps behind is the newest checkpoint's step less the newest evaluated, in one scrape
    identity = ("showtell_evaluator_steps_behind == showtell_evaluator_newest_checkpoint_step"
                " - showtell_evaluator_last_evaluated_step")
    assert wait_for(lambda: answered(identity), 30, "steps behind = newest − last evaluated")
    [step] = wait_for(lambda: answered("showtell_trainer_step > 0"), 60, "the trainer's step")
    assert float(step["value"][1]) > 0
    assert {r["metric"]["job"] for r in answered("up == 1")} == {"showtell-trainer", "showtell-evaluator"}
    assert wait_for(lambda: answered("rate(showtell_trainer_examples_total[30s]) > 0"), 60, "a training rate")
    assert answered('up{app_kubernetes_io_name="showtell", app_kubernetes_io_component="evaluator"} == 1')
    assert answered("showtell_trainer_last_save_duration_seconds > 0")
    assert answered("time() - showtell_evaluator_newest_checkpoint_timestamp_seconds < 600")
    assert answered("showtell_evaluator_evaluation_duration_seconds_count > 0")
    assert answered('showtell_build_info{component="evaluator", version!=""}')
    # the newest evaluation's metrics by set, each inside its interval
    for bound, op in (("lower", ">="), ("upper", "<=")):
        assert answered(f'showtell_evaluator_metric{{eval_set="val", metric="loss"}} {op} '
                        f'showtell_evaluator_metric_{bound}{{eval_set="val", metric="loss"}}')

    # What an operator's scraper is shown: numbers, run ids, versions — no paths or host names.
    for port in (trainer_port, evaluator_port):
        page = _page(port)
        assert str(tmp_path) not in page and os.uname().nodename not in page, page
    evaluator_page = _page(evaluator_port)
    for name in ("showtell_evaluator_run_info{run_id=", "showtell_evaluator_checkpoints_pending ",
                 "showtell_evaluator_images_total ", "showtell_evaluator_watch_streams 0.0"):
        assert name in evaluator_page, name
    # bounded labels: one series per metric name but the info metrics' changing run_id
    assert "showtell_evaluator_last_evaluated_step{" not in evaluator_page
    assert "showtell_trainer_run_info{run_id=" in _page(trainer_port)

    # Every query of the Grafana dashboard, as Grafana sends it, answered by this Prometheus; all
    # but the ones that need a failure or a second run have series.
    grafana = ROOT / "deploy" / "monitoring" / "grafana"
    dashboard = json.loads((grafana / "dashboards" / "showtell.json").read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(queries) >= 12
    wait_for(lambda: answered("showtell_evaluator_images_total > 0"), 120, "an evaluated image counted")
    # Grafana's variables as it fills them: the rate window, one metric, one evaluation set
    empty = [q for q in queries if not answered(q.replace("$__rate_interval", "1m").replace(
        "$metric", "exact_match").replace("$eval_set", "val"))]
    assert empty == [], empty  # each has series here: the evaluations' statuses are labelled from the start

    # The trainer stops (a final checkpoint at a step read from its model dir); once the evaluator
    # has evaluated it, it is 0 steps behind that step — a known value, not just "≥ 0".
    os.kill(trainer.pid, signal.SIGTERM)
    assert trainer.wait(timeout=120) == 143
    final = int(tf.train.latest_checkpoint(str(model_dir)).rsplit("-", 1)[1])
    wait_for(lambda: answered(f"showtell_evaluator_last_evaluated_step == {final}"), 180,
             f"the evaluator to evaluate the final checkpoint (step {final})")
    [behind] = answered("showtell_evaluator_steps_behind")
    [newest] = answered("showtell_evaluator_newest_checkpoint_step")
    assert (float(behind["value"][1]), float(newest["value"][1])) == (0, final)
    for proc in (evaluator, server):
        os.kill(proc.pid, signal.SIGTERM)
    assert evaluator.wait(timeout=120) == 0
    server.wait(timeout=60)


def test_a_port_in_use_is_one_line(tiny_data: Path, tmp_path: Path, showtell_main):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = showtell_main("train", "--data", str(tiny_data), "--model-dir", str(tmp_path / "m"),
                               *TINY_MODEL, "--steps", "1", "--prometheus-port", str(port))
    assert result.returncode == 1
    assert error_lines(result.stderr) == [
        f"showtell train: error: --prometheus-host 127.0.0.1 --prometheus-port {port}: cannot listen there "
        "(Address already in use); pick another --prometheus-port (0: any free one)"]


def test_the_compose_scrape_config_and_alerts_pass_promtool(prometheus_tools):
    monitoring = ROOT / "deploy" / "monitoring"
    for check in (["check", "config", str(monitoring / "prometheus.yml")],
                  ["check", "rules", str(monitoring / "alerts.yml")]):
        result = subprocess.run(["promtool", *check], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
    tested = subprocess.run(["promtool", "test", "rules", "alerts_test.yml"],
                            cwd=ROOT / "tests" / "prometheus", capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_every_alert_says_what_it_means_and_links_its_runbook_section():
    """Each alert's description, and its runbook_url an anchor of docs/operations.md that exists
    (GitHub's slugs of its headings) — the same in the PrometheusRule."""
    import re

    import yaml

    headings = re.findall(r"^#+ (.+)$", (ROOT / "docs" / "operations.md").read_text(), re.M)
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}
    rules = yaml.safe_load((ROOT / "deploy" / "monitoring" / "alerts.yml").read_text())["groups"][0]["rules"]
    for rule in rules:
        annotations = rule["annotations"]
        assert len(annotations["description"]) > 40, rule["alert"]
        path, _, anchor = annotations["runbook_url"].partition("#")
        assert path == "docs/operations.md" and anchor == rule["alert"].lower() and anchor in anchors, rule


def test_the_dashboard_shows_each_sets_metric_in_its_band_and_the_run_as_a_table():
    """The model-quality panel repeats per evaluation set: the metric, and its interval as a band
    (the lower bound, the width stacked on it); the current run is a table of instant queries, not
    a time series of an info metric's constant 1.  The Grafana sidecar's ConfigMap (the
    prometheus-operator component) ships this same file."""
    import json

    dashboard = json.loads((ROOT / "deploy" / "monitoring" / "grafana" / "dashboards" / "showtell.json")
                           .read_text())
    panels = {p["title"]: p for p in dashboard["panels"]}
    quality = panels["Model quality: $metric on $eval_set"]
    assert quality["repeat"] == "eval_set"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["eval_set"]["multi"] and variables["eval_set"]["includeAll"]
    legends = {t["legendFormat"]: t["expr"] for t in quality["targets"]}
    assert legends["lower"].startswith("showtell_evaluator_metric_lower{")
    assert legends["interval"].startswith("showtell_evaluator_metric_upper{") and " - " in legends["interval"]
    stacked = {o["matcher"]["options"] for o in quality["fieldConfig"]["overrides"]
               for prop in o["properties"] if prop["id"] == "custom.stacking"}
    assert stacked == {"lower", "interval"}
    run = panels["Current run"]
    assert run["type"] == "table" and all(t["instant"] and t["format"] == "table" for t in run["targets"])
    sidecar = ROOT / "deploy" / "k8s" / "components" / "prometheus-operator" / "showtell-dashboard.json"
    assert json.loads(sidecar.read_text()) == dashboard, "copy the dashboard into the component"


def test_the_evaluator_says_when_the_trainer_finished_and_what_the_tracker_lacks(tmp_path: Path):
    """``showtell_evaluator_trainer_finished`` follows the status the controller keeps from the
    model dir's finished marker: 0 while training, 1 once the final checkpoint is marked (what
    ShowtellDown asks before calling a trainer's target down)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from showtell.evaluator.loop.status import Status
    from showtell.evaluator.records.store import Store
    from showtell.evaluator.serving.prometheus import EvaluatorFigures

    status = Status()
    store = Store(tmp_path / "evaluations.sqlite")
    registry = CollectorRegistry()
    EvaluatorFigures(registry=registry, status=lambda: status, store=store, streams=lambda: 0)
    assert "showtell_evaluator_trainer_finished 0.0" in generate_latest(registry).decode()
    status = Status(trained_step=1200)
    page = generate_latest(registry).decode()
    assert "showtell_evaluator_trainer_finished 1.0" in page
    assert "tracking_backlog" not in page  # no --tracking-uri: no such series
    backlog = [3]  # --tracking-uri: the records the tracker has not acknowledged, read at scrape time
    tracked = CollectorRegistry()
    EvaluatorFigures(registry=tracked, status=lambda: status, store=store, streams=lambda: 0,
                     tracking_backlog=lambda: backlog[0])
    assert "showtell_evaluator_tracking_backlog 3.0" in generate_latest(tracked).decode()
    backlog[0] = 0
    assert "showtell_evaluator_tracking_backlog 0.0" in generate_latest(tracked).decode()
    store.close()
