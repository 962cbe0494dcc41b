"""Misspelt role variables: names under a role's prefix that the role does not know.

A role ignores a variable it does not read, so ``engine_restarts_cron_enabeld: false`` would
converge, change nothing and leave the schedule on. The one check, for every role: each name
under a role's prefix (the role's name and ``_``; the longest such prefix owns the name) is
compared with the options of the role's meta/argument_specs.yml (every entry point) and the
facts the role publishes (role_data.PUBLISHED_FACTS); any other name is refused with its
closest known names (difflib), or with the sibling role's variable that took its place.
Names that begin with ``_`` (a role's internals, ``_<role>_...``) are under no prefix and
never checked.

The action vllm_fleet.serving.role_vars applies it: each role's validation task (its own
prefix, on each host) and the plan play's one task (every role's prefix, for every host of
the play at once, in roles/vllm_plan). The filter unknown_role_vars gives the messages of one
role. No Ansible import: plain Python.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.role_data import (
    ROLES_DIR,
    known_role_vars,
    published_role_vars,
    role_dirs,
)


def moved_role_var(name: str, role_path: str, prefix: str = "") -> str | None:
    """The variable of a sibling role of the same family (the roles directory's roles whose
    names share the first word: vllm_server, vllm_install, vllm_plan) with the same name
    after its role's prefix (vllm_server_version -> vllm_install_version), if one has."""
    role = Path(role_path)
    suffix = name.removeprefix(prefix or role.name + "_")
    family = role.name.split("_", 1)[0] + "_"
    for other in sorted(role.parent.iterdir()):
        if (other.name != role.name and other.name.startswith(family)
                and (other / "meta" / "argument_specs.yml").is_file()):
            candidate = f"{other.name}_{suffix}"
            if candidate in known_role_vars(str(other)):
                return candidate
    return None


def unknown_role_vars(names: Iterable[str], role_path: str, prefix: str = "") -> list[str]:
    """One message per name under the role's prefix (role name + '_' unless given) that the
    role's argument_specs do not list and the role does not publish, with up to three close
    known names, or the name of another role's variable that took its place (a variable
    moved between roles)."""
    prefix = prefix or Path(role_path).name + "_"
    known = known_role_vars(role_path) | published_role_vars(role_path)
    # Compared without the prefix every name shares, which would make all look close; a
    # ratio of 0.6 still finds a transposition in a three-letter suffix (log -> lgo).
    suffixes = {known_name.removeprefix(prefix): known_name for known_name in known}
    messages = []
    for name in sorted(set(names)):
        if not name.startswith(prefix) or name in known:
            continue
        close = [suffixes[match] for match in difflib.get_close_matches(
            name.removeprefix(prefix), sorted(suffixes), n=3, cutoff=0.6)]
        moved = moved_role_var(name, role_path, prefix)
        if moved:
            hint = f"moved to role {moved.removesuffix(name.removeprefix(prefix))[:-1]}: {moved}"
        elif close:
            hint = f"did you mean {' or '.join(close)}?"
        else:
            hint = "no known variable is close"
        messages.append(f"{name}: unknown to role {Path(role_path).name} ({hint})")
    return messages


def owner_of(name: str, roles: Iterable[str]) -> str | None:
    """The role among ROLES whose name and '_' begin NAME (the longest), if any."""
    owners = [role for role in roles if name.startswith(role + "_")]
    return max(owners, key=len) if owners else None


def unknown_vars(names: Iterable[str], roles: Iterable[str] | None = None,
                 roles_dir: str | Path = ROLES_DIR) -> dict[str, list[str]]:
    """The unknown names among NAMES under the prefix of each of ROLES (every role under
    ROLES_DIR by default): role -> its messages (unknown_role_vars), for the roles with any.
    A name belongs to the role with the longest prefix of it among all of ROLES_DIR's roles.
    Raises ValueError naming a role of ROLES that ROLES_DIR lacks."""
    dirs = role_dirs(roles_dir)
    wanted = set(dirs) if roles is None else set(roles)
    missing = sorted(wanted - set(dirs))
    if missing:
        raise ValueError(f"no role {', '.join(missing)} with meta/argument_specs.yml under"
                         f" {roles_dir}")
    owned: dict[str, list[str]] = {}
    for name in set(names):
        role = owner_of(name, dirs)
        if role in wanted:
            owned.setdefault(role, []).append(name)
    found = {role: unknown_role_vars(owned[role], str(dirs[role])) for role in sorted(owned)}
    return {role: messages for role, messages in found.items() if messages}


def hosts_named(hosts: Sequence[str], checked: int) -> str:
    """HOSTS for a message: all of the CHECKED hosts, up to three by name, or three and how
    many more."""
    if len(hosts) == checked and checked > 1:
        return f"all {checked} hosts"
    if len(hosts) <= 3:
        return ", ".join(hosts)
    return f"{', '.join(hosts[:3])} and {len(hosts) - 3} more"


def refusal(found: Sequence[tuple[Sequence[str], Mapping[str, Sequence[str]]]],
            checked: int, name_hosts: bool = True) -> str:
    """The one refusal of the unknown names FOUND: (hosts, role -> messages) per distinct set
    of names among the CHECKED hosts; each set after its hosts (unless not NAME_HOSTS: a task
    on one host, which Ansible names), then the fix."""
    parts: list[str] = []
    roles: set[str] = set()
    for hosts, by_role in found:
        roles.update(by_role)
        text = "; ".join(message for role in sorted(by_role) for message in by_role[role])
        parts.append(f"{hosts_named(hosts, checked)}: {text}" if name_hosts else text)
    files = ", ".join(f"roles/{role}/meta/argument_specs.yml" for role in sorted(roles))
    return (" | ".join(parts) + ". A role ignores a variable it does not know, so a misspelt"
            " one changes nothing. Fix: rename the variable in the inventory (or the extra"
            f" vars) to the name its role knows ({files} lists every one), or remove it.")
