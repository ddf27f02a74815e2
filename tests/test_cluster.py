"""Cluster specs from TF_CONFIG and from seed-style flags: the same spec either way, evaluator
tasks dropped, and every malformed spec refused at start in one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from showtell.trainer.distribution.cluster import (
    Cluster,
    ClusterError,
    check_for_strategy,
    cluster_from_flags,
    from_tf_config,
)
from tests.helpers import TINY_MODEL, error_lines

HOSTS = {"chief": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222", "10.0.0.3:2222"], "ps": ["10.0.0.4:2222"]}


def tf_config(task_type: str, index: int, cluster: dict | None = None) -> str:
    return json.dumps({"cluster": cluster or HOSTS, "task": {"type": task_type, "index": index}})


def test_flags_and_tf_config_give_the_same_cluster():
    by_flags = cluster_from_flags("10.0.0.4:2222", "10.0.0.2:2222,10.0.0.3:2222", "10.0.0.1:2222",
                                  "worker", 1)
    by_env = from_tf_config(tf_config("worker", 1))
    assert by_flags.jobs == by_env.jobs == HOSTS
    assert (by_flags.task_type, by_flags.task_index) == (by_env.task_type, by_env.task_index) == ("worker", 1)
    assert by_flags.address == "10.0.0.3:2222" and not by_flags.is_chief
    assert from_tf_config(tf_config("chief", 0)).is_chief
    check_for_strategy(by_env, "parameter_server")


def test_evaluator_tasks_are_not_part_of_the_training_cluster():
    spec = {**HOSTS, "evaluator": ["10.0.0.9:2222"]}
    cluster = from_tf_config(tf_config("worker", 0, spec))
    assert "evaluator" not in cluster.jobs and cluster.jobs == HOSTS
    with pytest.raises(ClusterError, match="this task is the 'evaluator'; run `showtell evaluate`"):
        from_tf_config(tf_config("evaluator", 0, spec))


def test_no_cluster_at_all():
    assert cluster_from_flags(None, None, None, None, None) is None
    assert from_tf_config(None) is None and from_tf_config("") is None
    assert from_tf_config(json.dumps({"task": {"type": "worker", "index": 0}})) is None
    check_for_strategy(None, "one_device")


def test_without_a_chief_worker_zero_writes():
    cluster = Cluster({"worker": ["a:1", "b:2"]}, "worker", 0, "flags")
    assert cluster.is_chief and not Cluster({"worker": ["a:1", "b:2"]}, "worker", 1, "flags").is_chief
    check_for_strategy(cluster, "multi_worker")


@pytest.mark.parametrize(("make", "message"), [
    (lambda: cluster_from_flags("10.0.0.4:2222", "10.0.0.2:2222", "10.0.0.1:2222", "master", 0),
     "--job-name 'master': unknown job name (use chief, worker or ps)"),
    (lambda: cluster_from_flags("10.0.0.4:2222", "10.0.0.2:2222", "10.0.0.1:2222", "worker", 2),
     "--task-index 2 is out of range: the cluster has 1 worker task(s), indices 0…0"),
    (lambda: cluster_from_flags("10.0.0.4:2222", "10.0.0.2", "10.0.0.1:2222", "worker", 0),
     "--worker-hosts: '10.0.0.2' is not host:port"),
    (lambda: cluster_from_flags("10.0.0.4:99999", "10.0.0.2:2222", None, "worker", 0),
     "--ps-hosts: '10.0.0.4:99999' is not host:port"),
    (lambda: cluster_from_flags("10.0.0.4:2222", "10.0.0.2:2222", None, None, 0),
     "--job-name is required with cluster flags"),
    (lambda: from_tf_config(tf_config("worker", 0, {"worker": ["a:1"], "master": ["b:2"]})),
     "TF_CONFIG: unknown job 'master'"),
    (lambda: from_tf_config(tf_config("ps", 3)), "TF_CONFIG task.index 3 is out of range"),
    (lambda: from_tf_config("{not json"), "TF_CONFIG: not a JSON object"),
    (lambda: from_tf_config(tf_config("chief", 0, {"worker": ["a:1"]})),
     "TF_CONFIG task.type 'chief': the cluster has no chief hosts"),
    (lambda: check_for_strategy(cluster_from_flags("10.0.0.4:2222", "10.0.0.2:2222", None, "worker", 0),
                                "parameter_server"),
     "the cluster has no chief (--chief-host); it needs a chief (the coordinator)"),
    (lambda: check_for_strategy(None, "parameter_server"), "--strategy parameter_server needs a cluster"),
    (lambda: check_for_strategy(from_tf_config(tf_config("worker", 0)), "multi_worker"),
     "the cluster has ps tasks; use --strategy parameter_server"),
    (lambda: check_for_strategy(from_tf_config(tf_config("worker", 0)), "mirrored"),
     "--strategy mirrored runs on one host"),
])
def test_bad_specs_are_one_clear_line(make, message):
    with pytest.raises(ClusterError) as err:
        make()
    assert message in str(err.value) and "\n" not in str(err.value)


def test_cli_refuses_a_bad_cluster_before_training(tiny_data: Path, tmp_path: Path, showtell_main):
    started = time.monotonic()
    result = showtell_main("train", "--data", str(tiny_data), "--model-dir", str(tmp_path / "m"), *TINY_MODEL,
                           "--strategy", "parameter_server", "--ps-hosts", "127.0.0.1:1",
                           "--worker-hosts", "127.0.0.1:2", "--job-name", "worker", "--task-index", "5")
    lines = error_lines(result.stderr)
    assert result.returncode == 1 and lines == [
        "showtell train: error: --task-index 5 is out of range: the cluster has 1 worker task(s), indices 0…0"
    ]
    assert time.monotonic() - started < 60 and not (tmp_path / "m").exists()
