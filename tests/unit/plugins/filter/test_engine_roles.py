"""filter_plugins/engine_roles.py: the engine roles' typed list filters."""

from __future__ import annotations

import pytest
from ansible_collections.vllm_fleet.serving.plugins.filter.engine_roles import (
    kernel_pin_conflicts,
    replica_commands,
    replica_files,
)

KERNELS = ["flashinfer-cubin==0.7.0.post1", "flashinfer-jit-cache==0.7.0.post1+cu130"]


def test_kernel_pin_conflicts_names_each_contradicting_constraint() -> None:
    constraints = ["torch==2.9.0", "FlashInfer_Cubin==0.6.0",
                   "flashinfer.jit-cache[x]==0.7.0.post1+cu130"]
    assert kernel_pin_conflicts(constraints, KERNELS) == [
        "FlashInfer_Cubin==0.6.0 vs flashinfer-cubin==0.7.0.post1"]


def test_kernel_pin_conflicts_none() -> None:
    assert kernel_pin_conflicts([], KERNELS) == []
    assert kernel_pin_conflicts(KERNELS, KERNELS) == []
    assert kernel_pin_conflicts(["torch==2.9.0"], []) == []


REPLICAS = [{"name": "vllm-0", "port": 8000,
             "plan": {"argv": ["vllm", "serve", "/models/q", "--port", "8000"]}},
            {"name": "vllm-1", "port": 8001,
             "plan": {"argv": ["vllm", "serve", "/models/q", "--port", 8001]}}]


def test_replica_commands_replace_vllm_serve_with_the_entrypoint() -> None:
    assert replica_commands(REPLICAS, ["/srv/vllm/venv/bin/vllm", "serve"]) == [
        {"name": "vllm-0", "command": ["/srv/vllm/venv/bin/vllm", "serve", "/models/q",
                                       "--port", "8000"]},
        {"name": "vllm-1", "command": ["/srv/vllm/venv/bin/vllm", "serve", "/models/q",
                                       "--port", 8001]}]
    assert replica_commands([], ["x"]) == []


def test_replica_commands_refuse_a_replica_without_a_plan() -> None:
    with pytest.raises(ValueError, match="no name or no plan argv"):
        replica_commands([{"name": "vllm-0"}], ["x"])


def test_replica_files_three_per_replica_in_order() -> None:
    files = replica_files(REPLICAS[:1], "/etc/vllm", "/srv/vllm")
    assert files == [
        {"replica": "vllm-0", "template": "vllm.env.j2", "path": "/etc/vllm/vllm-0.env"},
        {"replica": "vllm-0", "template": "launch.sh.j2", "path": "/srv/vllm/bin/vllm-0.sh"},
        {"replica": "vllm-0", "template": "vllm.service.j2",
         "path": "/etc/systemd/system/vllm-0.service"}]
    assert len(replica_files(REPLICAS, "/e", "/r", "/u")) == 6


def test_replica_files_refuse_a_nameless_replica() -> None:
    with pytest.raises(ValueError, match="has no name"):
        replica_files([{"port": 1}], "/e", "/r")


def test_replica_files_take_names_too() -> None:
    assert [f["path"] for f in replica_files(["vllm-2"], "/e", "/r", "/u")] == [
        "/e/vllm-2.env", "/r/bin/vllm-2.sh", "/u/vllm-2.service"]


def test_kv_cache_tokens_prefers_the_logged_size() -> None:
    from ansible_collections.vllm_fleet.serving.plugins.filter.engine_roles import (
        kv_cache_tokens,
    )
    page = ('# HELP x\nvllm:cache_config_info{block_size="16",num_gpu_blocks="100",'
            'kv_cache_size_tokens="1500"} 1.0\n')
    assert kv_cache_tokens(page) == {"tokens": 1500, "blocks": 100, "block_size": 16}
    page = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="100"} 1.0\n'
    assert kv_cache_tokens(page) == {"tokens": 1600, "blocks": 100, "block_size": 16}
    assert kv_cache_tokens("nothing") == {"tokens": 0, "blocks": -1, "block_size": 0}


def test_replica_files_with_replica_carries_each_replica_and_its_file() -> None:
    replicas = [{"name": "vllm-0", "port": 8000}, {"name": "vllm-1", "port": 8001}]
    files = replica_files(replicas, "/etc/vllm", "/srv/vllm", with_replica=True)
    assert [(f["name"], f["port"], f["file"]["template"]) for f in files] == [
        ("vllm-0", 8000, "vllm.env.j2"), ("vllm-0", 8000, "launch.sh.j2"),
        ("vllm-0", 8000, "vllm.service.j2"), ("vllm-1", 8001, "vllm.env.j2"),
        ("vllm-1", 8001, "launch.sh.j2"), ("vllm-1", 8001, "vllm.service.j2")]
    assert files[4]["file"]["path"] == "/srv/vllm/bin/vllm-1.sh"
    assert "file" not in replicas[0]  # the replicas themselves are not changed
    with pytest.raises(ValueError, match="with_replica needs the replica's mapping"):
        replica_files(["vllm-0"], "/etc/vllm", "/srv/vllm", with_replica=True)
