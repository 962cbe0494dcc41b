"""Testinfra checks for the test_hosts proof scenario (run by `molecule verify`)."""

from __future__ import annotations

import pytest
from testinfra.host import Host

# Platform name -> (Debian major version, codename); see molecule.yml.
EXPECTED_OS = {"debian12": ("12", "bookworm"), "debian13": ("13", "trixie")}


@pytest.fixture
def platform(host: Host) -> str:
    name = host.backend.get_hostname()
    assert name in EXPECTED_OS, f"unexpected platform {name!r}"
    return str(name)


def os_release(host: Host) -> dict[str, str]:
    pairs = (
        line.split("=", 1)
        for line in host.file("/etc/os-release").content_string.splitlines()
        if "=" in line
    )
    return {key: value.strip('"') for key, value in pairs}


def test_os_matches_platform(host: Host, platform: str) -> None:
    major, codename = EXPECTED_OS[platform]
    release = os_release(host)
    assert release["ID"] == "debian"
    assert release["VERSION_ID"] == major
    assert release["VERSION_CODENAME"] == codename


def test_systemd_is_pid1_and_running(host: Host) -> None:
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"
    state = host.run("systemctl is-system-running")
    failed = host.run("systemctl --failed --no-legend --plain").stdout
    assert state.stdout.strip() == "running", f"failed units:\n{failed}"


def test_package_installed(host: Host) -> None:
    assert host.package("tree").is_installed


def test_templated_file(host: Host, platform: str) -> None:
    major, codename = EXPECTED_OS[platform]
    conf = host.file("/etc/testhost/testhost.conf")
    assert conf.is_file
    assert conf.user == "root"
    assert conf.group == "root"
    assert conf.mode == 0o644
    lines = conf.content_string.splitlines()
    assert lines[0].startswith("# ")
    assert lines[1:] == [
        f"host = {platform}",
        "distribution = Debian",
        f"major_version = {major}",
        f"release = {codename}",
    ]


def test_cron_enabled_and_running(host: Host) -> None:
    cron = host.service("cron")
    assert cron.is_enabled
    assert cron.is_running


def test_base_config_applied(host: Host) -> None:
    """Settings from .config/molecule/config.yml reach the container."""
    assert host.mount_point("/etc/ssl/certs/ca-certificates.crt").exists
    assert host.run("sh -c 'ulimit -n'").stdout.strip() == "4096"
