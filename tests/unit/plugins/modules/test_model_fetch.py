"""model_fetch's download progress: what the background download writes to its progress
file and the role prints at each poll (bytes done of the total, rate, ETA)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.serving.plugins.modules.model_fetch import (
    bytes_done,
    human_bytes,
    human_duration,
    progress_status,
    write_progress,
)

MIB = 1024 * 1024


def test_one_sample_has_no_rate_and_no_eta() -> None:
    status = progress_status([(100.0, 0)], 10 * MIB)
    assert status == {
        "done_bytes": 0,
        "total_bytes": 10 * MIB,
        "percent": 0.0,
        "bytes_per_s": None,
        "eta_s": None,
        "summary": "0 B of 10.0 MiB (0.0%), rate unknown, ETA unknown",
    }


def test_rate_and_eta_from_two_samples() -> None:
    status = progress_status([(0.0, 0), (4.0, 4 * MIB)], 10 * MIB)
    assert status["bytes_per_s"] == MIB
    assert status["eta_s"] == 6
    assert status["percent"] == 40.0
    assert status["summary"] == "4.0 MiB of 10.0 MiB (40.0%), 1.0 MiB/s, ETA 0:00:06"


def test_rate_is_over_the_window_not_since_the_start() -> None:
    # 1 MiB/s for the first minute, then 4 MiB/s: the rate follows the last 30 s only.
    samples = [(float(t), t * MIB) for t in range(0, 61, 2)]
    samples += [(60.0 + t, 60 * MIB + 4 * t * MIB) for t in range(2, 61, 2)]
    status = progress_status(samples, 1000 * MIB)
    assert status["bytes_per_s"] == 4 * MIB
    assert status["eta_s"] == (1000 - 300) // 4
    assert status["summary"].endswith("4.0 MiB/s, ETA 0:02:55")


def test_less_history_than_the_window_uses_the_oldest_sample() -> None:
    status = progress_status([(0.0, 0), (2.0, MIB), (4.0, 3 * MIB)], 7 * MIB, window=30)
    assert status["bytes_per_s"] == 3 * MIB // 4
    assert status["eta_s"] == 6  # ceil(4 MiB / 0.75 MiB/s) = ceil(5.33)


def test_unknown_total_has_a_rate_but_no_percent_and_no_eta() -> None:
    for total in (None, 0):
        status = progress_status([(0.0, 0), (10.0, 5 * MIB)], total)
        assert status["total_bytes"] is None and status["percent"] is None
        assert status["eta_s"] is None
        assert status["bytes_per_s"] == MIB // 2
        assert status["summary"] == "5.0 MiB of an unknown total, 512.0 KiB/s, ETA unknown"


def test_stalled_or_shrinking_download_has_zero_rate_and_no_eta() -> None:
    stalled = progress_status([(0.0, MIB), (10.0, MIB)], 2 * MIB)
    assert stalled["bytes_per_s"] == 0 and stalled["eta_s"] is None
    assert "0 B/s, ETA unknown" in stalled["summary"]
    # A partial file cleaned away: fewer bytes than before, never a negative rate.
    shrunk = progress_status([(0.0, 2 * MIB), (10.0, MIB)], 4 * MIB)
    assert shrunk["bytes_per_s"] == 0 and shrunk["eta_s"] is None


def test_done_is_capped_at_the_total_and_the_eta_is_zero() -> None:
    status = progress_status([(0.0, 0), (2.0, 12 * MIB)], 10 * MIB)
    assert status["done_bytes"] == 10 * MIB and status["percent"] == 100.0
    assert status["eta_s"] == 0
    assert status["summary"] == "10.0 MiB of 10.0 MiB (100.0%), 6.0 MiB/s, ETA 0:00:00"


def test_samples_are_required() -> None:
    with pytest.raises(ValueError, match="at least one sample"):
        progress_status([], 1)


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
     (135 * 1024**3 + 400 * MIB, "135.4 GiB"), (3 * 1024**5, "3.0 PiB"),
     (5 * 1024**6, "5120.0 PiB")],
)
def test_human_bytes(n: int, text: str) -> None:
    assert human_bytes(n) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0:00:00"), (59.6, "0:01:00"), (3725, "1:02:05"), (100 * 3600, "100:00:00"),
     (-5, "0:00:00")],
)
def test_human_duration(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def test_bytes_done_counts_finished_files_capped_and_partial_files(tmp_path: Path) -> None:
    files = [{"path": "a.bin", "size": 10}, {"path": "sub/b.bin", "size": 5},
             {"path": "missing.bin", "size": 7}]
    (tmp_path / "a.bin").write_bytes(b"x" * 10)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub/b.bin").write_bytes(b"x" * 9)  # over its size: counts 5
    partial = tmp_path / ".cache/huggingface/download/sub"
    partial.mkdir(parents=True)
    (partial / "missing.bin.0123.incomplete").write_bytes(b"x" * 3)
    assert bytes_done(tmp_path, files) == 10 + 5 + 3


def test_write_progress_replaces_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "c.progress"
    path.write_text("old, half-written")
    write_progress(str(path), progress_status([(0.0, 0), (2.0, MIB)], 2 * MIB))
    data = json.loads(path.read_text())
    assert data["done_bytes"] == MIB and data["eta_s"] == 2 and isinstance(data["time"], int)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.progress"]
    # An unwritable place is no error: progress is best effort.
    write_progress(str(tmp_path / "no/such/dir/p"), {"done_bytes": 0})
