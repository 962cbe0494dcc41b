"""The base of the actions that answer "unchanged" from one shell command, or hand over.

A module call starts Python on the host (0.2-0.3 s each on a small machine), even where
nothing needs to change. An action built on ProbedAction first asks the host with one shell
command on the connection Ansible already holds, and stops there only when the answer is
exactly the wanted state. Anything else - another state, a probe that fails or prints
anything unexpected, arguments the probe cannot judge - hands the task to the builtin module
with the same arguments, which changes, reports, diffs and honours check mode as always. So
it only ever answers "unchanged" where the builtin would.

A subclass names the builtin (BUILTIN) and says how to check the arguments, which command
probes, and what the probe's answer means.
"""

from __future__ import annotations

from typing import Any, cast

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase


class ProbedAction(ActionBase):  # type: ignore[misc]  # ansible ships no type information
    """run(): check the arguments, probe, and either answer unchanged or run BUILTIN."""

    BUILTIN = ""  # the module that decides in any doubt, e.g. ansible.builtin.apt

    def check(self, args: dict[str, Any]) -> str | None:
        """The problem with ARGS (named, with the fix), or None."""
        raise NotImplementedError

    def builtin_args(self, args: dict[str, Any]) -> dict[str, Any]:
        """ARGS as BUILTIN takes them."""
        return args

    def probe(self, args: dict[str, Any]) -> str | None:
        """The shell command that tells the host's state, or None where it cannot judge."""
        raise NotImplementedError

    def unchanged(self, args: dict[str, Any], rc: int, stdout: str) -> dict[str, Any] | None:
        """The result to report where the probe's answer is exactly the wanted state (the
        task is then unchanged), else None."""
        raise NotImplementedError

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars if task_vars is not None else {}
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        problem = self.check(args)
        if problem:
            raise AnsibleActionFail(problem)
        passed = self.builtin_args(args)
        command = self.probe(passed)
        if command is not None:
            try:
                found = self._low_level_execute_command(command)
                answer = self.unchanged(passed, found.get("rc", 1), found.get("stdout", ""))
            except AnsibleError:
                answer = None  # in any doubt the builtin decides, and reports its own errors
            if answer is not None:
                result.update(changed=False, **answer)
                return cast(dict[str, Any], result)
        result.update(self._execute_module(module_name=self.BUILTIN, module_args=passed,
                                           task_vars=task_vars))
        self._remove_tmp_path(self._connection._shell.tmpdir)
        return cast(dict[str, Any], result)
