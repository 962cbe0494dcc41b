"""Filters of the host_firewall role: the inventory's client lists as address sets for
nftables, the problems of a list (named, with the fix), and whether a list admits an address.
Plain typed functions; the role's tasks and template only apply the result.

    {{ host_firewall_ssh_clients | host_firewall_problems('host_firewall_ssh_clients', hostvars) }}
    {{ host_firewall_ssh_clients | host_firewall_networks(hostvars) }}  -> {'v4': [..], 'v6': [..]}
    {{ host_firewall_ssh_clients | host_firewall_admits('192.0.2.7', hostvars) }}

An entry is an IP address, a CIDR network, or an inventory host name whose ansible_host is
an IP address (a name nftables would have to resolve is refused: it could resolve
differently on the host, or to several addresses).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _network(text: str) -> Network | None:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def _resolve(entry: Any,
             hostvars: Mapping[str, Any] | None) -> tuple[Network | None, str | None]:
    """The network ENTRY stands for, and the ansible_host it was read from (None: ENTRY is
    not an inventory host)."""
    text = str(entry).strip()
    if hostvars is not None and text in hostvars and _network(text) is None:
        address = str((hostvars[text] or {}).get("ansible_host", text))
        return _network(address), address
    return _network(text), None


def host_firewall_problems(entries: Any, variable: str,
                           hostvars: Mapping[str, Any] | None = None) -> list[str]:
    """One message per malformed entry of the list VARIABLE (empty: all good)."""
    if not isinstance(entries, list):
        return [f"{variable} must be a list of IP addresses, CIDR networks or inventory host "
                f"names, not {type(entries).__name__} {entries!r}. Fix: write it as a YAML list."]
    problems = []
    for entry in entries:
        network, address = _resolve(entry, hostvars)
        if network is not None:
            continue
        if address is not None:
            problems.append(
                f"{variable}: inventory host {entry!r} has ansible_host {address!r}, not an IP "
                f"address. Fix: set its ansible_host to its IP address, or list that address "
                f"(or network, CIDR) in {variable} instead of the host name.")
        else:
            problems.append(
                f"{variable}: {entry!r} is neither an IP address, a CIDR network (such as "
                f"10.0.0.0/24) nor an inventory host. Fix: correct or remove the entry.")
    return problems


def host_firewall_networks(entries: Iterable[Any],
                           hostvars: Mapping[str, Any] | None = None) -> dict[str, list[str]]:
    """The entries as collapsed (non-overlapping, sorted) networks, IPv4 and IPv6 apart, as
    nftables set elements ('192.0.2.7', '10.0.0.0/8'). Malformed entries are left out (the
    preflight refuses them first)."""
    v4: list[ipaddress.IPv4Network] = []
    v6: list[ipaddress.IPv6Network] = []
    for entry in entries:
        network = _resolve(entry, hostvars)[0]
        if isinstance(network, ipaddress.IPv4Network):
            v4.append(network)
        elif isinstance(network, ipaddress.IPv6Network):
            v6.append(network)

    def elements(networks: Iterable[Network]) -> list[str]:
        return [str(n.network_address) if n.prefixlen == n.max_prefixlen else str(n)
                for n in networks]

    return {"v4": elements(ipaddress.collapse_addresses(v4)),
            "v6": elements(ipaddress.collapse_addresses(v6))}


def host_firewall_admits(entries: Iterable[Any], address: str,
                         hostvars: Mapping[str, Any] | None = None) -> bool:
    """Whether the list admits ADDRESS (an IPv4-mapped IPv6 address counts as its IPv4)."""
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for entry in entries:
        network = _resolve(entry, hostvars)[0]
        if network is not None and ip.version == network.version and ip in network:
            return True
    return False


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"host_firewall_problems": host_firewall_problems,
                "host_firewall_networks": host_firewall_networks,
                "host_firewall_admits": host_firewall_admits}
