#!/usr/bin/env bash
# bench/torch2_venv.sh - the current PyTorch 2.x from PyPI in a virtual environment under build/, the
# second PyTorch column of `make bench` (beside Debian's python3-torch 1.13). Prints the venv's
# python on its last line; exits non-zero when no torch 2.x could be installed.
#
#   bash bench/torch2_venv.sh [VENV]      default build/venv-torch [BENCH_TORCH2_VENV]
#   BENCH_TORCH2_UPGRADE=1                install the newest torch 2.x again even if one imports
#   BENCH_TORCH2_SPEC='torch==2.15.0'     another version (default 'torch>=2,<3')
#
# What is installed and why: PyPI's Linux x86_64 torch wheel is the CUDA build. Its libtorch_cpu.so,
# libtorch_cuda.so and libtorch_python.so name the CUDA runtime libraries (cudart, cupti, cublas, cuDNN,
# cuFFT, cuSPARSE(Lt), cuFile, NCCL, NVSHMEM, NVRTC) as NEEDED, so `import torch` fails without the
# nvidia wheels even on a machine without a GPU (`pip install --no-deps torch` alone does not import),
# and PyPI has no CPU-only build (that one lives on PyTorch's own index, which this project's machines
# do not reach). So the wheel goes in with --no-deps and then every requirement in its metadata except
# triton (the GPU compiler of torch.compile: Inductor's CPU backend emits C++ and builds it with the
# system's g++) and the optional extras, plus numpy (which a user has, and torch warns without) - about
# 4.4 GB on disk, once; later runs reuse the venv.
set -u
cd "$(dirname "$0")/.." || exit 1
VENV=${1:-${BENCH_TORCH2_VENV:-build/venv-torch}}
SPEC=${BENCH_TORCH2_SPEC:-torch>=2,<3}
BASE_PY=${BENCH_TORCH2_BASE_PYTHON:-/usr/bin/python3}
say() { printf '%s\n' "$*" >&2; }

imports_torch2() { "$VENV/bin/python" -c 'import sys, torch; sys.exit(not torch.__version__.startswith("2."))' >/dev/null 2>&1; }

if [ -z "${BENCH_TORCH2_UPGRADE:-}" ] && [ -x "$VENV/bin/python" ] && imports_torch2; then
    echo "$VENV/bin/python"
    exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
    if ! "$BASE_PY" -m venv "$VENV" >/dev/null 2>&1; then   # Debian splits venv (ensurepip) off
        if [ "$(id -u)" = 0 ] && [ -z "${BENCH_NO_APT:-}" ] && command -v apt-get >/dev/null; then
            say "== installing python3-venv (apt-get)"
            rm -rf "$VENV"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null 2>&1 ||
                { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null 2>&1; }
        fi
        rm -rf "$VENV"
        "$BASE_PY" -m venv "$VENV" || { say "torch2_venv.sh: $BASE_PY -m venv failed (install python3-venv)"; exit 1; }
    fi
fi
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-warn-conflicts)
say "== installing $SPEC from PyPI into $VENV (the wheel, then its requirements without triton)"
"${PIP[@]}" ${BENCH_TORCH2_UPGRADE:+--upgrade} --no-deps "$SPEC" >&2 || { say "torch2_venv.sh: pip could not install $SPEC"; exit 1; }
# the wheel's own requirements (with their environment markers, which pip evaluates), less triton and extras
mapfile -t REQS < <("$VENV/bin/python" -c '
import importlib.metadata as md
for r in md.requires("torch") or []:
    if "extra ==" not in r and not r.startswith("triton"):
        print(r)')
"${PIP[@]}" "${REQS[@]}" numpy >&2 || { say "torch2_venv.sh: pip could not install the requirements of torch: ${REQS[*]}"; exit 1; }
imports_torch2 || { say "torch2_venv.sh: torch 2.x was installed into $VENV but does not import:";
                    "$VENV/bin/python" -c 'import torch' 2>&1 | tail -n 3 >&2; exit 1; }
echo "$VENV/bin/python"
