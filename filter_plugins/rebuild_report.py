"""manifest_diff: compare two deploy_manifest results (before and after a rebuild).

    {{ before.manifest | manifest_diff(after.manifest) }}
    -> {'same': 1234, 'added': [...], 'removed': [...],
        'changed': [{'path': ..., 'before': ..., 'after': ...}], 'identical': false}

Pure Python (no Ansible import).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def manifest_diff(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, Any]:
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        raise ValueError("manifest_diff takes two deploy_manifest 'manifest' mappings")
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = [
        {"path": path, "before": before[path], "after": after[path]}
        for path in sorted(set(before) & set(after))
        if before[path] != after[path]
    ]
    same = len(set(before) & set(after)) - len(changed)
    return {
        "same": same,
        "added": added,
        "removed": removed,
        "changed": changed,
        "identical": not (added or removed or changed),
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"manifest_diff": manifest_diff}
