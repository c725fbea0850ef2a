#!/usr/bin/env bash
# Bit-exact resume for every model (examples/train.c): for each mixer of the library (train
# --list-mixers, names from mf_mixer_name) and the compressive transformer, N steps uninterrupted
# against K steps with --save + --stop-after, then --resume for the rest: every training loss and
# every validation loss after K must be the same, and the two final checkpoints (weights, moments,
# memories, RNG and loader positions) identical byte for byte, with dropout on (the RNG counts; sdpa
# and relative once more with attention-probability dropout, which draws from the RNG too).
# The memory models need their memories in the checkpoint (mf_model_save): a checkpoint without them
# (an older one, made here by renaming its "mf.state" key) must still resume, say that the memories
# start empty, and then differ - which shows the comparison can fail. On the emulated CUDA device
# (build/emu/train_emu, when built) the compressive model resumes exactly too: the memories pass
# through the device copies. It runs build/train-custom: build/train with examples/custom_mixer.c's
# registered mixer (alibi, with a field of its own) beside the library's.
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-$PWD/build/train-custom}
EMU=${TRAIN_EMU:-$PWD/build/emu/train_emu}
# shellcheck source=tests/lib.sh
. tests/lib.sh
start_test "$TRAIN" "make build/train-custom"

awk 'BEGIN { srand(5); split("the king and queen of a land far away spoke to the people who listened", w, " ");
             for (i = 0; i < 900; i++) printf "%s%s", w[int(rand() * 15) + 1], (i % 12 == 11 ? ".\n" : " ") }' > text.txt

STEPS=8; STOP=3
TINY=(text.txt --d-model 16 --heads 2 --layers 2 --d-ff 32 --seq-len 12 --batch 3 --threads 1 --log-every 1
      --steps $STEPS --eval-every 2 --eval-batches 2 --sample 0 --dropout 0.1 --lr 3e-3)
losses() { grep -E '^step [0-9]+/[0-9]+ ' "$1" | awk '{ s = $2 " " $4; if ($5 == "(ce") s = s " " $6 " " $9; print s }'; } # N/M loss (ce ar)
valid_after() { grep -E '^step [0-9]+: valid loss' "$1" | awk -v k="$2" '{ s = $2; sub(/:/, "", s); if (s + 0 > k) print }'; }

# run_pair NAME BIN ARGS...: the uninterrupted run and the stopped + resumed one; sets same=1 when equal
run_pair() {
    local name=$1 bin=$2; shift 2
    rm -f "$name.st"
    "$bin" "${TINY[@]}" "$@" --save "$name.full.st" > "$name.full" 2>&1 || { echo "    $name: the run failed"; tail -3 "$name.full"; same=0; return; }
    "$bin" "${TINY[@]}" "$@" --save "$name.st" --stop-after $STOP > "$name.p1" 2>&1 && cp "$name.st" "$name.k.st" &&
    "$bin" "${TINY[@]}" "$@" --resume "$name.st" > "$name.p2" 2>&1 || { echo "    $name: stop or resume failed"; tail -3 "$name.p1" "$name.p2"; same=0; return; }
    same=0
    if [ "$(losses "$name.full" | wc -l)" -eq $STEPS ] && [ "$(losses "$name.full")" = "$(cat <(losses "$name.p1") <(losses "$name.p2"))" ] &&
       [ -n "$(valid_after "$name.full" $STOP)" ] && [ "$(valid_after "$name.full" $STOP)" = "$(valid_after "$name.p2" $STOP)" ] &&
       grep -q "resumed from \"$name.st\" at step $STOP" "$name.p2" && ! grep -q 'memories start empty' "$name.p2" &&
       cmp -s "$name.full.st" "$name.st"; then
        same=1
    fi
}

models=0; exact=0
while read -r mixer; do
    case $mixer in relative) variants=("relative|--mixer relative --mem-len 5"
                                       "compressive|--mixer relative --compressive --mem-len 5 --c-mem-len 4 --compression-rate 2"
                                       "relative_attn_dropout|--mixer relative --mem-len 5 --attn-dropout 0.2") ;;
                   sdpa) variants=("sdpa|--mixer sdpa" "sdpa_attn_dropout|--mixer sdpa --attn-dropout 0.2") ;;
                   metric) variants=("metric|--mixer metric" "metric_softmax_tril|--mixer metric --metric-form softmax_tril") ;;
                   alibi) variants=("alibi|--mixer alibi --pos none --fields alibi_max=4") ;;
                   *) variants=("$mixer|--mixer $mixer") ;; esac
    for v in "${variants[@]}"; do
        name=${v%%|*}
        # shellcheck disable=SC2086
        run_pair "$name" "$TRAIN" ${v#*|}
        models=$((models + 1))
        if [ $same -eq 1 ]; then exact=$((exact + 1)); ok "$name: $STOP steps + --resume = $STEPS uninterrupted steps: the same losses, validation losses and final checkpoint, bit for bit"
        else bad "$name: $STOP steps + --resume = $STEPS uninterrupted steps" "$(diff <(losses "$name.full") <(cat <(losses "$name.p1") <(losses "$name.p2")))" \
                 "$(diff <(valid_after "$name.full" $STOP) <(valid_after "$name.p2" $STOP))" "$(head -8 "$name.p2")"; fi
    done
done < <("$TRAIN" --list-mixers)
if [ "$models" -ge 13 ]; then ok "every mixer of the library and the registered one were tried ($models models)"
else bad "every mixer of the library was tried" "only $models models"; fi

# a checkpoint without the memories (the format before mf_model_save): it loads, says so, and the
# losses then differ from the uninterrupted run's
cp compressive.k.st old.st
LC_ALL=C sed -i 's/"mf\.state"/"mf.stat_"/' old.st
"$TRAIN" "${TINY[@]}" --mixer relative --compressive --mem-len 5 --c-mem-len 4 --compression-rate 2 --resume old.st --save old2.st > old.p2 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q 'holds no memories (an older checkpoint): the memories start empty' old.p2 &&
   [ "$(losses old.p2 | wc -l)" -eq $((STEPS - STOP)) ] && [ "$(losses old.p2)" != "$(losses compressive.p2)" ]
then ok "an older checkpoint of a memory model resumes with empty memories, says so, and its losses differ"
else bad "an older checkpoint of a memory model resumes with empty memories" "rc $rc" "$(cat old.p2)"; fi

# the emulated CUDA device: the memories are saved from and loaded into device buffers
if [ -x "$EMU" ]; then
    TRAIN_SAVED=$TRAIN
    run_pair emu "$EMU" --device cuda --mixer relative --compressive --mem-len 5 --c-mem-len 4 --compression-rate 2
    if [ $same -eq 1 ]; then ok "emulated CUDA, compressive: --resume = uninterrupted, bit for bit"
    else bad "emulated CUDA, compressive: --resume = uninterrupted" "$(diff <(losses emu.full) <(cat <(losses emu.p1) <(losses emu.p2)))" "$(tail -5 emu.p2)"; fi
    TRAIN=$TRAIN_SAVED
else
    echo "    (no $EMU: the emulated CUDA check is skipped; make test builds it)"
fi

echo "resumed bit-exactly: $exact of $models models"
finish
