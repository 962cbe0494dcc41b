"""The planner never changes a host: nothing was written after the container booted."""

from __future__ import annotations

from typing import Any

# Written by systemd itself at boot, not by the play.
BOOT_FILES = {"/etc/machine-id", "/var/lib/dbus/machine-id"}


def test_no_engine_files_or_units(host: Any) -> None:
    assert not host.file("/srv/vllm").exists
    units = host.run("systemctl list-unit-files 'vllm*' --no-legend").stdout
    assert units.strip() == ""


def test_nothing_was_written_after_boot(host: Any) -> None:
    found = host.check_output(
        "find /etc /srv /opt /usr /var/lib -xdev -newer /proc/1/cmdline "
        "\\( -type f -o -type l \\) -not -path '/var/lib/systemd/timers/*'")
    written = set(found.split()) - BOOT_FILES
    assert written == set()
