"""ansible.cfg's SSH settings: keepalives on top of Ansible's own default ssh_args, so a long
quiet task (a model download's poll, an install's bounded wait) keeps its connection through
firewalls and NATs that cut idle sessions."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

import yaml
from ansible.plugins.connection import ssh

ROOT = Path(__file__).resolve().parents[2]


def ssh_connection() -> configparser.SectionProxy:
    cfg = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=None)
    cfg.read(ROOT / "ansible.cfg")
    return cfg["ssh_connection"]


def options(args: str) -> dict[str, str]:
    """`-o Key=Value` pairs of an ssh_args string."""
    words = shlex.split(args)
    pairs = [words[i + 1] for i, word in enumerate(words) if word == "-o"]
    return dict(pair.split("=", 1) for pair in pairs)


def test_ssh_args_set_keepalives() -> None:
    opts = options(ssh_connection()["ssh_args"])
    interval, count = int(opts["ServerAliveInterval"]), int(opts["ServerAliveCountMax"])
    assert 0 < interval <= 60, "a probe at least every minute"
    assert 2 <= count and interval * count <= 300, "a dead host is noticed within 5 minutes"


def test_ssh_args_keep_ansibles_defaults() -> None:
    """Setting ssh_args replaces Ansible's default: every default word must still be there
    (ControlMaster/ControlPersist: one SSH connection per host, reused by each task)."""
    default = yaml.safe_load(ssh.DOCUMENTATION)["options"]["ssh_args"]["default"]
    ours = ssh_connection()["ssh_args"]
    assert ours.startswith(default + " "), (ours, default)
    assert {"ControlMaster", "ControlPersist"} <= set(options(ours))
    assert ssh_connection().getboolean("pipelining")
