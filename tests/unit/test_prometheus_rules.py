"""The prometheus_server role's rules and scrape config, checked and unit-tested by promtool."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _scripts import ansible_env

ROOT = Path(__file__).resolve().parents[2]
PROMTOOL_TESTS = ROOT / "tests" / "promtool"
BIN = Path(sys.executable).parent
PROMTOOL = shutil.which("promtool")

pytestmark = pytest.mark.skipif(PROMTOOL is None and os.environ.get("CI") != "true",
                                reason="promtool is installed by scripts/setup.sh")


def render(tmp: Path, version: str, inventory: Path) -> Path:
    env = ansible_env()
    subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory),
         str(PROMTOOL_TESTS / "render.yml"), "-e", f"out={tmp}",
         "-e", f"prometheus_server_vllm_version={version}"],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=300)
    return tmp


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL, "promtool missing: run scripts/setup.sh"
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for version in ("0.32.0", "0.6.2"):
        out[version] = render(tmp_path_factory.mktemp(version), version,
                              ROOT / "inventories" / "example")
    return out


@pytest.mark.parametrize("version", ["0.32.0", "0.6.2"])
def test_rules_and_config_pass_promtool_check(rendered: dict[str, Path], version: str) -> None:
    out = rendered[version]
    result = promtool("check", "rules", str(out / "vllm.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    config["rule_files"] = [str(out / "vllm.yml")]
    (out / "check.yml").write_text(yaml.safe_dump(config))
    result = promtool("check", "config", str(out / "check.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_scrape_config_covers_every_replica_and_exporter(rendered: dict[str, Path]) -> None:
    config = yaml.safe_load((rendered["0.32.0"] / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = {t for sc in jobs["vllm"]["static_configs"] for t in sc["targets"]}
    assert targets == {"h200-a.gpu.example.internal:8000", "h200-b.gpu.example.internal:8000",
                       "h100-a.gpu.example.internal:8000", "h100-a.gpu.example.internal:8001",
                       "h200-c.gpu.example.internal:8000", "h100-b.gpu.example.internal:8000",
                       "h100-b.gpu.example.internal:8001"}
    nodes = {t for sc in jobs["node"]["static_configs"] for t in sc["targets"]}
    assert nodes == {f"{h}.gpu.example.internal:9100"
                     for h in ("h200-a", "h200-b", "h100-a", "h200-c", "h100-b")}
    assert "dcgm" not in jobs  # no host of the example runs DCGM exporter


def _unit_test(rendered: Path, name: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    text = (PROMTOOL_TESTS / name).read_text().replace("RULES", str(rendered / "vllm.yml"))
    test_file = tmp / name
    test_file.write_text(text)
    return promtool("test", "rules", str(test_file))


@pytest.mark.parametrize(("version", "name"), [
    ("0.32.0", "alerts.test.yml"),
    ("0.6.2", "alerts.test.yml"),
    ("0.32.0", "kv_pool.current.test.yml"),
    ("0.6.2", "kv_pool.legacy.test.yml"),
])
def test_each_alert_fires_when_it_should_and_only_then(rendered: dict[str, Path], version: str,
                                                       name: str, tmp_path: Path) -> None:
    result = _unit_test(rendered[version], name, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("version", "name"), [
    ("0.32.0", "kv_pool.legacy.test.yml"),
    ("0.6.2", "kv_pool.current.test.yml"),
])
def test_metric_names_follow_the_vllm_version(rendered: dict[str, Path], version: str,
                                              name: str, tmp_path: Path) -> None:
    """Rules for one release do not fire on the other release's KV metric name."""
    result = _unit_test(rendered[version], name, tmp_path)
    assert result.returncode != 0
    assert "VllmKvPoolNearFull" in result.stdout + result.stderr
