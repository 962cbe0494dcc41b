#!/usr/bin/python3
"""A steady stream of completions through the gateway until a stop file appears.

Bounded: at most --max-seconds and --max-requests, two workers, requests to 127.0.0.1
only; a worker pauses --pause seconds after an answered request and half a second after a
failed one. Steady, not saturating: each worker sends a request every ~0.3 s, so every phase
of a restart meets requests, while the CPU engine leaves the test machine's other lane
room (back to back, two workers kept both cores busy for the whole scenario). Writes
{"ok": N, "failed": N, "status": {code: N}, "errors": [...]} to --out.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8080/v1/completions")
    parser.add_argument("--model", default="tiny-qwen2")
    parser.add_argument("--key", default="", help="API key (Authorization: Bearer)")
    parser.add_argument("--stop", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-seconds", type=float, default=600)
    parser.add_argument("--max-requests", type=int, default=5000)
    parser.add_argument("--pause", type=float, default=0.25,
                        help="seconds a worker waits after an answered request")
    args = parser.parse_args()
    counts = {"ok": 0, "failed": 0}
    status: dict[str, int] = {}
    errors: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + args.max_seconds
    body = json.dumps({"model": args.model, "prompt": "hello " * 16, "max_tokens": 16,
                       "ignore_eos": True}).encode()

    headers = {"Content-Type": "application/json"}
    if args.key:
        headers["Authorization"] = f"Bearer {args.key}"

    def worker() -> None:
        while (not args.stop.exists() and time.monotonic() < deadline
               and counts["ok"] + counts["failed"] < args.max_requests):
            request = urllib.request.Request(args.url, data=body, headers=headers)
            code = "none"
            try:
                with urllib.request.urlopen(request, timeout=120) as response:
                    json.loads(response.read())
                    code = str(response.status)
                outcome, error = "ok", ""
            except urllib.error.HTTPError as exc:
                code = str(exc.code)
                outcome, error = "failed", f"{time.strftime('%H:%M:%S')} {exc}"
            except (OSError, urllib.error.URLError, ValueError) as exc:
                outcome, error = "failed", f"{time.strftime('%H:%M:%S')} {exc}"
            with lock:
                counts[outcome] += 1
                status[code] = status.get(code, 0) + 1
                if error and len(errors) < 20:
                    errors.append(error)
            time.sleep(0.5 if error else args.pause)

    threads = [threading.Thread(target=worker) for _worker in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    args.out.write_text(json.dumps({**counts, "status": status, "errors": errors}))


if __name__ == "__main__":
    main()
