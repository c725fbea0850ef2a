# bench/cpu_rows.sh - the CPU benchmark's rows, sourced by bench/run.sh (make bench) and bench/ab.sh.
# shellcheck shell=bash
# row_spec ROW -> "bench_model flags|PyTorch script and flags|goal (x PyTorch tok/s)|config". Every
# row: d_model 256, heads 8, layers 4, d_ff 1024, batch 8, vocab 65 (both sides' defaults). The
# MetaFormer mixers run the MetaFormer model (learned positions, GELU); the labml families run
# their seeds' models (no positions, ReLU FFN) against the seeds' PyTorch code.
row_spec() {
    local labml="--pos none --act relu"
    case "$1" in
    sdpa|metric|quadratic|pool|identity)
        echo "--mixer $1 --seq 256|bench/torch_ref.py --mixer $1 --seq 256|2.2|T 256" ;;
    small)   # the small-model regime of #21 (a common CPU tutorial size): sdpa, d 128, 4 heads, 4 layers, d_ff 512, T 64, batch 12
        echo "--mixer sdpa --d-model 128 --heads 4 --d-ff 512 --seq 64 --batch 12 --label small|bench/torch_ref.py --mixer sdpa --d-model 128 --heads 4 --d-ff 512 --seq 64 --batch 12|2.5|sdpa, D 128, H 4, d_ff 512, T 64, B 12" ;;
    relative)
        echo "--mixer relative $labml --seq 64 --mem-len 64|bench/torch_xl.py --mixer relative --seq 64 --mem-len 64|3|T 64, mem 64" ;;
    compressive)
        echo "--mixer relative $labml --compressive --seq 32 --mem-len 32 --c-mem-len 64 --rate 2|bench/torch_xl.py --mixer compressive --seq 32 --mem-len 32 --c-mem-len 64 --rate 2|3|T 32, mem 32, c_mem 64, c 2" ;;
    fast_weights)
        echo "--mixer $1 $labml --seq 128|bench/torch_fastweights.py --mixer $1 $labml --seq 128|10|T 128" ;;
    linear)
        echo "--mixer $1 $labml --seq 128|bench/torch_fastweights.py --mixer $1 $labml --seq 128|5|T 128" ;;
    feedback|feedback_kv)
        echo "--mixer $1 $labml --seq 64|bench/torch_feedback.py --mixer $1 $labml --seq 64|10|T 64" ;;
    *) echo "" ;;
    esac
}
