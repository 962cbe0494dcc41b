"""The nvidia_driver role's NVIDIA-repository source (R580) for Debian 12/13, Ubuntu
22.04/24.04 and Rocky 9, x86_64 and aarch64 (NVIDIA's repository cannot be reached here): the
plan filter, the role's own templates, real apt reading the rendered deb822 and preferences
files against a local stand-in repository served over HTTP (index URL, the 600 pin, the
plan's exact-version pins resolved by apt), and dnf's own config parser (libdnf) reading the
rendered .repo file."""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import pytest
from ansible.plugins.filter.urlsplit import split_url

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "nvidia_driver"

_spec = importlib.util.spec_from_file_location(
    "nvidia_driver_plan", ROOT / "filter_plugins" / "nvidia_driver_plan.py")
assert _spec and _spec.loader
plan_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plan_mod)

UBUNTU_2204 = {"distribution": "Ubuntu", "distribution_version": "22.04",
               "distribution_major_version": "22", "distribution_release": "jammy",
               "os_family": "Debian", "architecture": "x86_64"}
UBUNTU_2404 = {"distribution": "Ubuntu", "distribution_version": "24.04",
               "distribution_major_version": "24", "distribution_release": "noble",
               "os_family": "Debian", "architecture": "x86_64"}
ROCKY_9 = {"distribution": "Rocky", "distribution_version": "9.4",
           "distribution_major_version": "9", "distribution_release": "Blue Onyx",
           "os_family": "RedHat", "architecture": "x86_64"}
DEBIAN_12 = {"distribution": "Debian", "distribution_version": "12.15",
             "distribution_major_version": "12", "distribution_release": "bookworm",
             "os_family": "Debian", "architecture": "x86_64"}
DEBIAN_13 = dict(DEBIAN_12, distribution_version="13.2", distribution_major_version="13",
                 distribution_release="trixie")
UBUNTU_2404_ARM = dict(UBUNTU_2404, architecture="aarch64")
DEBIAN_13_ARM = dict(DEBIAN_13, architecture="aarch64")
NVIDIA = "https://developer.download.nvidia.com/compute/cuda/repos"


def plan(facts: dict[str, str], **kwargs: Any) -> dict[str, Any]:
    result: dict[str, Any] = plan_mod.nvidia_driver_plan(facts, **kwargs)
    return result


def render(template: str, the_plan: dict[str, Any], ca_bundle: str = "",
           engine_cuda: str = "") -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROLE / "templates"), trim_blocks=True,
        keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters["urlsplit"] = split_url
    return env.get_template(template).render(
        _nvidia_driver_plan=the_plan, nvidia_driver_ca_bundle=ca_bundle,
        nvidia_driver_engine_cuda=engine_cuda,
        ansible_managed="Ansible managed")


V = "580.105.08"
# (facts, repository directory/arch, kernel module package, packages, fabric manager names)
R580: list[tuple[dict[str, str], str, str, list[str], list[str]]] = [
    (DEBIAN_12, "debian12/x86_64", "nvidia-kernel-open-dkms",
     ["nvidia-kernel-open-dkms", "nvidia-driver-cuda", "nvidia-persistenced"],
     ["nvidia-fabricmanager", "libnvidia-nscq"]),
    (DEBIAN_13, "debian13/x86_64", "nvidia-kernel-open-dkms",
     ["nvidia-kernel-open-dkms", "nvidia-driver-cuda", "nvidia-persistenced"],
     ["nvidia-fabricmanager", "libnvidia-nscq"]),
    (DEBIAN_13_ARM, "debian13/sbsa", "nvidia-kernel-open-dkms",
     ["nvidia-kernel-open-dkms", "nvidia-driver-cuda", "nvidia-persistenced"],
     ["nvidia-fabricmanager", "libnvidia-nscq"]),
    (UBUNTU_2204, "ubuntu2204/x86_64", "nvidia-dkms-580-open",
     ["nvidia-dkms-580-open", "libnvidia-compute-580", "nvidia-utils-580",
      "nvidia-compute-utils-580"],
     ["nvidia-fabricmanager-580", "libnvidia-nscq-580"]),
    (UBUNTU_2404, "ubuntu2404/x86_64", "nvidia-dkms-580-open",
     ["nvidia-dkms-580-open", "libnvidia-compute-580", "nvidia-utils-580",
      "nvidia-compute-utils-580"],
     ["nvidia-fabricmanager-580", "libnvidia-nscq-580"]),
    (UBUNTU_2404_ARM, "ubuntu2404/sbsa", "nvidia-dkms-580-open",
     ["nvidia-dkms-580-open", "libnvidia-compute-580", "nvidia-utils-580",
      "nvidia-compute-utils-580"],
     ["nvidia-fabricmanager-580", "libnvidia-nscq-580"]),
    (ROCKY_9, "rhel9/x86_64", "kmod-nvidia-open-dkms",
     ["kmod-nvidia-open-dkms", "nvidia-driver-cuda", "nvidia-persistenced"],
     ["nvidia-fabricmanager", "libnvidia-nscq"]),
]
IDS = ["debian12", "debian13", "debian13-arm", "ubuntu2204", "ubuntu2404", "ubuntu2404-arm",
       "rocky9"]


def test_the_default_is_nvidia_repo_r580_and_auto_is_its_alias() -> None:
    assert plan_mod.NVIDIA_REPO_DEFAULT_VERSION == V
    for facts in (DEBIAN_13, UBUNTU_2204, ROCKY_9):
        default, auto = plan(facts), plan(facts, source="auto")
        assert (default["source"], default["version"], default["branch"]) == (
            "nvidia_repo", V, 580)
        assert auto == default
        assert default["max_cuda"] == "13.0"


@pytest.mark.parametrize(("facts", "where", "kmod", "names", "fabric"), R580, ids=IDS)
def test_r580_packages_pins_and_fabric_manager_per_distro(
        facts: dict[str, str], where: str, kmod: str, names: list[str],
        fabric: list[str]) -> None:
    family = "dnf" if facts["os_family"] == "RedHat" else "apt"
    pin = (lambda n: f"{n}={V}-*") if family == "apt" else (lambda n: f"{n}-{V}")
    p = plan(facts)
    assert p["error"] == ""
    assert (p["family"], p["kernel_modules"], p["module_name"]) == (family, "open", "nvidia")
    assert p["repo"]["url"] == f"{NVIDIA}/{where}/"
    assert p["repo"]["key_url"] == f"{NVIDIA}/{where}/" + (
        "3bf863cc.pub" if family == "apt" else "D42D0685.pub")
    assert p["packages"] == [pin(n) for n in names]
    assert p["kernel_module_pins"] == [pin(kmod)]
    assert p["holds"] == names
    assert p["fabricmanager_packages"] == []  # no NVSwitch, no fabric manager
    assert p["dcgm_packages"] == ["datacenter-gpu-manager-4-cuda13"]
    assert p["dnf_module"] == ("nvidia-driver:580-open" if family == "dnf" else "")
    hgx = plan(facts, nvswitches=4)
    assert hgx["fabricmanager_packages"] == [pin(n) for n in fabric]  # exactly the driver's
    assert hgx["holds"] == names + fabric  # held / versionlocked with the driver
    proprietary = plan(facts, kernel_modules="proprietary")
    assert proprietary["kernel_module_packages"] == [{
        "nvidia-kernel-open-dkms": "nvidia-kernel-dkms", "nvidia-dkms-580-open": "nvidia-dkms-580",
        "kmod-nvidia-open-dkms": "kmod-nvidia-latest-dkms"}[kmod]]


def test_debian_sources_and_packages() -> None:
    p = plan(DEBIAN_13, source="debian")
    assert (p["source"], p["version"], p["module_name"], p["max_cuda"]) == (
        "debian", "550.163.01", "nvidia-current-open", "12.4")
    assert p["holds"] == ["nvidia-open-kernel-dkms", "nvidia-driver", "firmware-nvidia-gsp",
                          "nvidia-smi", "nvidia-persistenced"]
    assert p["packages"][0] == "nvidia-open-kernel-dkms=550.163.01-*"
    text = render("debian-nonfree.sources.j2", p)
    assert "Suites: trixie trixie-updates\n" in text
    assert "Components: contrib non-free non-free-firmware\n" in text
    old = plan(DEBIAN_12, source="debian")
    assert (old["version"], old["max_cuda"]) == ("535.261.03", "12.2")


def test_cuda_compat_package_and_linker_file() -> None:
    p = plan(UBUNTU_2404, cuda_compat=True, engine_cuda="13.1")
    assert p["compat_packages"] == ["cuda-compat-13-1"]
    assert p["compat_dir"] == "/usr/local/cuda-13.1/compat"
    assert render("cuda-compat.conf.j2", p, engine_cuda="13.1").splitlines()[-1] == (
        "/usr/local/cuda-13.1/compat")
    assert plan(ROCKY_9, cuda_compat=True, engine_cuda="13.0")["compat_packages"] == [
        "cuda-compat-13-0"]
    off = plan(UBUNTU_2404, engine_cuda="13.0")
    assert (off["compat_packages"], off["compat_dir"]) == ([], "")


def test_ubuntu_2404_arm_mirror_and_ca_bundle() -> None:
    p = plan(UBUNTU_2404_ARM, mirror_url="https://mirror.example.internal/cuda/repos/",
             dcgm=False, kernel_modules="proprietary")
    assert p["repo"]["url"] == "https://mirror.example.internal/cuda/repos/ubuntu2404/sbsa/"
    assert p["repo"]["key_url"].endswith("/ubuntu2404/sbsa/3bf863cc.pub")
    assert p["packages"][:2] == [f"nvidia-dkms-580={V}-*", f"libnvidia-compute-580={V}-*"]
    assert p["dcgm_packages"] == []
    assert render("apt-ca.conf.j2", p, "/etc/ssl/proxy-ca.pem").splitlines()[-1] == (
        'Acquire::https::mirror.example.internal::CAInfo "/etc/ssl/proxy-ca.pem";')
    assert "URIs: https://mirror.example.internal/cuda/repos/ubuntu2404/sbsa/\n" in render(
        "nvidia-cuda.sources.j2", p)
    assert "Pin: origin mirror.example.internal\n" in render("nvidia-cuda.pref.j2", p)


def test_rocky_9_repository_file() -> None:
    p = plan(ROCKY_9)
    text = render("nvidia-cuda.repo.j2", p)
    assert text.splitlines()[2:] == [
        "[cuda-rhel9-x86_64]", "name=cuda-rhel9-x86_64", f"baseurl={NVIDIA}/rhel9/x86_64/",
        "enabled=1", "gpgcheck=1", "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-cuda"]
    with_ca = render("nvidia-cuda.repo.j2", p, "/etc/pki/tls/certs/proxy-ca.pem")
    assert with_ca.splitlines()[-1] == "sslcacert=/etc/pki/tls/certs/proxy-ca.pem"
    assert plan(ROCKY_9, kernel_modules="proprietary")["dnf_module"] == "nvidia-driver:580-dkms"


@pytest.mark.parametrize(("facts", "kwargs", "needle"), [
    ({**UBUNTU_2204, "distribution_version": "20.04", "distribution_major_version": "20"}, {},
     "not Ubuntu 20.04 x86_64. Fix:"),
    ({**UBUNTU_2204, "distribution_version": "24.10", "distribution_major_version": "24"}, {},
     "not Ubuntu 24.10 x86_64. Fix:"),
    ({**DEBIAN_13, "architecture": "ppc64le"}, {},
     "or nvidia_driver_source: debian (Debian 12/13's own driver)"),
    ({**DEBIAN_13, "distribution_major_version": "11", "distribution_version": "11.9"}, {},
     "Debian 12/13, Ubuntu 22.04/24.04 and RHEL/Rocky 9 on x86_64/aarch64, not Debian 11.9"),
    (ROCKY_9, {"version": "latest"},
     "nvidia_driver_version: 'latest' is not a driver version. Fix:"),
    (UBUNTU_2204, {"source": "debian"}, "supported on Debian 12/13, not on Ubuntu 22.04. Fix:"),
    (DEBIAN_13, {"source": "debian", "nvswitches": 4},
     "4 NVSwitches, which need NVIDIA Fabric Manager"),
    (DEBIAN_13, {"source": "ppa"}, "nvidia_driver_source: 'ppa' is not a source"),
    (DEBIAN_13, {"source": "debian", "cuda_compat": True, "engine_cuda": "13.0"},
     "nvidia_driver_cuda_compat: true needs NVIDIA's cuda-compat package, which only NVIDIA's "
     "CUDA repository has; nvidia_driver_source is debian. Fix: set nvidia_driver_source: "
     "nvidia_repo"),
    (UBUNTU_2404, {"cuda_compat": True},
     "nvidia_driver_engine_cuda is empty. Fix: run the plan"),
    (UBUNTU_2404, {"engine_cuda": "cu130"},
     "nvidia_driver_engine_cuda: 'cu130' is not a CUDA major.minor. Fix:"),
])
def test_refusals_name_the_variable_and_fix(
        facts: dict[str, str], kwargs: dict[str, Any], needle: str) -> None:
    assert needle in plan(facts, **kwargs)["error"]


H200_X4 = {"min_driver_branch": 550, "gpus": [{"model": "H200"}] * 4}


def test_branch_problem() -> None:
    refuse = plan_mod.nvidia_driver_branch_problem
    assert refuse(plan(DEBIAN_13, source="debian"), H200_X4) == ""
    assert refuse(plan(DEBIAN_12), H200_X4) == ""  # the default: NVIDIA's R580 on Debian 12
    message = refuse(plan(DEBIAN_12, source="debian"), H200_X4)
    assert "(4 x H200) need driver branch R550 or newer" in message
    assert ("Fix: set nvidia_driver_source: nvidia_repo with nvidia_driver_version R550 or "
            f"newer (empty = {V}, R580) on Debian 12/13") in message
    assert "use Debian 13 (trixie), which packages 550.163.01" in message
    repo_old = refuse(plan(UBUNTU_2204, version="535.216.03"), H200_X4)
    assert "is R535" in repo_old and "Debian 13" not in repo_old
    assert refuse(plan(DEBIAN_12, source="debian"), {"min_driver_branch": None, "gpus": []}) == ""
    h100 = {"min_driver_branch": 525, "gpus": [{"model": "H100-SXM"}]}
    assert refuse(plan(DEBIAN_12, source="debian"), h100) == ""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def web_root(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A local HTTP server: the stand-in for NVIDIA's repository (and a distribution's)."""
    root = tmp_path / "www"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _stanzas(names: list[str], version: str, arch: str) -> str:
    return "".join(f"Package: {n}\nVersion: {version}\nArchitecture: {arch}\n"
                   f"Filename: ./{n}.deb\nSize: 1\nDescription: stand-in\n\n" for n in names)


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt (Debian/Ubuntu host)")
@pytest.mark.parametrize(("facts", "where", "kmod", "names", "fabric"),
                         [r for r in R580 if r[0]["os_family"] == "Debian"],
                         ids=[i for i, r in zip(IDS, R580, strict=True)
                              if r[0]["os_family"] == "Debian"])
def test_apt_reads_the_rendered_sources_and_pin_and_resolves_the_plan(
        tmp_path: Path, web_root: tuple[Path, int], facts: dict[str, str], where: str,
        kmod: str, names: list[str], fabric: list[str]) -> None:
    """Real apt: the rendered deb822 file (a mirror URL, as air-gapped sites set) and the
    preferences file, against a stand-in of NVIDIA's repository carrying the plan's packages
    at 580.105.08-1 and a stand-in distribution archive carrying the same names at a HIGHER
    version: the 600 pin must make NVIDIA's build the candidate, and apt must resolve every
    exact-version pin of the plan (fabric manager included) from it."""
    root, port = web_root
    arch = "arm64" if facts["architecture"] == "aarch64" else "amd64"
    p = plan(facts, mirror_url=f"http://127.0.0.1:{port}/repos", nvswitches=4, dcgm=False)
    assert p["repo"]["url"] == f"http://127.0.0.1:{port}/repos/{where}/"
    every = names + fabric
    (root / "repos" / where).mkdir(parents=True)
    (root / "repos" / where / "Packages").write_text(_stanzas(every, f"{V}-1", arch))
    (root / "distro").mkdir()
    (root / "distro" / "Packages").write_text(_stanzas(every, "999.1-1", arch))
    parts, prefs = tmp_path / "sources.list.d", tmp_path / "preferences.d"
    parts.mkdir()
    prefs.mkdir()
    (parts / "nvidia-cuda.sources").write_text(render("nvidia-cuda.sources.j2", p))
    # the distribution stand-in: another host name, so the origin pin must tell them apart
    (parts / "distro.sources").write_text(
        f"Types: deb\nURIs: http://localhost:{port}/distro/\nSuites: /\nTrusted: yes\n")
    (prefs / "nvidia-cuda.pref").write_text(render("nvidia-cuda.pref.j2", p))
    for sub in ("lists/partial", "cache/archives/partial"):
        (tmp_path / sub).mkdir(parents=True)
    options = [
        "-o", "Dir::Etc::SourceList=/dev/null", "-o", f"Dir::Etc::SourceParts={parts}",
        "-o", "Dir::Etc::Preferences=/dev/null", "-o", f"Dir::Etc::PreferencesParts={prefs}",
        "-o", f"Dir::State::Lists={tmp_path / 'lists'}", "-o", f"Dir::Cache={tmp_path / 'cache'}",
        "-o", "Dir::State::status=/dev/null", "-o", f"APT::Architecture={arch}",
        "-o", "Debug::NoLocking=1"]

    def apt(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args) + options, capture_output=True, text=True,
                              timeout=120, check=False)

    uris = apt("apt-get", "update", "--print-uris")
    assert uris.returncode == 0, uris.stderr
    assert f"'{p['repo']['url']}InRelease'" in uris.stdout
    # The stand-in has no signed Release file (NVIDIA's does): allow that, here only.
    update = apt("apt-get", "update", "-o", "Acquire::AllowInsecureRepositories=true")
    assert update.returncode == 0, update.stderr
    assert "E:" not in update.stderr, update.stderr
    policy = apt("apt-cache", "policy", *every)
    assert policy.returncode == 0, policy.stderr
    assert policy.stdout.count(f"Candidate: {V}-1") == len(every), policy.stdout
    assert f"{V}-1 600" in policy.stdout and "999.1-1 500" in policy.stdout
    install = apt("apt-get", "install", "--simulate", "--no-install-recommends",
                  "-o", "APT::Get::AllowUnauthenticated=true",
                  *(p["kernel_module_pins"] + p["packages"] + p["fabricmanager_packages"]))
    assert install.returncode == 0, install.stdout + install.stderr
    inst = [line.split() for line in install.stdout.splitlines() if line.startswith("Inst ")]
    assert sorted(words[1] for words in inst) == sorted(every), install.stdout
    assert {words[2] for words in inst} == {f"({V}-1"}, install.stdout


_DNF_READ = """
import json, sys, dnf
base = dnf.Base()
base.conf.substitutions["releasever"] = "9"
base.conf.reposdir = [sys.argv[1]]
base.read_all_repos()
print(json.dumps([{"id": r.id, "name": r.name, "baseurl": list(r.baseurl),
                   "gpgkey": list(r.gpgkey), "gpgcheck": r.gpgcheck, "enabled": r.enabled,
                   "sslcacert": r.sslcacert} for r in base.repos.values()]))
"""


def _system_python_with_dnf() -> str | None:
    for python in ("/usr/bin/python3", shutil.which("python3")):
        if python and subprocess.run([python, "-c", "import dnf"], capture_output=True,
                                     check=False).returncode == 0:
            return python
    return None


@pytest.mark.skipif(_system_python_with_dnf() is None,
                    reason="needs dnf's Python bindings (apt-get install python3-dnf; "
                           "scripts/setup.sh installs them)")
@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_dnf_reads_the_rendered_repo_file(tmp_path: Path, arch: str) -> None:
    """dnf's own configuration reader (libdnf's ConfigParser, as `dnf` uses) parses the
    rendered .repo file, with and without the CA bundle line."""
    python = _system_python_with_dnf()
    assert python
    p = plan(dict(ROCKY_9, architecture=arch))
    where = "rhel9/x86_64" if arch == "x86_64" else "rhel9/sbsa"
    for ca, expected_ca in (("", None), ("/etc/pki/tls/certs/proxy-ca.pem",
                                         "/etc/pki/tls/certs/proxy-ca.pem")):
        repos = tmp_path / f"repos{len(ca)}"
        repos.mkdir()
        (repos / "nvidia-cuda.repo").write_text(render("nvidia-cuda.repo.j2", p, ca))
        proc = subprocess.run([python, "-c", _DNF_READ, str(repos)], capture_output=True,
                              text=True, timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        assert "failed loading" not in proc.stderr, proc.stderr
        (repo,) = json.loads(proc.stdout)
        assert repo["id"] == repo["name"] == f"cuda-{where.replace('/', '-')}"
        assert repo["baseurl"] == [f"{NVIDIA}/{where}/"]
        assert repo["gpgkey"] == ["file:///etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-cuda"]
        assert (repo["gpgcheck"], repo["enabled"]) == (True, True)
        if expected_ca:
            assert repo["sslcacert"] == expected_ca
        else:
            assert not repo["sslcacert"]
