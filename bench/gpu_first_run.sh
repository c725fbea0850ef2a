#!/usr/bin/env bash
# bench/gpu_first_run.sh - the first run on a GPU machine, from binaries `make gpu-prep` built
# elsewhere: nothing is compiled here, so the GPU's minutes go to running. From the repository root,
# with build/gpu-prep/ copied beside it:
#
#   bash bench/gpu_first_run.sh DIR [--budget S] [--dry-run]
#
# 1. checks the prepared folder against its manifest (every file there, its SHA-256) and installs
#    the binaries at their places under build/;
# 2. smoke, at most 3 minutes: the GPU and driver, the binaries' shared libraries (ldd), every CUDA
#    parity suite side by side under a time limit each (a failed suite again from the MF_CUDA_DEBUG
#    build), compute-sanitizer (memcheck on every suite, racecheck on the attention suite), a short
#    build/train-cuda run of every model at fp32 and bf16 beside the CPU's losses;
# 3. the GPU report's benchmarks with the time left (attention, fast weights, every model against
#    PyTorch): bench/gpu_report.sh --prebuilt.
# The whole run stays under S seconds (default 540: 9 minutes). It writes at most 8 plain files into
# DIR, so that everything comes back in one copy: summary.md first (what ran, from which commit, on
# which GPU; each part's result; the goals; the results), then one log per part (<n>_<part>.log).
# --dry-run prints the commands and time limits and runs nothing (no GPU needed).
# Exit status: 0 when every part passed, 1 when one failed, 2 when it could not start.
set -u
cd "$(dirname "$0")/.." || exit 2
DIR=""
BUDGET=${GPU_FIRST_RUN_BUDGET:-540}
DRY=0
while [ $# -gt 0 ]; do
    case "$1" in
    --dry-run) DRY=1; shift ;;
    --budget) [ $# -ge 2 ] || { echo "bench/gpu_first_run.sh: --budget needs a value" >&2; exit 2; }; BUDGET=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d'; exit 0 ;;
    -*) echo "bench/gpu_first_run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) [ -z "$DIR" ] || { echo "bench/gpu_first_run.sh: one folder only ($DIR, $1)" >&2; exit 2; }; DIR=$1; shift ;;
    esac
done
case "$BUDGET" in ''|*[!0-9]*) echo "bench/gpu_first_run.sh: --budget $BUDGET: a number of seconds" >&2; exit 2 ;; esac
[ -n "$DIR" ] || { echo "usage: bash bench/gpu_first_run.sh DIR [--budget S] [--dry-run] (see --help)" >&2; exit 2; }
T0=$(date +%s)
PREP=${GPU_PREP:-build/gpu-prep}
export GPU_PREP=$PREP

if [ "$DRY" = 1 ]; then
    echo "bench/gpu_first_run.sh --dry-run: $PREP/ installed under build/, then (budget $BUDGET s, less 15 s for the summary):"
    exec bash bench/gpu_report.sh --prebuilt --dry-run --out "$DIR" --budget $((BUDGET - 15))
fi

# ---- the prepared folder: there, whole, as built -------------------------------------------------
if [ ! -f "$PREP/MANIFEST.txt" ]; then
    echo "bench/gpu_first_run.sh: no $PREP/MANIFEST.txt: run \`make gpu-prep\` on a machine with nvcc (no GPU needed)"
    echo "and copy $PREP/ to this machine beside the repository (or set GPU_PREP=the folder)"
    exit 2
fi
if [ -e "$DIR" ] && [ -n "$(ls -A "$DIR" 2> /dev/null)" ]; then
    echo "bench/gpu_first_run.sh: $DIR is not empty: give a new or empty folder (it gets at most 8 files)"
    exit 2
fi
mkdir -p "$DIR" || exit 2
bad=()
while read -r f size sum; do
    if [ ! -f "$PREP/$f" ]; then bad+=("$f (missing)")
    elif [ "$(sha256sum "$PREP/$f" | cut -d' ' -f1)" != "$sum" ]; then bad+=("$f (its SHA-256 differs from the manifest's)")
    else mkdir -p "build/$(dirname "$f")" && cp -p "$PREP/$f" "build/$f"; fi
done < <(awk '/^files:/ { f = 1; next } f && NF == 3' "$PREP/MANIFEST.txt")
built=$(sed -n 's/^commit: //p' "$PREP/MANIFEST.txt")
here=$(git rev-parse HEAD 2> /dev/null || echo unknown)
git diff --quiet HEAD 2> /dev/null || here="$here + local changes"
echo "== $PREP: built from $built; this tree: $here"
[ ${#bad[@]} -eq 0 ] || echo "   not installed: ${bad[*]} (the parts that need them fail)"

# a library the loader cannot find (cuBLAS outside its path, say): the CUDA toolkit's folders and
# those of PyTorch's nvidia-* packages are added to LD_LIBRARY_PATH, and the env part's ldd shows the rest
unfound() { ldd build/train-cuda build/cuda/cuda_suites 2> /dev/null | grep -c 'not found'; }
if [ -x build/train-cuda ] && [ "$(unfound)" -gt 0 ]; then
    dirs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/*/lib "$(dirname "$(command -v nvcc 2> /dev/null || echo /x/x)")/../lib64" 2> /dev/null
           python3 -c 'import glob, nvidia; print("\n".join(d for p in nvidia.__path__ for d in glob.glob(p + "/*/lib") + glob.glob(p + "/*/*/lib")))' 2> /dev/null)
    for d in $dirs; do LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d; done
    export LD_LIBRARY_PATH
    echo "== the loader missed $(ldd build/train-cuda build/cuda/cuda_suites 2> /dev/null | grep 'not found' | awk '{ print $1 }' | sort -u | tr '\n' ' ')"
    echo "   LD_LIBRARY_PATH=$LD_LIBRARY_PATH; still missing: $(unfound)"
fi

# ---- smoke, then the report's benchmarks: bench/gpu_report.sh --prebuilt -------------------------
WORKDIR=build/gpu_first_run
rm -rf "$WORKDIR"
left=$((BUDGET - 15 - ($(date +%s) - T0)))
[ "$left" -ge 0 ] || left=0
bash bench/gpu_report.sh --prebuilt --out "$WORKDIR" --budget "$left"
rc=$?

# ---- DIR: summary.md first, then the parts' logs (8 files at most) -------------------------------
{
    echo "# First GPU run: bench/gpu_first_run.sh, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo ""
    echo "Binaries from make gpu-prep, commit $built (this tree: $here), built $(sed -n 's/^built: //p' "$PREP/MANIFEST.txt"), host code $(sed -n 's/^host code: //p' "$PREP/MANIFEST.txt")."
    [ ${#bad[@]} -eq 0 ] || echo "Not installed: ${bad[*]}."
    echo "Whole run: $(($(date +%s) - T0)) s of a budget of $BUDGET s; gpu_report.sh exit status $rc."
    echo ""
    if [ -f "$WORKDIR/report.md" ]; then sed -e '1s/^# /## /' -e '2,$s/^## /### /' "$WORKDIR/report.md"
    else echo "No report: gpu_report.sh stopped before writing one (its messages are in the output of this script)."; fi
} > "$DIR/summary.md"
for f in "$WORKDIR"/*.log; do [ -f "$f" ] && cp "$f" "$DIR/"; done
n=$(find "$DIR" -type f | wc -l)
echo "== $DIR: $n files (summary.md first)"
[ "$n" -le 8 ] || echo "bench/gpu_first_run.sh: $DIR holds $n files, more than the 8 that come back in one copy"
exit "$rc"
