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
  - One download at a time per O(dest) - a second run (such as a re-run while an earlier
    run's download still runs in the background) waits on a lock on O(dest) for the first to
    finish, then fetches what is still missing.
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
    description:
      - A file the module replaces every 2 seconds with the download's progress, one JSON
        object - C(done_bytes), C(total_bytes), C(percent), C(bytes_per_s) (over the last 30
        seconds), C(eta_s), C(summary) (the same in words) and C(time); a value that is not
        known yet is null.
      - The C(model_artifacts) role runs this module in the background and prints C(summary)
        at each poll.
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

import collections
import fcntl
import glob
import json
import math
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


def bytes_done(dest: Path, files: Sequence[dict[str, Any]]) -> int:
    """Bytes of the locked files in DEST (each capped at its locked size) plus partial files."""
    done = 0
    for f in files:
        try:
            done += min((dest / f["path"]).stat().st_size, int(f["size"]))
        except OSError:
            pass
    for p in incomplete_files(dest):
        try:
            done += p.stat().st_size
        except OSError:  # renamed into place between the glob and the stat
            pass
    return done


RATE_WINDOW_S = 30.0
UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB' (binary units)."""
    value, unit = float(n), UNITS[0]
    for unit in UNITS:
        if abs(value) < 1024 or unit == UNITS[-1]:
            break
        value /= 1024
    return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"


def human_duration(seconds: float) -> str:
    """3725 -> '1:02:05' (hours unbounded)."""
    s = max(0, int(round(seconds)))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def progress_status(
    samples: Sequence[tuple[float, int]], total: int | None, window: float = RATE_WINDOW_S
) -> dict[str, Any]:
    """The download's progress from SAMPLES, (monotonic seconds, bytes done) oldest first.

    The rate is over the last WINDOW seconds: from the newest sample at least WINDOW seconds
    older than the last one (the oldest sample while there is less history). It is None with
    fewer than two samples; bytes that went away (a cleaned partial file) count as no
    progress, never as a negative rate. TOTAL None (or 0) is unknown: no percent, no ETA.
    The ETA is the bytes left over the rate; 0 once done reaches the total; None while the
    rate is unknown or 0.
    """
    if not samples:
        raise ValueError("progress_status needs at least one sample")
    now, done = samples[-1]
    base = samples[0]
    for sample in samples:
        if sample[0] <= now - window:
            base = sample
        else:
            break
    elapsed = now - base[0]
    rate = max(0.0, (done - base[1]) / elapsed) if elapsed > 0 else None
    whole = total if total and total > 0 else None
    percent: float | None = None
    eta: int | None = None
    if whole is not None:
        done = min(done, whole)
        percent = round(100.0 * done / whole, 1)
        if done >= whole:
            eta = 0
        elif rate:
            eta = math.ceil((whole - done) / rate)
    words = [
        f"{human_bytes(done)} of {human_bytes(whole)} ({percent}%)"
        if whole is not None
        else f"{human_bytes(done)} of an unknown total",
        f"{human_bytes(rate)}/s" if rate is not None else "rate unknown",
        f"ETA {human_duration(eta)}" if eta is not None else "ETA unknown",
    ]
    return {
        "done_bytes": done,
        "total_bytes": whole,
        "percent": percent,
        "bytes_per_s": int(rate) if rate is not None else None,
        "eta_s": eta,
        "summary": ", ".join(words),
    }


def write_progress(path: str, status: dict[str, Any]) -> None:
    """Replace PATH atomically: a reader never sees half a line."""
    tmp = f"{path}.tmp"
    try:
        Path(tmp).write_text(json.dumps({**status, "time": int(time.time())}) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass


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
    total = sum(int(f["size"]) for f in files)
    started = time.monotonic()
    samples: collections.deque[tuple[float, int]] = collections.deque(
        [(started, bytes_done(dest, files))], maxlen=int(RATE_WINDOW_S / 2) + 2
    )
    progress = params.get("progress_file")
    if progress:
        write_progress(progress, progress_status(list(samples), total))
    child.start()
    sender.close()
    timeout = params.get("timeout") or 0
    while child.is_alive():
        child.join(2.0)
        # Never backwards: a file renamed from its partial name between the two looks of
        # bytes_done would count zero times for one sample.
        samples.append((time.monotonic(), max(bytes_done(dest, files), samples[-1][1])))
        if progress:
            write_progress(progress, progress_status(list(samples), total))
        if child.is_alive() and timeout and time.monotonic() - started > timeout:
            child.kill()
            child.join()
            return (
                f"download killed after {timeout} s (model_artifacts_download_timeout);"
                " a re-run cleans the partial files and downloads again"
            )
    if progress:
        samples.append((time.monotonic(), max(bytes_done(dest, files), samples[-1][1])))
        write_progress(progress, progress_status(list(samples), total))
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
    # One download per staging directory: a run started while an earlier one still runs in
    # the background (its play was cut off) waits for it, then fetches what is still missing.
    lock = os.open(dest, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        todo = missing_files(dest, files)
        if not todo:
            module.exit_json(changed=False, downloaded=[], cleaned=[])
        cleaned = clean_incomplete(dest)
        error = download(p, files, dest)
        cleaned += clean_incomplete(dest)
    finally:
        os.close(lock)
    if error:
        module.fail_json(msg=error, cleaned=cleaned)
    still = missing_files(dest, files)
    if still:
        module.fail_json(msg=f"the mirror did not serve these locked files: {', '.join(still)}")
    module.exit_json(changed=True, downloaded=todo, cleaned=cleaned)


if __name__ == "__main__":
    main()
