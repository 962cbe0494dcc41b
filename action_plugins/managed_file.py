"""Action managed_file: a file from a template, a role file or content, in one module call
when the host already has it right.

    managed_file:
      template: haproxy.cfg.j2      # or  src: verify-unit.sh  (files/)  or  content: "..."
      dest: /etc/haproxy/haproxy.cfg
      owner: root
      group: root
      mode: "0644"
      validate: haproxy -c -f %s    # optional, passed on

ansible.builtin.template and ansible.builtin.copy run two modules on a file that is already
right: stat, then file to apply the same owner, group and mode again. A re-run of site.yml
has 17 such files per engine host, and every module call starts Python on the host (about
0.3-0.5 s each on a small machine). This action computes the wanted bytes on the control
node (a template as the template lookup renders it), stats the destination once and stops
there when its checksum, owner, group and mode all match. Anything else - a difference, a
missing file, a rendering or stat that fails - hands the task to ansible.builtin.template
(with `template` as its src) or ansible.builtin.copy, which writes, validates, diffs and
honours check mode as always. So it only ever answers "unchanged" for a file that already
holds the wanted bytes with the wanted attributes; every change is the builtin's.
"""

from __future__ import annotations

import re
from typing import Any, cast

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes
from ansible.plugins.action import ActionBase
from ansible.utils.hashing import checksum, checksum_s

SOURCES = ("template", "src", "content")
ACCEPTED = frozenset(SOURCES + ("dest", "owner", "group", "mode", "validate"))
OCTAL_MODE = re.compile(r"^0?[0-7]{3,4}$")


def check_args(args: dict[str, Any]) -> str | None:
    """The problem with ARGS (named, with the fix), or None."""
    unknown = sorted(set(args) - ACCEPTED)
    if unknown:
        return (f"managed_file: unsupported option(s) {', '.join(unknown)}. Fix: use only "
                f"{', '.join(sorted(ACCEPTED))}, or ansible.builtin.template/copy directly.")
    given = [s for s in SOURCES if s in args]
    if len(given) != 1 or "dest" not in args:
        return "managed_file: give dest and exactly one of template, src or content."
    if "mode" in args and not OCTAL_MODE.match(str(args["mode"])):
        return f"managed_file: mode {args['mode']!r} must be an octal string such as \"0644\"."
    return None


def attributes_match(stat: dict[str, Any], args: dict[str, Any]) -> bool:
    """True when the stat result already has every owner, group and mode ARGS ask for."""
    if "owner" in args and str(args["owner"]) not in (stat.get("pw_name"), str(stat.get("uid"))):
        return False
    if "group" in args and str(args["group"]) not in (stat.get("gr_name"), str(stat.get("gid"))):
        return False
    if "mode" in args:
        current = stat.get("mode")
        return current is not None and int(str(args["mode"]), 8) == int(str(current), 8)
    return True


def unchanged(stat: dict[str, Any], wanted_checksum: str, args: dict[str, Any]) -> bool:
    """Whether the destination STAT already is the wanted file."""
    return (bool(stat.get("exists")) and bool(stat.get("isreg")) and not stat.get("islnk")
            and stat.get("checksum") == wanted_checksum and attributes_match(stat, args))


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible ships no type information
    TRANSFERS_FILES = True

    def wanted_checksum(self, args: dict[str, Any], task_vars: dict[str, Any]) -> str | None:
        """sha1 of the bytes the builtin would write, or None where it cannot be known."""
        if "template" in args:
            lookup = self._shared_loader_obj.lookup_loader.get(
                "ansible.builtin.template", loader=self._loader, templar=self._templar)
            rendered = lookup.run([args["template"]], variables=task_vars)
            return cast(str, checksum_s(to_bytes(rendered[0], errors="surrogate_or_strict")))
        if "src" in args:
            return cast(str, checksum(self._find_needle("files", args["src"])))
        content = args["content"]
        return cast(str, checksum_s(to_bytes(content))) if isinstance(content, str) else None

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars if task_vars is not None else {}
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        problem = check_args(args)
        if problem:
            raise AnsibleActionFail(problem)
        try:
            wanted = self.wanted_checksum(args, task_vars)
            if wanted is not None:
                stat = self._execute_remote_stat(args["dest"], all_vars=task_vars,
                                                 follow=False, checksum=True)
                if unchanged(stat, wanted, args):
                    self._remove_tmp_path(self._connection._shell.tmpdir)
                    result.update(changed=False, dest=args["dest"], checksum=wanted,
                                  owner=stat.get("pw_name"), group=stat.get("gr_name"),
                                  mode=stat.get("mode"), state="file")
                    return cast(dict[str, Any], result)
        except AnsibleError:
            pass  # in any doubt the builtin decides, and reports its own errors
        return cast(dict[str, Any], self.builtin(args).run(task_vars=task_vars))

    def builtin(self, args: dict[str, Any]) -> ActionBase:
        task = self._task.copy()
        name = "ansible.builtin.copy"
        if "template" in args:
            name = "ansible.builtin.template"
            task.args.clear()
            task.args.update({("src" if k == "template" else k): v for k, v in args.items()})
        action = self._shared_loader_obj.action_loader.get(
            name, task=task, connection=self._connection, play_context=self._play_context,
            loader=self._loader, templar=self._templar, shared_loader_obj=self._shared_loader_obj)
        if action is None:
            raise AnsibleActionFail(f"managed_file: the {name} action is not available")
        return action
