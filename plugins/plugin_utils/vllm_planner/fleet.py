"""A fleet's plans, computed once per distinct set of inputs (plain Python, no Ansible).

Most hosts of a fleet share their planner inputs (a group of identical machines), so the
plan of 1,000 hosts is a handful of planner runs: ``memoised`` groups the hosts by a
canonical key of their inputs and calls ``compute`` once per group.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def canonical_key(inputs: object) -> str:
    """One string per set of inputs, equal for equal values (mapping order aside)."""
    return json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)


@dataclass
class Group(Generic[T]):
    """Hosts that share one set of inputs, and what compute made of it."""

    inputs: Mapping[str, Any]
    result: T
    hosts: list[str] = field(default_factory=list)


def memoised(inputs_by_host: Iterable[tuple[str, Mapping[str, Any]]],
             compute: Callable[[Mapping[str, Any], str], T]) -> list[Group[T]]:
    """The groups of hosts with equal inputs, in the order their first host came, each
    computed once: compute(inputs, first_host) (the host to name in an error)."""
    groups: dict[str, Group[T]] = {}
    for host, inputs in inputs_by_host:
        key = canonical_key(inputs)
        if key not in groups:
            groups[key] = Group(inputs, compute(inputs, host))
        groups[key].hosts.append(host)
    return list(groups.values())


def hosts_label(hosts: list[str]) -> str:
    """The host itself, or how many share the plan (their names follow in the table)."""
    return hosts[0] if len(hosts) == 1 else f"{len(hosts)} hosts"
