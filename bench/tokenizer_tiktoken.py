"""tiktoken's GPT-2 encoding built offline from GPT-2's own files, for bench/tokenizer.sh.

    python bench/tokenizer_tiktoken.py GPT2_DIR check TEXT IDS.u32   tiktoken's ids == IDS (little-endian
                                                                     uint32, written by bench_tokenizer)
    python bench/tokenizer_tiktoken.py GPT2_DIR time TEXT REPS       encode_ordinary REPS times, one thread:
                                                                     "RESULT impl=tiktoken mb_s=... tok_s=..."

The encoding: tiktoken.load.data_gym_to_mergeable_bpe_ranks(vocab.bpe, encoder.json) with the
pattern tiktoken ships for GPT-2 (tiktoken_ext.openai_public.r50k_pat_str, GPT-2's pattern with
possessive quantifiers) and <|endoftext|> = 50256; encode_ordinary treats <|endoftext|> as text,
as mf_tokenizer_encode does.
"""
import os
import statistics
import struct
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
import tiktoken  # noqa: E402
import tiktoken.load  # noqa: E402
from tiktoken_ext.openai_public import r50k_pat_str  # noqa: E402


def encoding(gpt2_dir):
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(os.path.join(gpt2_dir, "vocab.bpe"),
                                                          os.path.join(gpt2_dir, "encoder.json"))
    return tiktoken.Encoding("gpt2-offline", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)


def main():
    if len(sys.argv) != 5 or sys.argv[2] not in ("check", "time"):
        sys.exit(__doc__)
    enc = encoding(sys.argv[1])
    raw = open(sys.argv[3], "rb").read()
    text = raw.decode("utf-8")
    if sys.argv[2] == "check":
        data = open(sys.argv[4], "rb").read()
        ours = list(struct.unpack("<%dI" % (len(data) // 4), data))
        theirs = enc.encode_ordinary(text)
        if ours != theirs:
            i = next((k for k in range(min(len(ours), len(theirs))) if ours[k] != theirs[k]), min(len(ours), len(theirs)))
            sys.exit("MISMATCH %s: %d ids (ours) vs %d (tiktoken), first difference at id %d" % (sys.argv[3], len(ours), len(theirs), i))
        print("OK %s: all %d ids equal tiktoken's" % (sys.argv[3], len(ours)))
        return
    reps = int(sys.argv[4])
    enc.encode_ordinary(text[:1000])  # warm up the regex
    secs, n = [], 0
    for _ in range(reps):
        t0 = time.perf_counter()
        n = len(enc.encode_ordinary(text))
        secs.append(time.perf_counter() - t0)
    sec = statistics.median(secs)
    print("RESULT impl=tiktoken mb_s=%.3f tok_s=%.0f tokens=%d bytes=%d sec=%.6f tiktoken=%s"
          % (len(raw) / 1e6 / sec, n / sec, n, len(raw), sec, tiktoken.__version__))


if __name__ == "__main__":
    main()
