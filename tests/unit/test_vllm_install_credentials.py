"""Package-index credentials of roles/vllm_install never reach a command line or a log
(issue 20, item 4).

The role's own install tasks (tasks/packages.yml, installed.yml and finish_install.yml, in
the main entry point's order; the host-level ones left out: apt, the service user) run with
a real ansible-playbook against this machine (connection local) in a
scratch root, and really install: pip installs uv, then uv installs a small "engine" and a
"prebuilt kernel", from a local package index that requires HTTP basic auth, with canary
passwords in vllm_install_uv_index_url and vllm_install_prebuilt_kernels_index_urls. While
it runs, a sampler reads every process's command line (what ps shows) and environment; the
canaries must be in none of them and not in the -vvv output, and the index must have
answered authenticated requests (pip and uv read the credentials from the role's files)."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import os
import re
import stat
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _scripts import ROOT, ansible_env
from test_plan_playbook import PLAYBOOK

ROLE = ROOT / "roles/vllm_install"
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
UV_VERSION = DEFAULTS["vllm_install_uv_version"]
# (user, password) of the default index and of the kernel index (two servers, as two hosts
# would be: uv keys credentials by scheme, host and port).
MAIN = ("canary-user", "CANARY-PASSWORD-123")
KERNELS = ("kernel-user", "KERNEL-CANARY-456")
CANARIES = [MAIN[1].encode(), KERNELS[1].encode()]

# The role's install tasks the run takes, in the role's order (the others change the host:
# apt, the service user and group).
TASKS = [
    "Check the prebuilt kernel pins and their indexes",
    "Check the package sources",
    "Create the directories",
    "Write the pip constraints",
    "Write the package sources of the install (root only, no_log)",
    "Install the script that installs the engine with uv",
    "Wait for any install in progress, then read the engine and kernel versions and the "
    "unwanted packages",
    "Decide whether the pinned vLLM must be installed",
    "Report the install a real run would do (check mode)",
    "Install the pinned vLLM into the virtual environment",
]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the role writes its files as root:root (CI runs as root)")


def wheel(name: str, version: str) -> tuple[str, bytes]:
    """A minimal pure-Python wheel of NAME==VERSION: its file name and bytes."""
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    files = {f"{module}/__init__.py": b"",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                 .encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              b"Tag: py3-none-any\n"}
    record = "".join(
        f"{path},sha256="
        f"{base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
        f"{len(data)}\n" for path, data in files.items()) + f"{info}/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in {**files, f"{info}/RECORD": record.encode()}.items():
            archive.writestr(path, data)
    return f"{module}-{version}-py3-none-any.whl", buffer.getvalue()


class Index(http.server.ThreadingHTTPServer):
    """A PEP 503 index (/simple/NAME/, files under /files/) behind basic auth with
    CREDENTIALS. ``requests`` records (path, authorized) of every request."""

    def __init__(self, credentials: tuple[str, str], wheels: dict[str, bytes]) -> None:
        self.credentials = credentials
        self.wheels = wheels
        self.requests: list[tuple[str, bool]] = []
        super().__init__(("127.0.0.1", 0), IndexHandler)
        self.port = self.server_address[1]
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class IndexHandler(http.server.BaseHTTPRequestHandler):
    server: Index

    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        path = self.path.split("?")[0]
        token = base64.b64encode(":".join(self.server.credentials).encode()).decode()
        authorized = self.headers.get("Authorization") == f"Basic {token}"
        self.server.requests.append((path, authorized))
        if not authorized:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="test index"')
            self.end_headers()
            return
        files = self.server.wheels
        parts = path.strip("/").split("/")
        if parts[0] == "simple" and len(parts) == 2:
            found = [name for name in files
                     if re.sub(r"[-_.]+", "-", name.split("-")[0]).lower() == parts[1]]
            body = "".join(f'<a href="/files/{name}#sha256='
                           f'{hashlib.sha256(files[name]).hexdigest()}">{name}</a>\n'
                           for name in found).encode()
            self.answer(200 if found else 404, body, "text/html")
        elif parts[0] == "files" and len(parts) == 2 and parts[1] in files:
            self.answer(200, files[parts[1]], "application/octet-stream")
        else:
            self.answer(404, b"", "text/plain")

    def do_HEAD(self) -> None:  # noqa: N802  (uv asks whether ranges work; they don't here)
        self.answer(405, b"", "text/plain")

    def answer(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


class Sampler(threading.Thread):
    """Reads every process's command line and environment until stopped: where a canary
    appears (``leaks``) and the command lines seen (``seen``)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.leaks: set[str] = set()
        self.seen: set[bytes] = set()
        self.rounds = 0

    def run(self) -> None:
        while not self.stop.is_set():
            for pid in (entry for entry in os.listdir("/proc") if entry.isdigit()):
                for what in ("cmdline", "environ"):
                    try:
                        data = Path(f"/proc/{pid}/{what}").read_bytes()
                    except OSError:  # gone meanwhile
                        continue
                    if what == "cmdline":
                        self.seen.add(data)
                    if any(canary in data for canary in CANARIES):
                        self.leaks.add(f"{what} of pid {pid}")
            self.rounds += 1
            time.sleep(0.02)


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Index, Index]]:
    """The default index, serving uv (PyPI's wheel: pip installs it) and canary-engine 1.0,
    and the kernel index, serving canary-kernel 1.0."""
    download = tmp_path_factory.mktemp("uv")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary",
         ":all:", "--dest", str(download), f"uv=={UV_VERSION}"],
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"pip download uv=={UV_VERSION} (PyPI or pip's cache): " \
                                   f"{result.stderr[-2000:]}"
    wheels = sorted(download.glob("uv-*.whl"))
    assert wheels, f"pip download uv=={UV_VERSION} left no uv wheel in {download}"
    uv_wheel = wheels[0]
    main = Index(MAIN, {uv_wheel.name: uv_wheel.read_bytes(),
                        **dict([wheel("canary-engine", "1.0")])})
    kernels = Index(KERNELS, dict([wheel("canary-kernel", "1.0")]))
    yield main, kernels
    main.close()
    kernels.close()


def role_tasks() -> list[dict[str, Any]]:
    tasks = {task["name"]: task
             for file in ("validate.yml", "packages.yml", "installed.yml", "finish_install.yml")
             for task in yaml.safe_load((ROLE / "tasks" / file).read_text())}
    chosen = [tasks[name] for name in TASKS]
    for task in chosen:  # the role's files by absolute path (this play is outside the role)
        managed = task.get("vllm_fleet.serving.managed_file", {})
        if "src" in managed:
            managed["src"] = str(ROLE / "files" / managed["src"])
    return chosen


def play(tmp: Path, indexes: tuple[Index, Index], *args: str) -> subprocess.CompletedProcess[str]:
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "vllm_install_root": str(tmp / "srv"), "vllm_server_config_dir": str(tmp / "etc"),
            "vllm_install_user": "root", "vllm_install_group": "root",
            "vllm_install_package": "canary-engine", "vllm_install_version": "1.0",
            "vllm_install_prebuilt_kernels": ["canary-kernel==1.0"],
            "vllm_install_uv_index_url":
                f"http://{MAIN[0]}:{MAIN[1]}@127.0.0.1:{indexes[0].port}/simple",
            "vllm_install_prebuilt_kernels_index_urls":
                [f"http://{KERNELS[0]}:{KERNELS[1]}@127.0.0.1:{indexes[1].port}/simple"]}
    inventory = {"all": {"vars": DEFAULTS, "hosts": {"engine": host}}}
    playbook = [{"name": "The role's install", "hosts": "all", "gather_facts": False,
                 "vars_files": [str(ROLE / "vars/main.yml")], "tasks": role_tasks()}]
    (tmp / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp / "play.yml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    return subprocess.run(
        [PLAYBOOK, "-i", str(tmp / "hosts.yml"), str(tmp / "play.yml"), *args],
        cwd=ROOT, env=ansible_env(), capture_output=True, text=True, timeout=300,
        check=False)


def recap(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout[result.stdout.rindex("PLAY RECAP"):]


def test_index_credentials_reach_pip_and_uv_only_through_root_only_files(
        tmp_path: Path, indexes: tuple[Index, Index]) -> None:
    root = tmp_path / "srv"

    # Check mode on a fresh host: nothing written, the install reported, and the diff of the
    # files it would write hidden (no_log).
    checked = play(tmp_path, indexes, "--check", "--diff", "-vvv")
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert not root.exists()
    assert "would install canary-engine==1.0" in checked.stdout
    assert not any(canary.decode() in checked.stdout + checked.stderr for canary in CANARIES)

    sampler = Sampler()
    sampler.start()
    try:
        result = play(tmp_path, indexes, "-vvv")
    finally:
        sampler.stop.set()
        sampler.join()
    assert result.returncode == 0, result.stdout[-5000:]

    # The sampler saw the install's processes (so it would have seen a canary there) ...
    assert any(b"vllm-install" in cmdline for cmdline in sampler.seen), sampler.rounds
    assert any(b"uv\0pip\0install" in cmdline for cmdline in sampler.seen), sampler.rounds
    # ... and the canaries were on no command line, in no environment, in no output.
    output = result.stdout + result.stderr
    assert "PIP_CONFIG_FILE=" in output  # -vvv shows the environment the module ran with
    in_output = [canary.decode() for canary in CANARIES if canary.decode() in output]
    assert (sorted(sampler.leaks), in_output) == ([], [])

    # pip (uv's wheel) and uv (the engine, the kernel) authenticated with the credentials.
    main, kernels = ({path for path, ok in index.requests if ok} for index in indexes)
    assert {"/simple/uv/", "/simple/canary-engine/",
            "/files/canary_engine-1.0-py3-none-any.whl"} <= main, indexes[0].requests
    assert any(path.startswith("/files/uv-") for path in main)
    assert {"/simple/canary-kernel/", "/files/canary_kernel-1.0-py3-none-any.whl"} <= kernels, \
        indexes[1].requests
    probe = subprocess.run(
        [str(root / "venv/bin/python"), "-c",
         "import importlib.metadata as m; print(m.version('canary-engine'),"
         " m.version('canary-kernel'))"],
        capture_output=True, text=True, timeout=60, check=False)
    assert probe.stdout.split() == ["1.0", "1.0"], probe.stderr

    # The only copies: root-only files in a root-only directory.
    assert stat.S_IMODE((root / "installer").stat().st_mode) == 0o700
    for name in ("pip.conf", "uv.toml"):
        info = (root / "installer" / name).stat()
        assert (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (0o600, 0, 0)
    assert MAIN[1] in (root / "installer/pip.conf").read_text()
    assert KERNELS[1] in (root / "installer/uv.toml").read_text()

    # Idempotent: a second run changes nothing (the files' bytes are the same).
    again = play(tmp_path, indexes)
    assert again.returncode == 0, again.stdout[-3000:]
    assert "changed=0" in recap(again), recap(again)
