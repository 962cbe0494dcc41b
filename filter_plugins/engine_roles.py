"""The engine roles' list building, typed (it was Jinja loops in YAML strings):

    {{ vllm_install_uv_constraints | kernel_pin_conflicts(vllm_install_prebuilt_kernels) }}
    -> ['flashinfer-cubin==0.6 vs flashinfer-cubin==0.7.0.post1']
    {{ vllm_server_replicas | replica_commands(entrypoint) }}
    -> [{'name': 'vllm-0', 'command': [<entrypoint>..., <the plan's argv from the model on>]}]
    {{ vllm_server_replicas | replica_files(config_dir, root, unit_dir) }}
    -> [{'replica': 'vllm-0', 'template': 'vllm.env.j2', 'path': '/etc/vllm/vllm-0.env'}, ...]
    {{ metrics_page | kv_cache_tokens }}
    -> {'tokens': 65536, 'blocks': 4096, 'block_size': 16}

Pure Python (no Ansible import): errors are ValueError naming the entry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, cast


def _normalized(requirement: str) -> str:
    """A requirement's project name, PEP 503-normalized, without extras or version."""
    name = requirement.split("==", 1)[0]
    name = re.sub(r"\[.*$", "", name)
    return re.sub(r"[-_.]+", "-", name).lower()


def kernel_pin_conflicts(constraints: Sequence[str], kernels: Sequence[str]) -> list[str]:
    """'constraint vs kernel' for each constraint on a kernel's project (PEP 503 name) that
    pins another version than the kernel pin does."""
    found = []
    for pin in constraints:
        for kernel in kernels:
            if (_normalized(str(kernel)) == _normalized(str(pin))
                    and str(kernel).split("==")[1:] != str(pin).split("==")[1:]):
                found.append(f"{pin} vs {kernel}")
    return found


def replica_commands(replicas: Sequence[Mapping[str, Any]],
                     entrypoint: Sequence[str]) -> list[dict[str, Any]]:
    """Each replica's command as its launch script execs it: the entrypoint, then the plan's
    argv from the model on (the plan's argv starts with 'vllm serve')."""
    out = []
    for replica in replicas:
        try:
            argv = list(replica["plan"]["argv"])
            name = str(replica["name"])
        except (KeyError, TypeError) as err:
            raise ValueError(f"replica {replica!r} has no name or no plan argv") from err
        out.append({"name": name, "command": [str(word) for word in entrypoint] + argv[2:]})
    return out


# The files each replica has, by the role's template that renders them.
REPLICA_TEMPLATES = ("vllm.env.j2", "launch.sh.j2", "vllm.service.j2")


def replica_files(replicas: Sequence[Mapping[str, Any] | str], config_dir: str, root: str,
                  unit_dir: str = "/etc/systemd/system",
                  with_replica: bool = False) -> list[dict[str, Any]]:
    """Each replica's environment file, launch script and unit: replica name, template and
    live path, in that order per replica. A replica is a mapping with a name, or a name.

    with_replica: each entry is instead the replica's own mapping with the file under the
    key ``file`` ({template, path}), so that a task looping over the files renders the
    role's templates with ``item`` as the replica they read."""
    out: list[dict[str, Any]] = []
    for replica in replicas:
        if isinstance(replica, str) and replica and not with_replica:
            name = replica
        elif isinstance(replica, Mapping) and "name" in replica:
            name = str(replica["name"])
        else:
            raise ValueError(f"replica {replica!r} has no name"
                             + (" (with_replica needs the replica's mapping)"
                                if with_replica else ""))
        paths = (f"{config_dir}/{name}.env", f"{root}/bin/{name}.sh",
                 f"{unit_dir}/{name}.service")
        for template, path in zip(REPLICA_TEMPLATES, paths, strict=True):
            if with_replica:
                out.append({**cast(Mapping[str, Any], replica),
                            "file": {"template": template, "path": path}})
            else:
                out.append({"replica": name, "template": template, "path": path})
    return out


CACHE_INFO = re.compile(r"^vllm:cache_config_info\{[^}]*\}", re.MULTILINE)


def _label(info: str, name: str) -> int | None:
    match = re.search(rf'{name}="([0-9]+)"', info)
    return int(match[1]) if match else None


def kv_cache_tokens(metrics: str) -> dict[str, int]:
    """The KV cache an engine reserved, from its /metrics page's vllm:cache_config_info
    labels: kv_cache_size_tokens where the engine reports it, else num_gpu_blocks x
    block_size; tokens 0 (blocks -1, block size 0) when the page has no such line."""
    match = CACHE_INFO.search(str(metrics))
    info = match[0] if match else ""
    blocks = _label(info, "num_gpu_blocks")
    block_size = _label(info, "block_size")
    blocks = -1 if blocks is None else blocks
    block_size = 0 if block_size is None else block_size
    logged = _label(info, "kv_cache_size_tokens")
    return {"tokens": logged if logged is not None else blocks * block_size,
            "blocks": blocks, "block_size": block_size}


class FilterModule:
    """kernel_pin_conflicts, replica_commands, replica_files and kv_cache_tokens."""

    def filters(self) -> dict[str, Any]:
        return {"kernel_pin_conflicts": kernel_pin_conflicts,
                "replica_commands": replica_commands, "replica_files": replica_files,
                "kv_cache_tokens": kv_cache_tokens}
