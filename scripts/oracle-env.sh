#!/usr/bin/env bash
# A Python with one vLLM release's own code, on a machine without a GPU: the oracle's
# environment (tests/oracle/*.py run in it). Usage: scripts/oracle-env.sh VERSION
# Prints the interpreter's path. Idempotent: an environment that imports vllm==VERSION is
# reused.
#
# The release's CUDA wheel (package vllm, ~250-350 MB) is installed without its dependencies,
# then every dependency its metadata lists except the CUDA-only ones (torch and its CUDA
# libraries, FlashInfer, TileLang, CUTLASS DSL and other kernel packages). torch comes from
# ORACLE_TORCH (default 2.13.0, a CPU build where the index has one): vLLM's sizing, config and
# argument code is plain Python, and its compiled ops are not loaded by that code.
# Environment: ORACLE_HOME (default .oracle/ in the checkout), ORACLE_PYTHON (default
# python3.11, else python3), ORACLE_TORCH, and pip's own PIP_* settings for the index.
set -euo pipefail

version=${1:?usage: scripts/oracle-env.sh VERSION (a vLLM release, e.g. 0.34.0)}
root=$(cd "$(dirname "$0")/.." && pwd)
home=${ORACLE_HOME:-${root}/.oracle}
venv=${home}/vllm-${version}
python=${ORACLE_PYTHON:-$(command -v python3.11 || command -v python3)}
torch=${ORACLE_TORCH:-2.13.0}
# The CUDA-only dependencies (names as the metadata writes them, case-insensitive prefixes).
cuda_only='^(torch|torchaudio|torchvision|torchcodec|pynvvideocodec|flashinfer|apache-tvm-ffi|tilelang|nvidia-|quack-kernels|tokenspeed|humming-kernels|fastsafetensors|instanttensor|nvtx|xformers|triton|cupy|ray|deep[-_]gemm)'

if [[ -x ${venv}/bin/python ]] &&
  [[ $("${venv}/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm"))' 2>/dev/null) == "${version}" ]]; then
  echo "${venv}/bin/python"
  exit 0
fi
mkdir -p "${home}/wheels"
shopt -s nullglob
wheels=("${home}/wheels/vllm-${version}-"*.whl)
if ((${#wheels[@]} == 0)); then
  "${python}" -m pip download --quiet --no-deps --only-binary :all: --dest "${home}/wheels" \
    "vllm==${version}" >&2
  wheels=("${home}/wheels/vllm-${version}-"*.whl)
fi
((${#wheels[@]} > 0)) || { echo "oracle-env: no vllm ${version} wheel downloaded" >&2; exit 1; }
wheel=${wheels[0]}
rm -rf "${venv}"
"${python}" -m venv "${venv}"
pip=("${venv}/bin/python" -m pip --quiet --disable-pip-version-check)
"${pip[@]}" install "torch==${torch}" >&2
"${venv}/bin/python" - "${wheel}" "${cuda_only}" >"${venv}/requirements.txt" <<'PY'
import re, sys, zipfile
from email.parser import Parser
wheel, cuda_only = sys.argv[1], re.compile(sys.argv[2], re.I)
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    meta = Parser().parsestr(z.read(name).decode())
for req in meta.get_all("Requires-Dist") or []:
    if "extra ==" not in req and not cuda_only.match(req):
        print(req)
PY
"${pip[@]}" install -r "${venv}/requirements.txt" >&2
"${pip[@]}" install --no-deps "${wheel}" >&2
"${venv}/bin/python" -c 'import vllm.config, vllm.engine.arg_utils' >&2
echo "${venv}/bin/python"
