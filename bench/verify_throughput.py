#!/usr/bin/env python3
"""Benchmark model_verify's hashing against sha256sum, and the cost of re-runs.

    python3 bench/verify_throughput.py [--dir /var/tmp/verify-bench] [--files 8] [--mib 320]

1. Throughput on the same bytes (several files, >= 2 GB by default), page cache warm for
   every contender, so the hash itself is measured, not the disk:
   - `sha256sum` one file after another (one core), and `xargs -P CORES sha256sum`;
   - model_verify.hash_many with 1 process, then 2, 4, ... up to the cores.
2. Re-run cost of verify_dir on 40 files whose stamps are valid, as their total size grows.
   The 1 MiB and 64 MiB series are real files verified (hashed) once first; the larger
   series are sparse files (no disk used) whose stamp is written by the same code path
   after a stat, since hashing terabytes only to measure that nothing is re-hashed would
   prove nothing more.
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ansible_collections.vllm_fleet.serving.plugins.module_utils.model_lock import (  # noqa: E402
    LockedFile,
)
from ansible_collections.vllm_fleet.serving.plugins.modules.model_verify import (  # noqa: E402
    STAMP_VERSION,
    cpu_count,
    hash_many,
    stamp_key,
    verify_dir,
)

MIB = 1 << 20


def write_random(path: Path, size: int) -> None:
    block = os.urandom(8 * MIB)
    with path.open("wb") as fh:
        left = size
        while left > 0:
            fh.write(block[: min(left, len(block))])
            left -= len(block)
            block = hashlib.sha512(block[:64]).digest() * (len(block) // 64)


def timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def best_of(n: int, fn: Any) -> tuple[float, Any]:
    runs = [timed(fn) for _run in range(n)]
    return min(r[0] for r in runs), runs[0][1]


def throughput(workdir: Path, files: int, mib: int, repeat: int) -> dict[str, Any]:
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    paths = [data / f"model-{i:05d}.safetensors" for i in range(files)]
    for p in paths:
        if not p.exists() or p.stat().st_size != mib * MIB:
            write_random(p, mib * MIB)
    total = files * mib * MIB
    names = [str(p) for p in paths]
    for name in names:  # warm the page cache for everyone
        subprocess.run(["cat", name], stdout=subprocess.DEVNULL, check=True)
    cores = cpu_count()

    def sha256sum(jobs: int) -> dict[str, str]:
        cmd = ["xargs", "-0", "-n", "1", "-P", str(jobs), "sha256sum"]
        out = subprocess.run(
            cmd, input="\0".join(names), capture_output=True, text=True, check=True
        ).stdout
        return {line.split(None, 1)[1]: line.split(None, 1)[0] for line in out.splitlines()}

    t_sum1, ref = best_of(repeat, lambda: sha256sum(1))
    t_sumn, _digests = best_of(repeat, lambda: sha256sum(cores))
    ours: dict[str, float] = {}
    jobs = 1
    while True:
        t, got = best_of(repeat, lambda j=jobs: hash_many(names, j))
        assert got == ref, "model_verify and sha256sum disagree"
        ours[str(jobs)] = t
        if jobs >= min(cores, files):
            break
        jobs = min(jobs * 2, cores, files)
    gbs = {k: total / v / 1e9 for k, v in ours.items()}
    return {
        "files": files,
        "bytes": total,
        "cores": cores,
        "sha256sum_1_core_GBps": round(total / t_sum1 / 1e9, 3),
        f"sha256sum_xargs_P{cores}_GBps": round(total / t_sumn / 1e9, 3),
        "model_verify_GBps_by_processes": {k: round(v, 3) for k, v in gbs.items()},
        "ratio_1_process_vs_sha256sum_1_core": round(gbs["1"] / (total / t_sum1 / 1e9), 3),
        "scaling_max_processes_vs_1": round(gbs[max(ours, key=int)] / gbs["1"], 2),
    }


def rerun_cost(workdir: Path, repeat: int) -> list[dict[str, Any]]:
    out = []
    for label, size, sparse in [
        ("1MiB", MIB, False),
        ("64MiB", 64 * MIB, False),
        ("4GiB", 4 << 30, True),
        ("64GiB", 64 << 30, True),
    ]:
        root = workdir / f"rerun-{label}"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        stamp = workdir / f"rerun-{label}.stamp.json"
        files: list[LockedFile] = []
        for i in range(40):
            p = root / f"model-{i:05d}-of-00040.safetensors"
            if sparse:
                with p.open("wb") as fh:
                    fh.truncate(size)
                digest = hashlib.sha256(str(i).encode()).hexdigest()  # stands for the locked one
            else:
                write_random(p, size)
                digest = ""
            files.append({"path": p.name, "size": size, "sha256": digest})
        if sparse:
            stamps = {
                f["path"]: {"key": stamp_key((root / f["path"]).lstat()), "sha256": f["sha256"]}
                for f in files
            }
            stamp.write_text(json.dumps({"version": STAMP_VERSION, "files": stamps}))
        else:
            digests = hash_many([str(root / f["path"]) for f in files])
            for f in files:
                f["sha256"] = digests[str(root / f["path"])]
            _seconds, first = timed(lambda r=root, fl=files, s=stamp: verify_dir(r, fl, s))
            assert first.ok and first.hashed_files == 40
        t, report = best_of(repeat, lambda r=root, fl=files, s=stamp: verify_dir(r, fl, s))
        assert report.ok and report.hashed_files == 0 and report.stamped == 40
        out.append(
            {
                "files": 40,
                "total_bytes": 40 * size,
                "sparse": sparse,
                "rerun_seconds": round(t, 4),
                "hashed_files": report.hashed_files,
            }
        )
        shutil.rmtree(root)
        stamp.unlink()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/var/tmp/verify-bench")
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--mib", type=int, default=320, help="size of each throughput file")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the throughput files")
    args = ap.parse_args()
    workdir = Path(args.dir)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = {
            "python": sys.version.split()[0],
            "openssl": __import__("ssl").OPENSSL_VERSION,
            "sha256sum": subprocess.run(
                ["sha256sum", "--version"], capture_output=True, text=True, check=False
            ).stdout.splitlines()[0],
            "throughput": throughput(workdir, args.files, args.mib, args.repeat),
            "rerun": rerun_cost(workdir, args.repeat),
        }
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
