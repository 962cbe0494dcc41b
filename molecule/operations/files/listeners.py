"""Every listening TCP socket on this host with the systemd unit of its process, one JSON
line each: {"address", "port", "unit", "command"}. Reads /proc (the test hosts have no ss)."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
import struct


def _address(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(struct.pack("<I", struct.unpack(">I", raw)[0])))
    words = struct.unpack(">4I", raw)  # four 32-bit words, each printed in host order
    return str(ipaddress.IPv6Address(struct.pack("<4I", *words)))


def listening() -> dict[int, tuple[str, int]]:
    """Socket inode -> (address, port) of every socket in LISTEN state (0A)."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if fields[3] == "0A":
                    address, port = fields[1].split(":")
                    found[int(fields[9])] = (_address(address), int(port, 16))
    return found


def owners() -> dict[int, int]:
    """Socket inode -> pid."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                match = re.fullmatch(r"socket:\[(\d+)\]", target)
                if match:
                    found[int(match[1])] = int(pid)
        except OSError:
            continue
    return found


def unit(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cgroup") as cgroup:
            names = re.findall(r"/([^/\s]+\.service)", cgroup.read())
        return names[-1] if names else ""
    except OSError:
        return ""


def command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return ""


def main() -> None:
    pids = owners()
    for inode, (address, port) in sorted(listening().items(), key=lambda item: item[1][1]):
        pid = pids.get(inode, 0)
        print(json.dumps({"address": address, "port": port, "unit": unit(pid) if pid else "",
                          "command": command(pid) if pid else "", "host": socket.gethostname()}))


if __name__ == "__main__":
    main()
