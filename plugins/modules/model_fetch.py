#!/usr/bin/python
"""Ansible module model_fetch: download a locked model revision with huggingface_hub.

Runs on the host under the interpreter of a virtual environment that holds huggingface_hub
(the role sets ansible_python_interpreter for this task only). It downloads exactly the
locked files at the locked commit into a staging directory; it does not trust them: the
role verifies every byte with model_verify afterwards. The token comes only from the
environment (HF_TOKEN, set by the task with no_log); it is never a parameter.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: model_fetch
short_description: Download the locked files of a Hugging Face model revision into a directory
description:
  - Downloads exactly the locked O(files) of O(repo_id) at the locked O(commit) into O(dest)
    (a staging directory) with huggingface_hub, skipping files already there with the locked
    size. It does not trust the bytes; the C(model_artifacts) role verifies every file with
    M(vllm_fleet.serving.model_verify) afterwards.
  - Runs on the host under an interpreter that can import huggingface_hub (the role sets
    C(ansible_python_interpreter) for this task only).
  - Partial downloads the Hub client leaves behind (C(*.incomplete)) are removed before and
    after a try; they are never resumed across runs.
author:
  - vllm-fleet maintainers (@vllm-fleet)
requirements:
  - huggingface_hub (on the host, for the interpreter that runs the module)
attributes:
  check_mode:
    support: full
    description: Reports the files it would download and downloads nothing.
  diff_mode:
    support: none
    description: The bytes are model weights; there is no diff to show.
options:
  repo_id:
    description: The Hugging Face repository, C(org/name).
    type: str
    required: true
  commit:
    description: The locked 40-hex commit.
    type: str
    required: true
  files:
    description: The lock's files, each with C(path), C(size) and C(sha256).
    type: list
    elements: dict
    required: true
  dest:
    description: The staging directory.
    type: path
    required: true
  endpoint:
    description: E(HF_ENDPOINT), an internal mirror; empty means the Hub.
    type: str
    default: ""
  disable_xet:
    description: Set E(HF_HUB_DISABLE_XET) (plain HTTP downloads, no Xet storage client).
    type: bool
    default: true
  ca_bundle:
    description: CA bundle file for TLS (E(SSL_CERT_FILE), E(REQUESTS_CA_BUNDLE)); empty
      keeps the interpreter's default.
    type: str
    default: ""
  max_workers:
    description: Files downloaded at once.
    type: int
    default: 8
  progress_file:
    description: A file the module rewrites every 2 seconds with one line of download progress.
    type: path
  timeout:
    description: Kill the download after this many seconds; 0 means never.
    type: int
    default: 0
  token:
    description: The Hub token, put into this process's environment (E(HF_TOKEN)) only.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Download the locked files into staging
  vllm_fleet.serving.model_fetch:
    repo_id: Qwen/Qwen3-8B
    commit: "{{ _lock.lock.commit }}"
    files: "{{ _lock.lock.files }}"
    dest: /srv/models/.staging
    endpoint: https://hf-mirror.internal.example
    token: "{{ hf_token }}"
  vars:
    ansible_python_interpreter: /opt/hf-client/bin/python
  no_log: true
"""

RETURN = r"""
downloaded:
  description: The locked paths that were missing from O(dest) (in check mode, that would be
    downloaded).
  type: list
  elements: str
  returned: always
  sample: ["model-00001-of-00002.safetensors"]
cleaned:
  description: Partial downloads (C(*.incomplete)) that were removed.
  type: list
  elements: str
  returned: always
  sample: []
"""

import glob
import json
import multiprocessing
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

INCOMPLETE = ".incomplete"


def incomplete_files(dest: Path) -> list[Path]:
    """The Hub client's partial downloads (it never resumes them across runs)."""
    return sorted(
        p for p in dest.glob(".cache/huggingface/download/**/*") if p.name.endswith(INCOMPLETE)
    )


def clean_incomplete(dest: Path) -> list[str]:
    removed = []
    for p in incomplete_files(dest):
        p.unlink(missing_ok=True)
        removed.append(str(p.relative_to(dest)))
    return removed


def missing_files(dest: Path, files: Sequence[dict[str, Any]]) -> list[str]:
    """Locked paths not yet in DEST with their locked size."""
    out = []
    for f in files:
        try:
            if (dest / f["path"]).stat().st_size == int(f["size"]):
                continue
        except OSError:
            pass
        out.append(str(f["path"]))
    return out


def progress_line(dest: Path, files: Sequence[dict[str, Any]], started: float) -> str:
    total = sum(int(f["size"]) for f in files)
    done = 0
    for f in files:
        try:
            done += min((dest / f["path"]).stat().st_size, int(f["size"]))
        except OSError:
            pass
    done += sum(p.stat().st_size for p in incomplete_files(dest) if p.exists())
    done = min(done, total)
    rate = done / max(time.monotonic() - started, 1e-3)
    pct = 100.0 * done / total if total else 100.0
    return json.dumps(
        {
            "done_bytes": done,
            "total_bytes": total,
            "percent": round(pct, 1),
            "bytes_per_s": int(rate),
            "time": int(time.time()),
        }
    )


def _child(params: dict[str, Any], files: Sequence[dict[str, Any]], conn: Any) -> None:
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(
            params["repo_id"],
            revision=params["commit"],
            allow_patterns=[glob.escape(str(f["path"])) for f in files],
            local_dir=params["dest"],
            max_workers=params["max_workers"],
        )
        conn.send("")
    except Exception as exc:  # the Hub client's errors, reported without a traceback
        what = f"{params['repo_id']}@{params['commit']}"
        conn.send(f"download of {what} failed: {type(exc).__name__}: {exc}")


def download(params: dict[str, Any], files: Sequence[dict[str, Any]], dest: Path) -> str:
    """Run the Hub client in a child process; write progress; kill it after `timeout` s.

    Returns an error message, or "" when the child finished cleanly.
    """
    ctx = multiprocessing.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(params, files, sender), daemon=True)
    started = time.monotonic()
    child.start()
    sender.close()
    progress = params.get("progress_file")
    timeout = params.get("timeout") or 0
    while child.is_alive():
        child.join(2.0)
        if progress:
            try:
                Path(progress).write_text(progress_line(dest, files, started) + "\n")
            except OSError:
                pass
        if child.is_alive() and timeout and time.monotonic() - started > timeout:
            child.kill()
            child.join()
            return (
                f"download killed after {timeout} s (model_artifacts_download_timeout);"
                " a re-run cleans the partial files and downloads again"
            )
    if progress:
        Path(progress).write_text(progress_line(dest, files, started) + "\n")
    message: str = (
        receiver.recv() if receiver.poll() else f"the download process died (exit {child.exitcode})"
    )
    return message


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "repo_id": {"type": "str", "required": True},
            "commit": {"type": "str", "required": True},
            "files": {"type": "list", "elements": "dict", "required": True},
            "dest": {"type": "path", "required": True},
            "endpoint": {"type": "str", "default": ""},
            "disable_xet": {"type": "bool", "default": True},
            "ca_bundle": {"type": "str", "default": ""},
            "max_workers": {"type": "int", "default": 8},
            "progress_file": {"type": "path"},
            "timeout": {"type": "int", "default": 0},
            "token": {"type": "str", "default": "", "no_log": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    dest = Path(p["dest"])
    files = p["files"]
    todo = missing_files(dest, files)
    if module.check_mode or not todo:
        module.exit_json(changed=bool(todo), downloaded=todo, cleaned=[])
    # The Hub client reads these when it is imported.
    if p["endpoint"]:
        os.environ["HF_ENDPOINT"] = p["endpoint"]
    if p["disable_xet"]:
        os.environ["HF_HUB_DISABLE_XET"] = "1"
    if p["ca_bundle"]:
        os.environ["SSL_CERT_FILE"] = os.environ["REQUESTS_CA_BUNDLE"] = p["ca_bundle"]
    if p["token"]:
        os.environ["HF_TOKEN"] = p["token"]  # this process's environment only
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ.setdefault("HF_HOME", str(dest / ".cache" / "hf-home"))
    try:
        import huggingface_hub  # noqa: F401
    except ImportError as exc:
        module.fail_json(msg=f"huggingface_hub is not importable by this interpreter: {exc}")
    dest.mkdir(parents=True, exist_ok=True)
    cleaned = clean_incomplete(dest)
    error = download(p, files, dest)
    cleaned += clean_incomplete(dest)
    if error:
        module.fail_json(msg=error, cleaned=cleaned)
    still = missing_files(dest, files)
    if still:
        module.fail_json(msg=f"the mirror did not serve these locked files: {', '.join(still)}")
    module.exit_json(changed=True, downloaded=todo, cleaned=cleaned)


if __name__ == "__main__":
    main()
