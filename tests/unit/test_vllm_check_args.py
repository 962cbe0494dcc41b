"""roles/vllm_install/files/vllm-check-args.py without vLLM: which parser reads a launch
command, and the input it refuses before importing vLLM (the molecule scenario vllm_server
runs it against the real engine)."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "roles/vllm_install/files/vllm-check-args.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vllm_check_args", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = load()


def test_vllm_serve_command() -> None:
    assert check.split_command(["/srv/vllm/venv/bin/vllm", "serve", "/m", "--port", "8000"]) \
        == ("serve", ["/m", "--port", "8000"])


def test_cpu_build_entrypoint_override() -> None:
    command = ["/srv/vllm/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server",
               "--model", "/m", "--enable-auto-tool-choice"]
    assert check.split_command(command) == ("api_server",
                                            ["--model", "/m", "--enable-auto-tool-choice"])


@pytest.mark.parametrize("command", [["/usr/bin/env", "vllm", "serve"], ["vllm", "bench"],
                                     ["python", "-m", "my.wrapper", "--model", "/m"], []])
def test_unknown_command_forms_are_refused(command: list[str]) -> None:
    with pytest.raises(ValueError, match="cannot tell which vLLM parser"):
        check.split_command(command)


@pytest.mark.parametrize("text", ["[]", "{}", '[{"name": "a"}]', '[{"name": 1, "command": []}]',
                                  '[{"name": "a", "command": ["vllm", 2]}]'])
def test_bad_input_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="JSON list"):
        check.read_replicas(text)


def test_bad_input_exits_2_before_importing_vllm(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    replicas = [{"name": "a", "command": ["/usr/bin/env", "vllm", "serve", "/m"]}]
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(replicas)))
    assert check.main() == 2
    assert "cannot tell which vLLM parser reads ['/usr/bin/env', 'vllm', 'serve']" in \
        capsys.readouterr().out
