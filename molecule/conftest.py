"""Pytest plugin for the testinfra verifiers of every scenario under molecule/.

Molecule runs testinfra with ``--connection ansible``, and testinfra has no native
mapping for Ansible's podman connection, so each check would run a whole Ansible
module round trip (about 2 s per command). When every inventory host is a podman
container, this hook switches testinfra to its podman backend (``podman exec``,
about 0.1 s per command). Set ``MOLECULE_TESTINFRA_VIA_ANSIBLE=1`` (e.g. in a
scenario's ``verifier.env``) for tests that need ``host.ansible(...)``, which only
works over the Ansible backend.
"""

from __future__ import annotations

import os

import pytest
from testinfra.utils.ansible_runner import AnsibleRunner

PODMAN_CONNECTIONS = frozenset({"podman", "containers.podman.podman"})


def pytest_configure(config: pytest.Config) -> None:
    option = config.option
    inventory = getattr(option, "ansible_inventory", None)
    if (
        os.environ.get("MOLECULE_TESTINFRA_VIA_ANSIBLE") == "1"
        or getattr(option, "connection", None) != "ansible"
        or not inventory
        or getattr(option, "hosts", None) is not None
    ):
        return
    runner = AnsibleRunner.get_runner(inventory)
    specs = []
    for name in sorted(runner.get_hosts("all")):
        hostvars = runner.get_variables(name)
        if hostvars.get("ansible_connection") not in PODMAN_CONNECTIONS:
            return  # not all podman: keep the Ansible backend for every host
        specs.append(f"podman://{hostvars.get('ansible_host', name)}")
    if specs:
        option.hosts = ",".join(specs)
