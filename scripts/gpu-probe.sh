#!/usr/bin/env bash
# Run the project's GPU-facing code against the real NVIDIA driver and keep what it parsed.
#
#   scripts/gpu-probe.sh tests/data/gpu/probe-$(hostname -s)
#
# Pieces (each under PROBE_TIMEOUT seconds, default 90; the whole probe well under 5 min):
#   gpu_facts     plugins/modules/gpu_facts.py run by Ansible (ansible localhost -m gpu_facts,
#                 ANSIBLE_LIBRARY=plugins/modules) where an ansible command is beside PYTHON
#                 or on PATH (or ANSIBLE=...), else its own functions (the same nvidia-smi
#                 query, smi_facts, build_facts); sysfs from PROBE_ROOT (default /).
#   vram          roles/gpu_metrics/files/nvidia_vram_collector.py --output OUT/vram.prom
#   cuda_check    roles/vllm_install/files/vllm-cuda-check.py with VLLM_PYTHON (default the
#                 engine's /srv/vllm/venv/bin/python where it exists, else PYTHON); without
#                 torch there it is skipped unless PROBE_REQUIRE_TORCH=1.
# Every nvidia-smi run goes through a recording wrapper, so OUT/nvidia-smi/ holds the raw
# output each piece parsed (NN.args, NN.stdout, NN.stderr, NN.rc), in the format of the
# recordings under tests/data/gpu/nvidia-smi/. OUT/summary.txt: one line per piece.
#
# Exit status: 0 every piece ok or skipped; 1 a piece failed; 2 no nvidia-smi on PATH;
# 3 nvidia-smi runs but lists no GPU (no driver, no device, driver/library mismatch).
set -u -o pipefail

usage() { echo "usage: $0 OUTDIR   (e.g. tests/data/gpu/probe-\$(hostname -s))" >&2; exit 64; }
[ $# -eq 1 ] || usage
OUT=$1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
PROBE_ROOT=${PROBE_ROOT:-/}
PROBE_TIMEOUT=${PROBE_TIMEOUT:-90}
if [ -z "${VLLM_PYTHON:-}" ]; then
    if [ -x /srv/vllm/venv/bin/python ]; then VLLM_PYTHON=/srv/vllm/venv/bin/python
    else VLLM_PYTHON=$PYTHON; fi
fi

REAL_SMI=$(command -v nvidia-smi || true)
if [ -z "$REAL_SMI" ]; then
    echo "gpu-probe: no nvidia-smi on PATH: this machine has no NVIDIA driver installed" \
         "(or no GPU). Run the probe on a host with an NVIDIA GPU and its driver." >&2
    exit 2
fi
if ! listing=$(timeout "$PROBE_TIMEOUT" "$REAL_SMI" -L 2>&1) \
        || ! grep -q '^GPU [0-9]' <<<"$listing"; then
    echo "gpu-probe: $REAL_SMI lists no GPU; it said:" >&2
    printf '  %s\n' "$listing" >&2
    echo "gpu-probe: no usable NVIDIA GPU here (driver not loaded, no device, or a" \
         "driver/library version mismatch): nothing to probe." >&2
    exit 3
fi

mkdir -p "$OUT/nvidia-smi" || exit 1
OUT=$(cd "$OUT" && pwd)
printf '%s\n' "$listing" > "$OUT/nvidia-smi/list.txt"

# The recording wrapper, first on PATH for every piece.
WRAP=$(mktemp -d)
trap 'rm -rf "$WRAP"' EXIT
cat > "$WRAP/nvidia-smi" <<EOF
#!/usr/bin/env bash
dir="$OUT/nvidia-smi"
n=\$(ls "\$dir" | grep -c '\.args\$')
n=\$(printf '%02d' "\$n")
printf '%s\n' "\$@" > "\$dir/\$n.args"
"$REAL_SMI" "\$@" > "\$dir/\$n.stdout" 2> "\$dir/\$n.stderr"
rc=\$?
echo "\$rc" > "\$dir/\$n.rc"
cat "\$dir/\$n.stdout"
cat "\$dir/\$n.stderr" >&2
exit "\$rc"
EOF
chmod +x "$WRAP/nvidia-smi"
export PATH="$WRAP:$PATH"

: > "$OUT/summary.txt"
failed=0
report() {  # piece status message
    printf '%-10s %-7s %s\n' "$1" "$2" "$3" | tee -a "$OUT/summary.txt"
    [ "$2" = fail ] && failed=1
    return 0
}

# gpu_facts ---------------------------------------------------------------------------------
# The module as Ansible runs it (ad-hoc, ANSIBLE_LIBRARY=plugins/modules) where an ansible
# command sits beside PYTHON or on PATH; else its functions, in the order main() calls them.
# ANSIBLE=none: the functions only.
ANSIBLE=${ANSIBLE:-$(dirname "$(command -v "$PYTHON")")/ansible}
if [ "$ANSIBLE" = none ]; then ANSIBLE=""
elif [ ! -x "$ANSIBLE" ]; then ANSIBLE=$(command -v ansible || true); fi
: > "$OUT/gpu_facts.ansible.json"
if [ -n "$ANSIBLE" ] && [ -x "$ANSIBLE" ]; then
    (cd "$WRAP" && ANSIBLE_LIBRARY="$ROOT/plugins/modules" ANSIBLE_STDOUT_CALLBACK=json \
        ANSIBLE_LOAD_CALLBACK_PLUGINS=1 ANSIBLE_NOCOLOR=1 timeout "$PROBE_TIMEOUT" \
        "$ANSIBLE" localhost -c local -i localhost, -m gpu_facts -a "root=$PROBE_ROOT" \
        -e "ansible_python_interpreter=$(command -v "$PYTHON")") \
        > "$OUT/gpu_facts.ansible.json" 2> "$OUT/gpu_facts.ansible.stderr"
fi
if timeout "$PROBE_TIMEOUT" "$PYTHON" - "$ROOT/plugins/modules/gpu_facts.py" "$PROBE_ROOT" \
        "$OUT/gpu_facts.ansible.json" > "$OUT/gpu_facts.json" 2> "$OUT/gpu_facts.stderr" <<'EOF'
import importlib.util, json, subprocess, sys
path, root, ansible_json = sys.argv[1:4]
text = open(ansible_json).read()
if text.strip():
    host = json.loads(text)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    if host.get("failed") or "ansible_facts" not in host:
        print(json.dumps(host, indent=2))
        print(f"the module failed: {host.get('msg')}", file=sys.stderr)
        sys.exit(1)
    facts = host["ansible_facts"]["gpu_facts"]
    facts["probe_path"] = "ansible -m gpu_facts"
else:
    spec = importlib.util.spec_from_file_location("gpu_facts", path)
    gf = importlib.util.module_from_spec(spec)
    sys.modules["gpu_facts"] = gf
    spec.loader.exec_module(gf)
    query = version = None
    if gf.module_loaded(root):
        def run(*args):
            p = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True)
            return p.returncode, p.stdout, p.stderr
        query = run("--query-gpu=" + ",".join(gf.QUERY_FIELDS), "--format=csv,noheader,nounits")
        version = run("--version")
    facts = gf.build_facts(root, gf.smi_facts(query, version))
    facts["probe_path"] = "module functions (no ansible command)"
print(json.dumps(facts, indent=2))
smi = facts["nvidia_smi"]
problems = []
if not smi["queried"]:
    problems.append(f"the nvidia kernel module is not loaded ({root.rstrip('/')}/sys/module/nvidia)")
elif not smi["ok"]:
    problems.append(f"nvidia-smi: {smi['error']}")
elif len(smi["gpus"]) != facts["gpu_count"]:
    problems.append(f"sysfs has {facts['gpu_count']} GPU(s), nvidia-smi {len(smi['gpus'])}")
if facts["driver_mismatch"]:
    problems.append("driver mismatch (kernel module vs nvidia-smi)")
print("; ".join(problems) or
      f"{facts['gpu_count']} GPU(s) {facts['gpu_models']}, driver {smi['driver_version']}, "
      f"CUDA {smi['cuda_version']} ({facts['probe_path']})", file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
then report gpu_facts ok "$(tail -n1 "$OUT/gpu_facts.stderr")"
else report gpu_facts fail "$(tail -n1 "$OUT/gpu_facts.stderr") (see $OUT/gpu_facts.json)"
fi

# VRAM collector ----------------------------------------------------------------------------
if timeout "$PROBE_TIMEOUT" "$PYTHON" "$ROOT/roles/gpu_metrics/files/nvidia_vram_collector.py" \
        --output "$OUT/vram.prom" 2> "$OUT/vram.stderr" \
        && grep -q '^nvidia_vram_collector_up{error=""} 1$' "$OUT/vram.prom"; then
    report vram ok "$(grep -c '^nvidia_gpu_memory_total_bytes{' "$OUT/vram.prom") GPU(s) in vram.prom"
else
    report vram fail "$(grep '^nvidia_vram_collector_up' "$OUT/vram.prom" 2>/dev/null \
        || tail -n1 "$OUT/vram.stderr")"
fi

# CUDA check --------------------------------------------------------------------------------
timeout "$PROBE_TIMEOUT" "$VLLM_PYTHON" "$ROOT/roles/vllm_install/files/vllm-cuda-check.py" \
    > "$OUT/cuda-check.json" 2> "$OUT/cuda-check.stderr"
rc=$?
status=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["status"])' \
    "$OUT/cuda-check.json" 2>/dev/null || echo "none")
message=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["message"])' \
    "$OUT/cuda-check.json" 2>/dev/null || tail -n1 "$OUT/cuda-check.stderr")
if [ "$status" = fail ] && grep -q "torch is not installed" <<<"$message" \
        && [ "${PROBE_REQUIRE_TORCH:-0}" != 1 ]; then
    report cuda_check skipped "no torch in $VLLM_PYTHON (set VLLM_PYTHON to the engine's python)"
elif [ "$rc" -eq 0 ] && [ "$status" != none ]; then
    report cuda_check "$status" "$message"
else
    report cuda_check fail "$message"
fi

echo "gpu-probe: raw nvidia-smi outputs and results in $OUT"
exit "$failed"
