"""A download through the throttling proxy prints its progress at each poll, without -v:
bytes done of the total, the rate and the ETA (progress.yml: the v1 lock under a root of its
own, polled every 2 s). A --check run before it starts no download; a re-run after it
changes nothing and starts none. About 40-70 s: three plays, one throttled 4 MB download.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from scenario_playbook import run_playbook  # noqa: E402
from testinfra.host import Host

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = Path(__file__).resolve().parents[1]
MODEL_ROOT = "/srv/vllm/models/tiny-progress"
# ok: [host] => (item=1.2 MiB of 4.0 MiB (30.0%), 256.0 KiB/s, ETA 0:00:11)
PROGRESS = re.compile(
    r"^ok: \[[^]]+\] => \(item=(?P<done>[\d.]+ (?:B|KiB|MiB)) of 4\.0 MiB \((?P<pct>[\d.]+)%\), "
    r"(?P<rate>[\d.]+ (?:B|KiB|MiB)/s|rate unknown), ETA (?P<eta>\d+:\d\d:\d\d|unknown)\)$",
    re.MULTILINE,
)


def play(*args: str) -> subprocess.CompletedProcess[str]:
    """progress.yml against the scenario's container, as molecule runs its playbooks."""
    return run_playbook(SCENARIO / "progress.yml", *args, timeout=300)


def recap_changed(out: str) -> int:
    found = re.search(r"changed=(\d+)", out.split("PLAY RECAP", 1)[-1])
    assert found, out
    return int(found.group(1))


def test_a_throttled_download_prints_bytes_rate_and_eta_at_each_poll(host: Host) -> None:
    host.run(f"rm -rf {MODEL_ROOT}")

    check = play("--check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "Report the files a real run would download (check mode)" in check.stdout
    assert not PROGRESS.search(check.stdout), "--check polls no download"
    assert not host.file(f"{MODEL_ROOT}/.staging").exists, "--check downloads nothing"

    run = play()
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    polls: list[dict[str, Any]] = [m.groupdict() for m in PROGRESS.finditer(out)]
    assert len(polls) >= 2, f"one progress line per poll expected:\n{out}"
    with_rate = [p for p in polls if p["rate"] != "rate unknown" and p["eta"] != "unknown"]
    assert with_rate, f"no poll showed a rate and an ETA:\n{out}"
    assert any(0 < float(p["pct"]) < 100 for p in with_rate), f"no mid-download poll:\n{out}"
    percents = [float(p["pct"]) for p in polls]
    assert percents == sorted(percents), percents
    assert polls[-1]["pct"] == "100.0" and polls[-1]["eta"] == "0:00:00", polls[-1]
    assert polls[-1]["done"] == "4.0 MiB"
    assert recap_changed(out) > 0
    assert host.file(f"{MODEL_ROOT}/current").is_symlink

    again = play()
    assert again.returncode == 0, again.stdout + again.stderr
    assert recap_changed(again.stdout) == 0, again.stdout
    assert not PROGRESS.search(again.stdout), "the re-run started a download"
    assert "Start the download of the locked files in the background" not in again.stdout \
        or "ok: [" not in again.stdout.split("Start the download", 1)[1].split("TASK [", 1)[0]
