"""Action managed_file: a file from a template, a role file or content, or a directory,
without a module call when the host already has it right.

    managed_file:
      template: haproxy.cfg.j2      # or  src: verify-unit.sh  (files/)  or  content: "..."
      dest: /etc/haproxy/haproxy.cfg
      owner: root
      group: root
      mode: "0644"
      validate: haproxy -c -f %s    # optional, passed on

    managed_file:
      dest: /srv/vllm
      state: directory              # no source: the directory, as ansible.builtin.file makes it
      owner: root
      group: root
      mode: "0755"

ansible.builtin.template and ansible.builtin.copy run two modules on a file that is already
right: stat, then file to apply the same owner, group and mode again. A re-run of site.yml
has about 30 such files per engine host, and every module call starts Python on the host
(0.15-0.5 s each on a small machine). This action computes the wanted bytes on the control
node (a template as the template lookup renders it) and reads the destination with one shell
command on the connection Ansible already holds (coreutils' test, stat and sha1sum: no
module, no Python on the host), and stops there when it is a regular file whose sha1,
owner, group and mode all match. Anything else - a difference, a missing file or a link, a
rendering or a probe that fails, a host without GNU stat - hands the task to
ansible.builtin.template (with `template` as its src) or ansible.builtin.copy, which writes,
validates, diffs and honours check mode as always. So it only ever answers "unchanged" for
a file that already holds the wanted bytes with the wanted attributes; every change is the
builtin's. A directory is the same with ansible.builtin.file as its builtin: unchanged only
where it is a directory (not a link) with the wanted owner, group and mode.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, cast

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes
from ansible.plugins.action import ActionBase
from ansible.utils.hashing import checksum, checksum_s

SOURCES = ("template", "src", "content")
ACCEPTED = frozenset(SOURCES + ("dest", "owner", "group", "mode", "validate", "state"))
OCTAL_MODE = re.compile(r"^0?[0-7]{3,4}$")
SHA1 = re.compile(r"^[0-9a-f]{40}$")


def probe_command(dest: str, directory: bool = False) -> str:
    """The shell command that prints DEST's owner, group, uid, gid, mode and sha1 (or the
    word directory), one a line, and fails unless DEST is a regular file (a directory where
    DIRECTORY), not a link."""
    path = shlex.quote(dest)
    stat = f"LC_ALL=C stat --printf='%U\\n%G\\n%u\\n%g\\n%a\\n' -- {path}"
    if directory:
        return f"test -d {path} && test ! -h {path} && {stat} && echo directory"
    return f"test -f {path} && test ! -h {path} && {stat} && sha1sum < {path}"


def parse_probe(rc: int, stdout: str) -> dict[str, Any] | None:
    """The stat result (as ansible.builtin.stat names it) that probe_command printed, or
    None where it failed or printed anything else."""
    lines = stdout.splitlines()
    if rc != 0 or len(lines) != 6:
        return None
    owner, group, uid, gid, mode, last = lines
    sha1 = last.split(" ")[0]
    directory = last == "directory"
    if not (uid.isdigit() and gid.isdigit() and OCTAL_MODE.match(mode)
            and (directory or SHA1.match(sha1))):
        return None
    return {"exists": True, "isreg": not directory, "isdir": directory, "islnk": False,
            "checksum": None if directory else sha1, "pw_name": owner, "uid": int(uid),
            "gr_name": group, "gid": int(gid), "mode": mode.zfill(4)}


def check_args(args: dict[str, Any]) -> str | None:
    """The problem with ARGS (named, with the fix), or None."""
    unknown = sorted(set(args) - ACCEPTED)
    if unknown:
        return (f"managed_file: unsupported option(s) {', '.join(unknown)}. Fix: use only "
                f"{', '.join(sorted(ACCEPTED))}, or ansible.builtin.template/copy directly.")
    given = [s for s in SOURCES if s in args]
    if args.get("state", "file") not in ("file", "directory"):
        return f"managed_file: state {args['state']!r} must be file or directory."
    if args.get("state") == "directory":
        if given or "validate" in args or "dest" not in args:
            return "managed_file: a directory takes dest, owner, group and mode only."
    elif len(given) != 1 or "dest" not in args:
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
        if args.get("state") == "directory":
            return self.directory(args, result, task_vars)
        args.pop("state", None)
        try:
            wanted = self.wanted_checksum(args, task_vars)
        except AnsibleError:
            wanted = None  # in any doubt the builtin decides, and reports its own errors
        stat = self.probe(str(args["dest"])) if wanted is not None else None
        if stat is not None and unchanged(stat, str(wanted), args):
            result.update(changed=False, dest=args["dest"], checksum=wanted,
                          owner=stat["pw_name"], group=stat["gr_name"], mode=stat["mode"],
                          state="file")
            return cast(dict[str, Any], result)
        return cast(dict[str, Any], self.builtin(args).run(task_vars=task_vars))

    def probe(self, dest: str, directory: bool = False) -> dict[str, Any] | None:
        """DEST's stat result from probe_command on the held connection, or None where the
        probe fails (the builtin then decides, and reports its own errors)."""
        try:
            found = self._low_level_execute_command(probe_command(dest, directory))
        except AnsibleError:
            return None
        return parse_probe(found.get("rc", 1), found.get("stdout", ""))

    def directory(self, args: dict[str, Any], result: dict[str, Any],
                  task_vars: dict[str, Any]) -> dict[str, Any]:
        """A directory: unchanged where the probe finds it right, else ansible.builtin.file."""
        stat = self.probe(str(args["dest"]), directory=True)
        if stat is not None and stat["isdir"] and attributes_match(stat, args):
            result.update(changed=False, path=args["dest"], owner=stat["pw_name"],
                          group=stat["gr_name"], mode=stat["mode"], state="directory")
            return result
        module_args = {("path" if k == "dest" else k): v for k, v in args.items()}
        result.update(self._execute_module(module_name="ansible.builtin.file",
                                           module_args=module_args, task_vars=task_vars))
        self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def builtin(self, args: dict[str, Any]) -> ActionBase:
        task = self._task.copy()
        name = "ansible.builtin.template" if "template" in args else "ansible.builtin.copy"
        task.args.clear()
        task.args.update({("src" if k == "template" else k): v for k, v in args.items()})
        action = self._shared_loader_obj.action_loader.get(
            name, task=task, connection=self._connection, play_context=self._play_context,
            loader=self._loader, templar=self._templar, shared_loader_obj=self._shared_loader_obj)
        if action is None:
            raise AnsibleActionFail(f"managed_file: the {name} action is not available")
        return action
