"""What the benchmark leaves on the engine host: its runner, and no scratch results."""

from __future__ import annotations

from typing import Any


def test_runner_is_installed(host: Any) -> None:
    runner = host.file("/usr/local/lib/vllm-bench/vllm_bench_serve.py")
    assert runner.exists and runner.mode == 0o755


def test_scratch_results_are_removed(host: Any) -> None:
    assert host.run("ls -d /tmp/vllm-bench.* 2>/dev/null").stdout.strip() == ""


def test_engine_still_serves_after_the_unsafe_run(host: Any) -> None:
    assert host.service("vllm-0").is_running
    health = host.run("python3 -c \"import urllib.request;"
                      "print(urllib.request.urlopen('http://127.0.0.1:8000/health').status)\"")
    assert health.stdout.strip() == "200"
