"""bpe_corpus.py - a large text for bench/bpe_train.sh, made from local files.

    python3 bench/bpe_corpus.py OUT MB repeat FILE        FILE again and again up to MB megabytes
    python3 bench/bpe_corpus.py OUT MB mix SOURCE...      the lines of every text file under the
                                                          SOURCEs (files or folders; .gz files are
                                                          unpacked; binary files skipped), shuffled
                                                          (seed 0), up to MB megabytes

"repeat" is what a small corpus gives: every pre-token count is a multiple of the copies, so it is
no harder than the file once (only the counting pass grows). "mix" gives a text with many more
distinct words (prose, documentation, code), closer to a real corpus; lines are reused (shuffled
again) only when the sources hold less than MB.
"""
import gzip
import os
import random
import sys


def text_lines(path):
    try:
        raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
    except (OSError, EOFError):
        return []
    if b"\0" in raw[:4096]:
        return []  # binary
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return []
    return raw.splitlines(keepends=True)


def files_under(source):
    if os.path.isfile(source):
        yield source
        return
    for root, dirs, names in os.walk(source):
        dirs.sort()
        for name in sorted(names):
            p = os.path.join(root, name)
            if os.path.isfile(p) and not os.path.islink(p):
                yield p


def main():
    if len(sys.argv) < 5 or sys.argv[3] not in ("repeat", "mix"):
        sys.exit(__doc__)
    out, target, mode, sources = sys.argv[1], int(float(sys.argv[2]) * 1e6), sys.argv[3], sys.argv[4:]
    with open(out, "wb") as f:
        if mode == "repeat":
            data = open(sources[0], "rb").read()
            for _ in range(target // len(data)):
                f.write(data)
            f.write(data[: target % len(data)])
            return
        lines = [l for s in sources for p in files_under(s) for l in text_lines(p)]
        pool = sum(len(l) for l in lines)
        print(f"{len(lines)} lines, {pool / 1e6:.1f} MB from {len(sources)} sources", file=sys.stderr)
        rng, written = random.Random(0), 0
        while written < target:
            rng.shuffle(lines)
            for l in lines:
                if written + len(l) > target:
                    break
                f.write(l)
                written += len(l)
            else:
                continue
            break


if __name__ == "__main__":
    main()
