"""The model's config.json for the plan, checked against the model's lock (roles/vllm_plan).

    {{ config_file | model_config(lock_file, inventory_dir) }}
      -> {'text': <config.json as text>, 'note': <where it came from, and whether it was checked>}

(the filter in filter_plugins/model_config.py; the plan_fleet action calls the same function
from here).

playbooks/lock_model.yml stores the locked commit's config.json beside the lock
(models/NAME/config.json beside models/NAME.lock.yml). Where the lock exists, a config.json
whose sha256 is not the lock's is refused, naming both files and the fix: the plan would
otherwise not be computed from the bytes the hosts get. Where there is no lock yet (a plan
on its own: `make plan`, an inventory that commits only config.json), the config is read
unchecked and the note says so; site.yml's model stage still refuses a missing lock.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible_collections.vllm_fleet.serving.plugins.module_utils.model_lock import (
    LockError,
    config_problem,
    parse_lock,
)

_LOCK_SUFFIX = ".lock.yml"


class ModelConfigError(ValueError):
    """A config.json the plan cannot use; the message names the files and the fix."""


def _shown(path: Path, base: str) -> str:
    """PATH relative to BASE (the inventory) where it lies under it, else as given."""
    if base:
        try:
            return str(path.resolve().relative_to(Path(base).resolve()))
        except ValueError:
            pass
    return str(path)


def _relock_fix(lock_file: Path, repo_id: str, commit: str) -> str:
    name = lock_file.name.removesuffix(_LOCK_SUFFIX)
    return (f"re-run `ansible-playbook -i INVENTORY playbooks/lock_model.yml"
            f" -e lock_model_name={name} -e lock_model_repo_id={repo_id}"
            f" -e lock_model_revision={commit}` (it stores the locked config.json beside the"
            f" lock; a newer revision moves the pin)")


def model_config(config_file: object, lock_file: object = "", base: object = "") -> dict[str, str]:
    """config.json's text and a note for the plan table; ModelConfigError on a config that
    is not the lock's (or cannot be read), naming the files and the fix."""
    if not isinstance(config_file, str) or not config_file:
        raise ModelConfigError(
            "vllm_plan: no model config.json to plan from. Set model_artifacts_name (the"
            " model's name: the plan reads INVENTORY/models/NAME/config.json, stored there by"
            " playbooks/lock_model.yml), or vllm_plan_model_config_file (a control-node path),"
            " or vllm_plan_model_config (the config as a mapping).")
    config = Path(config_file)
    lock_path = Path(str(lock_file)) if lock_file else None
    shown = _shown(config, str(base or ""))
    if lock_path is None or not lock_path.is_file():
        why = (f"no lock {_shown(lock_path, str(base or ''))}" if lock_path is not None
               else "vllm_plan_model_lock_file is empty")
        note = (f"{shown}, not checked: {why} (a plan only: site.yml's model stage needs the"
                f" lock, written by playbooks/lock_model.yml)")
        try:
            return {"text": config.read_text(), "note": note}
        except OSError as exc:
            raise ModelConfigError(
                f"vllm_plan_model_config_file {config}: cannot read the model's config.json"
                f" ({exc.strerror}). Fix: set model_artifacts_name to the model's folder under"
                f" INVENTORY/models/, or vllm_plan_model_config_file to the file.") from None
    try:
        lock = parse_lock(yaml.safe_load(lock_path.read_text()), str(lock_path))
    except (LockError, yaml.YAMLError) as exc:
        raise ModelConfigError(f"vllm_plan_model_lock_file: {exc}") from None
    fix = _relock_fix(lock_path, lock["repo_id"], lock["commit"])
    try:
        data = config.read_bytes()
    except OSError as exc:
        raise ModelConfigError(
            f"vllm_plan_model_config_file {config}: cannot read it ({exc.strerror}); the plan"
            f" reads the config.json locked in {lock_path} from there. Fix: {fix}, or restore"
            f" the file.") from None
    problem = config_problem(lock, data)
    if problem is not None:
        raise ModelConfigError(
            f"vllm_plan_model_config_file {config} is not the config.json locked in"
            f" {lock_path}: {problem}. The plan would not be computed from the bytes the hosts"
            f" get. Fix: {fix}, or restore the file (e.g. `git checkout -- {config}`).")
    note = (f"{shown}, sha256 checked against {_shown(lock_path, str(base or ''))}"
            f" (commit {lock['commit'][:12]})")
    return {"text": data.decode(errors="replace"), "note": note}
