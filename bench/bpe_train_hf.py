"""bpe_train_hf.py - the reference for bench/bpe_train.sh: Hugging Face `tokenizers` byte-level BPE.

    python bench/bpe_train_hf.py FILE VOCAB_SIZE [--merges OUT] [--compare OURS]

Trains tokenizers.models.BPE with the ByteLevel pre-tokenizer (GPT-2's regex, no prefix space) and
tokenizers.trainers.BpeTrainer (the 256 byte symbols as the initial alphabet, min_frequency 2, no
special tokens) on FILE, as `Tokenizer.train([FILE])` does it: the file is read line by line.
Set RAYON_NUM_THREADS=1 for one thread. Prints the time and a "RESULT impl=hf ..." line; --merges
writes the merges as hex bytes ("6120 62", the format of bench_bpe_train --merges); --compare reads
ours in that format and prints how far the two lists agree.
"""
import argparse
import json
import os
import sys
import time


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (ByteLevel's alphabet): printable Latin-1 bytes map
    to themselves, the others to 256 + k in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def hf_merges_as_bytes(tok):
    """the trained merges as (left bytes, right bytes), in rank order"""
    back = {c: b for b, c in bytes_to_unicode().items()}
    merges = json.loads(tok.to_str())["model"]["merges"]
    out = []
    for m in merges:
        left, right = m.split(" ") if isinstance(m, str) else m
        out.append((bytes(back[c] for c in left), bytes(back[c] for c in right)))
    return out


def read_merges(path):
    with open(path) as f:
        return [tuple(bytes.fromhex(x) for x in line.split(" ")) for line in f.read().splitlines() if line]


def compare(ours, theirs):
    """the agreement of two merge lists: common prefix; of the first K of each, how many are shared"""
    prefix = 0
    while prefix < min(len(ours), len(theirs)) and ours[prefix] == theirs[prefix]:
        prefix += 1
    lines = [f"merges: ours {len(ours)}, hf {len(theirs)}; identical prefix {prefix}"]
    for k in sorted({min(k, len(ours), len(theirs)) for k in (100, 1000, len(ours))}):
        if k == 0:
            continue
        shared = len(set(ours[:k]) & set(theirs[:k]))
        merged_o = {a + b for a, b in ours[:k]}
        merged_t = {a + b for a, b in theirs[:k]}
        lines.append(f"first {k}: {shared} merges ({100.0 * shared / k:.1f}%) in both, "
                     f"{len(merged_o & merged_t)} tokens ({100.0 * len(merged_o & merged_t) / k:.1f}%) in both")
    first = next((i for i in range(min(len(ours), len(theirs))) if ours[i] != theirs[i]), None)
    if first is not None:
        lines.append(f"first difference at merge {first}: ours {ours[first]!r}, hf {theirs[first]!r}")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("vocab_size", type=int)
    ap.add_argument("--merges")
    ap.add_argument("--compare")
    a = ap.parse_args()
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    import tokenizers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=a.vocab_size, min_frequency=2, show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    mb = os.path.getsize(a.file) / 1e6
    t0 = time.perf_counter()
    tok.train([a.file], trainer)
    dt = time.perf_counter() - t0
    merges = hf_merges_as_bytes(tok)
    print(f"{a.file}: {mb:.1f} MB, tokenizers {tokenizers.__version__} "
          f"(RAYON_NUM_THREADS={os.environ.get('RAYON_NUM_THREADS', 'unset')}): vocab {tok.get_vocab_size()} "
          f"({len(merges)} merges) in {dt:.3f} s = {mb / dt:.1f} MB/s")
    print(f"RESULT impl=hf mb={mb:.3f} vocab={tok.get_vocab_size()} merges={len(merges)} total_s={dt:.4f} mb_s={mb / dt:.2f}")
    if a.merges:
        with open(a.merges, "w") as f:
            for left, right in merges:
                f.write(f"{left.hex()} {right.hex()}\n")
    if a.compare:
        for line in compare(read_merges(a.compare), merges):
            print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
