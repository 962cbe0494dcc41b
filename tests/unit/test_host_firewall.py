"""roles/host_firewall: its filters (client lists -> nftables sets, problems, admits), its
ruleset template checked by the real `nft -c`, and its refusals with the real ansible-playbook
(malformed lists, a misspelt variable, an allowlist that would drop Ansible's own SSH
connection) before anything changes."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from _scripts import ansible_env
from ansible.plugins.filter.core import flatten
from test_plan_playbook import PLAYBOOK

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "host_firewall"

_spec = importlib.util.spec_from_file_location(
    "host_firewall_filters", ROOT / "filter_plugins" / "host_firewall.py")
assert _spec and _spec.loader
fw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fw)

HOSTVARS: dict[str, dict[str, Any]] = {
    "monitor": {"ansible_host": "192.0.2.10"},
    "monitor6": {"ansible_host": "2001:db8:1::10"},
    "named": {"ansible_host": "monitor.example.internal"},
    "bare": {},
}


def test_networks_collapse_and_split_by_family() -> None:
    nets = fw.host_firewall_networks(
        ["10.0.0.0/8", "10.1.2.3", "192.0.2.7/32", "monitor", "2001:db8::/64", "monitor6",
         "2001:db8::1", "10.1.2.3/24"], HOSTVARS)
    # 10.1.2.3 and 10.1.2.0/24 lie in 10.0.0.0/8; a /32 is written as the address.
    assert nets == {"v4": ["10.0.0.0/8", "192.0.2.7", "192.0.2.10"],
                    "v6": ["2001:db8::/64", "2001:db8:1::10"]}
    assert fw.host_firewall_networks([]) == {"v4": [], "v6": []}


def test_problems_name_the_variable_and_the_fix() -> None:
    assert fw.host_firewall_problems(["10.0.0.0/8", "monitor", "::1"], "v", HOSTVARS) == []
    [bad] = fw.host_firewall_problems(["10.0.0.300"], "host_firewall_ssh_clients", HOSTVARS)
    assert "host_firewall_ssh_clients: '10.0.0.300'" in bad and "Fix:" in bad
    [named] = fw.host_firewall_problems(["named"], "host_firewall_metrics_clients", HOSTVARS)
    assert "ansible_host 'monitor.example.internal', not an IP address" in named
    assert "host_firewall_metrics_clients" in named
    [bare] = fw.host_firewall_problems(["bare"], "host_firewall_metrics_clients", HOSTVARS)
    assert "inventory host 'bare' has ansible_host 'bare'" in bare
    [not_list] = fw.host_firewall_problems("10.0.0.0/8", "host_firewall_gateway_clients")
    assert "must be a list" in not_list


def test_admits() -> None:
    clients = ["10.0.0.0/8", "monitor", "2001:db8::/64"]
    assert fw.host_firewall_admits(clients, "10.20.30.40", HOSTVARS)
    assert fw.host_firewall_admits(clients, "192.0.2.10", HOSTVARS)
    assert fw.host_firewall_admits(clients, "::ffff:10.1.1.1", HOSTVARS)
    assert fw.host_firewall_admits(clients, "2001:db8::5", HOSTVARS)
    assert not fw.host_firewall_admits(clients, "192.0.2.11", HOSTVARS)
    assert not fw.host_firewall_admits(clients, "not-an-address", HOSTVARS)
    assert not fw.host_firewall_admits([], "10.0.0.1")


def render(**overrides: Any) -> str:
    values: dict[str, Any] = {
        "host_firewall_ssh_port": 22,
        "host_firewall_ssh_clients": ["10.0.0.0/24", "2001:db8:a::/48"],
        "host_firewall_gateway_ports": [8080],
        "host_firewall_gateway_clients": ["0.0.0.0/0"],
        "host_firewall_metrics_ports": [9100, 9180],
        "host_firewall_metrics_clients": ["monitor", "monitor6"],
        "host_firewall_group_peers": [], "host_firewall_group_ports": [29500, "32768-60999"],
        "hostvars": HOSTVARS, "ansible_managed": "Ansible managed",
    }
    values.update(overrides)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROLE / "templates"),
                             trim_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    # The template calls them by their full names, as Ansible resolves them in the collection.
    env.filters.update({f"vllm_fleet.serving.{name}": f
                        for name, f in fw.FilterModule().filters().items()})
    env.filters["flatten"] = flatten
    return env.get_template("vllm-allowlist.nft.j2").render(**values)


def nft_check(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "allowlist.nft"
    path.write_text(text)
    return subprocess.run(["nft", "-c", "-f", str(path)], capture_output=True, text=True,
                          check=False, timeout=30)


NFT = shutil.which("nft") or shutil.which("nft", path="/usr/sbin:/sbin")
needs_nft = pytest.mark.skipif(NFT is None or os.geteuid() != 0,
                               reason="nft -c needs Debian's nftables and root")


def test_ruleset_admits_each_port_to_its_clients_only() -> None:
    text = render()
    lines = [line.strip() for line in text.splitlines()]
    # Its own table only, replaced in one file (one transaction): declare, delete, define.
    assert lines.count("table inet vllm_allowlist") == 1
    assert "delete table inet vllm_allowlist" in lines
    assert "flush ruleset" not in text
    chain = lines[lines.index("chain input {"):]
    assert chain[1] == "type filter hook input priority filter; policy accept;"
    assert chain[2:4] == ['iif "lo" accept', "ct state established,related accept"]
    assert "tcp dport { 22 } ip saddr @ssh_v4 accept" in chain
    assert "tcp dport { 22 } ip6 saddr @ssh_v6 accept" in chain
    assert "tcp dport { 8080 } ip saddr @gateway_v4 accept" in chain
    assert "tcp dport { 9100, 9180 } ip saddr @metrics_v4 accept" in chain
    # Every accept comes before the one drop of every governed port.
    drop = chain.index("tcp dport { 22, 8080, 9100, 9180 } drop")
    assert all(i < drop for i, line in enumerate(chain) if line.endswith(" accept"))
    # The Prometheus servers reach the gateway's /health as well as the metrics ports.
    assert "elements = { 0.0.0.0/0, 192.0.2.10 }" not in text  # collapsed into 0.0.0.0/0
    gateway_v6 = text.split("set gateway_v6 {")[1].split("}")[0]
    assert "2001:db8:1::10" in gateway_v6
    metrics_v4 = text.split("set metrics_v4 {")[1].split("}")[0]
    assert "192.0.2.10" in metrics_v4 and "10.0.0.0" not in metrics_v4


def test_an_engine_group_member_admits_the_group_ports_from_its_peers_only() -> None:
    """A member of a multi-host engine group: the rendezvous port and the ephemeral range
    (gloo, NCCL, vLLM's queues) from the other members only; one-host engines get no rule."""
    assert "group_v4" not in render()
    text = render(host_firewall_group_peers=["10.9.0.2", "10.9.0.5"])
    chain = [line.strip() for line in text.split("chain input {")[1].splitlines()]
    group_v4 = text.split("set group_v4 {")[1].split("set group_v6")[0]
    assert "elements = { 10.9.0.2, 10.9.0.5 }" in group_v4
    accept = chain.index("tcp dport { 29500, 32768-60999 } ip saddr @group_v4 accept")
    drop = chain.index("tcp dport { 29500, 32768-60999 } drop")
    assert accept < drop
    # The project's own ports keep their own rules ahead of the group's.
    assert chain.index("tcp dport { 22, 8080, 9100, 9180 } drop") < accept


@needs_nft
def test_rendered_rulesets_pass_nft_check(tmp_path: Path) -> None:
    cases: list[dict[str, Any]] = [
        {}, {"host_firewall_metrics_clients": []},
        {"host_firewall_gateway_clients": ["0.0.0.0/0", "::/0"],
         "host_firewall_gateway_ports": [8080, 8443],
         "host_firewall_metrics_ports": [9100, 9180, 9400]},
        {"host_firewall_ssh_port": 2200, "host_firewall_ssh_clients": ["::1"]},
        {"host_firewall_group_peers": ["10.9.0.2", "2001:db8:9::2"]}]
    for overrides in cases:
        text = render(**overrides)
        result = nft_check(text, tmp_path)
        assert result.returncode == 0, f"{overrides}: {result.stderr}\n{text}"


@needs_nft
def test_nft_check_is_a_real_check(tmp_path: Path) -> None:
    broken = render().replace("ip saddr @metrics_v4", "ip saddr @no_such_set")
    result = nft_check(broken, tmp_path)
    assert result.returncode != 0 and "no_such_set" in result.stderr


def run_role(tmp_path: Path, tasks_from: str, variables: dict[str, Any],
             **env: str) -> subprocess.CompletedProcess[str]:
    """The role's entry point on localhost (local connection), with VARIABLES."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "host_firewall", "hosts": "localhost", "connection": "local",
        "gather_facts": False, "vars": variables,
        "tasks": [{"name": "The role", "ansible.builtin.import_role": {
            "name": "host_firewall", "tasks_from": tasks_from}}]}]))
    return subprocess.run(
        [PLAYBOOK, "-i", "localhost,", "-e", f"ansible_python_interpreter={sys.executable}",
         str(playbook)], cwd=ROOT, capture_output=True,
        text=True, timeout=120, check=False,
        env=ansible_env(ANSIBLE_ROLES_PATH=str(ROOT / "roles"), **env))


GOOD = {"host_firewall_ssh_clients": ["10.0.0.0/24"],
        "host_firewall_gateway_clients": ["10.1.0.0/16"]}


def test_preflight_accepts_a_good_allowlist(tmp_path: Path) -> None:
    result = run_role(tmp_path, "preflight", GOOD)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("variables", "expected"), [
    ({"host_firewall_ssh_clients": []}, "host_firewall_ssh_clients is empty"),
    ({"host_firewall_gateway_clients": []}, "host_firewall_gateway_clients is empty"),
    ({"host_firewall_ssh_clients": ["10.0.0.300"]}, "host_firewall_ssh_clients: '10.0.0.300'"),
    ({"host_firewall_metrics_clients": ["monitor.example.internal"]},
     "host_firewall_metrics_clients: 'monitor.example.internal' is neither"),
    ({"host_firewall_metrics_ports": [9100, 70000]}, "host_firewall_metrics_ports"),
    ({"host_firewall_ssh_client": ["10.0.0.0/24"]},
     "host_firewall_ssh_client: unknown to role host_firewall (did you mean "
     "host_firewall_ssh_clients"),
])
def test_preflight_refuses_with_the_variable_and_the_fix(
        tmp_path: Path, variables: dict[str, Any], expected: str) -> None:
    result = run_role(tmp_path, "preflight", {**GOOD, **variables})
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert expected in out and "Fix" in out, out


def test_main_refuses_to_drop_ansibles_own_ssh_connection_before_any_change(
        tmp_path: Path) -> None:
    """sshd's SSH_CONNECTION (here the local connection inherits a made-up one) names a
    client the list does not admit: refused before nftables is even looked up."""
    result = run_role(tmp_path, "main", GOOD,
                      SSH_CONNECTION="192.0.2.50 51234 10.0.0.5 22")
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "over SSH from 192.0.2.50" in out and "host_firewall_ssh_clients" in out, out
    assert "Install nftables" not in out
    wrong_port = run_role(tmp_path, "main", GOOD,
                          SSH_CONNECTION="10.0.0.9 51234 10.0.0.5 2200")
    assert wrong_port.returncode != 0
    assert "set host_firewall_ssh_port to the port sshd listens on (2200)" in " ".join(
        (wrong_port.stdout + wrong_port.stderr).split())
