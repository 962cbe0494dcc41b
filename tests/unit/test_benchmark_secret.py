"""The benchmark's API key never reaches a command line (issue 39).

Ansible's `environment:` keyword writes its variables into the remote `sh -c` command,
which ps shows to every local user and -vvv prints. The benchmark task hands the key to
`vllm bench serve` through stdin instead; this runs the task's own shell prologue.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _task() -> dict[str, object]:
    tasks = yaml.safe_load((ROOT / "roles/benchmark/tasks/run.yml").read_text())
    found = [t for block in tasks for t in block.get("block", [block])
             if "vllm_bench_serve.py" in str(t.get("ansible.builtin.command", ""))]
    assert len(found) == 1
    return dict(found[0])


def _run(stdin: str) -> str:
    argv = _task()["ansible.builtin.command"]["argv"]  # type: ignore[index]
    prologue = argv[:4]
    probe = [sys.executable, "-c", "import os; print(repr(os.environ.get('OPENAI_API_KEY')))"]
    done = subprocess.run([*prologue, *probe], input=stdin, capture_output=True, text=True,
                          check=True, timeout=30)
    return done.stdout.strip()


def test_the_key_goes_through_stdin_not_the_environment_keyword() -> None:
    task = _task()
    assert "benchmark_api_key" not in str(task.get("environment"))
    assert task["ansible.builtin.command"]["stdin"] == "{{ benchmark_api_key }}"  # type: ignore[index]
    assert "benchmark_api_key" not in str(task["ansible.builtin.command"]["argv"])  # type: ignore[index]
    assert task["no_log"] == "{{ benchmark_api_key | length > 0 }}"


def test_the_prologue_exports_the_key_read_from_stdin_and_nothing_without_one() -> None:
    assert _run("s3cr3t-key\n") == "'s3cr3t-key'"
    assert _run("\n") == "None"
    assert _run("") == "None"
