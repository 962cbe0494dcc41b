"""Action managed_packages: Debian packages present, without a module call when they all
already are.

    managed_packages:
      name: [prometheus, prometheus-alertmanager]   # or one name: haproxy
      state: present                # the only state taken (and the default)
      install_recommends: false     # optional, passed on
      update_cache: true            # optional, passed on
      cache_valid_time: 3600        # optional, passed on
      default_release: bookworm-backports           # optional, passed on

ansible.builtin.apt starts Python on the host (and imports python3-apt, which reads the
package lists) to find packages that are already installed unchanged, and with
update_cache it also refreshes the lists when they are older than cache_valid_time. The
roles used to put a `dpkg-query` command task and a conditional apt task side by side for
each package set; this action is that pair in one task. It asks dpkg with one shell command
on the connection Ansible already holds (`dpkg-query --show` for all the packages) and
stops there when every package is exactly `ii` (wanted: install, status: installed, no
error flag). Anything else - a package not installed, half-installed, removed with its
configuration kept, unknown to dpkg, a name the probe cannot judge (a version pin
`name=1.2*`, an architecture `name:i386`, a .deb path, a wildcard), a probe that fails or
prints anything unexpected - hands the task to ansible.builtin.apt with the same arguments,
which refreshes the lists, installs, reports, diffs and honours check mode as always. So it
only ever answers "unchanged" where every package is installed, and then, like the pair it
replaces, it leaves the package lists as they are (a re-run does not make them younger).
"""

from __future__ import annotations

import re
import shlex
from typing import Any, cast

from ansible.module_utils.parsing.convert_bool import BOOLEANS, boolean
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.probed_action import ProbedAction

ACCEPTED = frozenset(("name", "state", "install_recommends", "update_cache",
                      "cache_valid_time", "default_release"))
BOOLEAN_OPTIONS = ("install_recommends", "update_cache")
# A package name as Debian policy spells it (5.6.1): the only names the probe judges.
PACKAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
# Anything apt takes as a name, but never a shell metacharacter or an option.
APT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+.:=~*_/-]*$")


def package_names(name: Any) -> list[str] | None:
    """NAME as a list of strings (a string is split on commas, as apt's list option does),
    or None where it is neither a string nor a list of strings."""
    if isinstance(name, str):
        return [part.strip() for part in name.split(",") if part.strip()]
    if isinstance(name, (list, tuple)) and all(isinstance(n, str) for n in name):
        return [n.strip() for n in name]
    return None


def check_args(args: dict[str, Any]) -> str | None:
    """The problem with ARGS (named, with the fix), or None."""
    unknown = sorted(set(args) - ACCEPTED)
    if unknown:
        return (f"managed_packages: unsupported option(s) {', '.join(unknown)}. Fix: use only "
                f"{', '.join(sorted(ACCEPTED))}, or ansible.builtin.apt directly.")
    names = package_names(args.get("name"))
    if not names:
        return (f"managed_packages: name {args.get('name')!r} is not a package or a list of "
                "packages. Fix: a name such as haproxy, or a non-empty list of names.")
    bad = [n for n in names if not APT_NAME.match(n)]
    if bad:
        return (f"managed_packages: name {bad[0]!r} is not a Debian package name. Fix: a "
                "name such as prometheus-node-exporter (optionally name=version).")
    if args.get("state", "present") != "present":
        return ("managed_packages: takes state: present only. Fix: use ansible.builtin.apt "
                "for any other state.")
    for option in BOOLEAN_OPTIONS:
        if option in args and not isinstance(args[option], bool) and args[option] not in BOOLEANS:
            return (f"managed_packages: {option} {args[option]!r} is not a boolean. Fix: "
                    f"{option}: true or {option}: false.")
    if "cache_valid_time" in args:
        value = args["cache_valid_time"]
        if isinstance(value, bool) or not str(value).isdigit():
            return (f"managed_packages: cache_valid_time {value!r} is not a whole number of "
                    "seconds. Fix: a number such as 3600.")
    if "default_release" in args and not isinstance(args["default_release"], str):
        return (f"managed_packages: default_release {args['default_release']!r} is not a "
                "release name. Fix: a string such as bookworm-backports.")
    return None


def module_args(args: dict[str, Any]) -> dict[str, Any]:
    """ARGS as ansible.builtin.apt takes them: the names as a list, state present, and the
    options given (booleans and the cache time converted), no other."""
    passed: dict[str, Any] = {"name": package_names(args["name"]), "state": "present"}
    for option in BOOLEAN_OPTIONS:
        if option in args:
            passed[option] = boolean(args[option], strict=True)
    if "cache_valid_time" in args:
        passed["cache_valid_time"] = int(str(args["cache_valid_time"]))
    if "default_release" in args:
        passed["default_release"] = args["default_release"]
    return passed


def probe_command(names: list[str]) -> str:
    """The shell command that prints each package's dpkg status and name, one a line."""
    quoted = " ".join(shlex.quote(n) for n in names)
    return ("LC_ALL=C dpkg-query --show --showformat='${db:Status-Abbrev} ${Package}\\n' "
            f"-- {quoted}")


def probe_judges(names: list[str]) -> bool:
    """Whether the probe can tell that NAMES are installed: plain package names only."""
    return all(PACKAGE_NAME.match(n) for n in names)


def all_installed(rc: int, stdout: str, names: list[str]) -> bool:
    """Whether probe_command for NAMES exited 0 and printed `ii` lines for exactly NAMES
    (a package of several architectures prints one line for each, all `ii`)."""
    if rc != 0:
        return False
    found = []
    for line in stdout.splitlines():
        status, _sep, package = line.partition(" ")
        if status != "ii" or not package.strip():
            return False
        found.append(package.strip())
    return bool(found) and set(found) == set(names)


class ActionModule(ProbedAction):
    BUILTIN = "ansible.builtin.apt"

    def check(self, args: dict[str, Any]) -> str | None:
        return check_args(args)

    def builtin_args(self, args: dict[str, Any]) -> dict[str, Any]:
        return module_args(args)

    def probe(self, args: dict[str, Any]) -> str | None:
        names = cast(list[str], args["name"])
        return probe_command(names) if probe_judges(names) else None

    def unchanged(self, args: dict[str, Any], rc: int, stdout: str) -> dict[str, Any] | None:
        names = cast(list[str], args["name"])
        if not all_installed(rc, stdout, names):
            return None
        return {"cache_updated": False, "packages": names}
