"""HTTP from inside a test host, for the testinfra checks of the scenarios (the test hosts
have no curl): the host's system Python runs one request and prints status and body."""

from __future__ import annotations

import json
from typing import Any

from testinfra.host import Host

_REQUEST = r"""
import json, sys, urllib.request, urllib.error
method, url, key, body = sys.argv[1:5]
req = urllib.request.Request(url, data=body.encode() if body else None, method=method)
req.add_header("Content-Type", "application/json")
if key:
    req.add_header("Authorization", "Bearer " + key)
try:
    with urllib.request.urlopen(req, timeout=120) as r:
        print(json.dumps({"status": r.status, "body": r.read().decode()}))
except urllib.error.HTTPError as e:
    print(json.dumps({"status": e.code, "body": e.read().decode()}))
except OSError as e:
    print(json.dumps({"status": 0, "body": str(e)}))
"""


def request_in_host(host: Host, url: str, body: dict[str, Any] | None = None,
                    key: str = "") -> tuple[int, str]:
    """GET (no body) or POST a JSON body to url from inside host; status 0: no connection."""
    cmd = host.run("python3 -c %s %s %s %s %s", _REQUEST, "POST" if body else "GET", url,
                   key, json.dumps(body) if body else "")
    assert cmd.rc == 0, cmd.stderr
    out = json.loads(cmd.stdout)
    return int(out["status"]), str(out["body"])
