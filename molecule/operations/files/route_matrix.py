"""Send each vLLM route, with and without the API key, to the given base URLs and print one
JSON line per request: {"base", "path", "key", "status"} (status 0: no connection).

Usage: route_matrix.py KEY [--paths P1,P2] BASE_URL... Runs on the engine host and in a
second container on the test network (the outside world); the standard library only.
--paths limits the routes (the host's own test spares the replica the state-changing ones)."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request

MODEL = "tiny-qwen2"
# (method, path, JSON body): the OpenAI routes the gateway serves, its open /health, and
# routes vLLM 0.32 serves that clients must not reach.
ROUTES: list[tuple[str, str, dict[str, object] | None]] = [
    ("GET", "/v1/models", None),
    ("POST", "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2}),
    ("POST", "/v1/chat/completions",
     {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}),
    ("GET", "/health", None),
    ("POST", "/invocations", {"model": MODEL, "prompt": "hi", "max_tokens": 2}),
    ("POST", "/tokenize", {"model": MODEL, "prompt": "hi"}),
    ("POST", "/detokenize", {"model": MODEL, "tokens": [1, 2]}),
    ("GET", "/metrics", None),
    ("POST", "/scale_elastic_ep", {"new_data_parallel_size": 1}),
    ("GET", "/docs", None),
    ("GET", "/openapi.json", None),
    ("GET", "/version", None),
    ("POST", "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/tmp"}),
    ("GET", "/metrics/vllm-0", None),
    ("GET", "/metrics/haproxy", None),  # the gateway's own exporter (metrics port only)
]


def status(method: str, url: str, body: dict[str, object] | None, key: str) -> int:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


def main() -> None:
    key, bases = sys.argv[1], sys.argv[2:]
    only: set[str] = set()
    if bases[:1] == ["--paths"]:
        only, bases = set(bases[1].split(",")), bases[2:]
    for base in bases:
        for method, path, body in ROUTES:
            if only and path not in only:
                continue
            for sent in ("", "wrong-key", key):
                print(json.dumps({"base": base, "path": path, "key": sent,
                                  "status": status(method, base + path, body, sent)}))


if __name__ == "__main__":
    main()
