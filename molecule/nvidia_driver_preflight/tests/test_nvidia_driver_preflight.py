"""After the refused run: no NVIDIA package, source or modprobe file on the Debian 12 host."""

from __future__ import annotations

from typing import Any


def test_no_nvidia_package_installed(host: Any) -> None:
    packages = host.check_output("dpkg-query -W -f='${Package}\\n'").split()
    assert packages  # the query works
    assert [p for p in packages if "nvidia" in p or "cuda" in p] == []


def test_no_sources_or_modprobe_files_written(host: Any) -> None:
    assert not host.file("/etc/apt/sources.list.d/nvidia-driver-debian.sources").exists
    assert not host.file("/etc/modprobe.d/nvidia-driver-blacklist-nouveau.conf").exists
    assert not host.file("/etc/modprobe.d/nvidia-driver-options.conf").exists


def test_debian12_really_packages_535(host: Any) -> None:
    """The refusal is about a real fact: bookworm's candidate is R535."""
    policy = host.check_output("apt-cache policy nvidia-driver")
    assert "Candidate: 535." in policy
