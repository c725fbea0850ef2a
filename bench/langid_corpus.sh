#!/usr/bin/env bash
# A labelled corpus with no download: language identification from Debian's word lists
# (wamerican, wngerman, wfrench, wspanish, witalian, wportuguese), installed here when missing and
# apt-get can (as root, or with sudo without a password); where it cannot, this says so and exits 1.
#
#   bash bench/langid_corpus.sh OUT [ROWS_PER_LANGUAGE] [WORDS_PER_ROW] [SEED]     (800 3 1)
#
# OUT gets LABEL<TAB>TEXT lines for build/classify: the label is the language ("english", ...), the
# text WORDS_PER_ROW words of that language drawn at random, lowercased, separated by spaces. The
# corpus is balanced (ROWS_PER_LANGUAGE rows each) and the lines are shuffled; the same SEED and the
# same package versions (printed to stderr) give the same file. A word enters a language's pool when
# it is made of letters only (no apostrophes: English possessives "'s" would be a cue of their own,
# no digits, hyphens or dots), lowercased (German nouns keep their place), and when no other of the
# lists holds it (lowercased): "radio" or "hotel" would be labelled at random, and the task is then
# one a perfect classifier can solve. Python 3 does the text work (Unicode lowercasing, a seeded
# generator that is the same on every machine).
set -eu
out=${1:?usage: bash bench/langid_corpus.sh OUT [ROWS_PER_LANGUAGE] [WORDS_PER_ROW] [SEED]}
rows=${2:-800}; words=${3:-3}; seed=${4:-1}
for v in "$rows" "$words" "$seed"; do
    case $v in ''|*[!0-9]*) echo "langid_corpus.sh: \"$v\" is not a whole number (ROWS_PER_LANGUAGE WORDS_PER_ROW SEED)" >&2; exit 1;; esac
done
if [ "$rows" -lt 1 ] || [ "$words" -lt 1 ]; then
    echo "langid_corpus.sh: ROWS_PER_LANGUAGE and WORDS_PER_ROW must be at least 1" >&2; exit 1
fi
# language name, Debian package, its list in /usr/share/dict
LISTS="english:wamerican:american-english german:wngerman:ngerman french:wfrench:french
spanish:wspanish:spanish italian:witalian:italian portuguese:wportuguese:portuguese"
missing=""
for l in $LISTS; do
    pkg=${l#*:}; pkg=${pkg%%:*}
    [ -s "/usr/share/dict/${l##*:}" ] || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
    if ! command -v apt-get > /dev/null; then
        echo "langid_corpus.sh: the word lists$missing are missing and there is no apt-get: install them by hand" \
             "(files in /usr/share/dict), or give your own LABEL<TAB>TEXT file (make study-classify CORPUS=FILE)" >&2
        exit 1
    fi
    echo "installing the word lists$missing (apt-get)" >&2
    $sudo apt-get update -q > /dev/null 2>&1 || true
    # shellcheck disable=SC2086
    if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing > /dev/null 2>&1; then
        echo "langid_corpus.sh: could not install$missing (not root and no sudo? no network?): apt-get install$missing," \
             "or give your own LABEL<TAB>TEXT file (make study-classify CORPUS=FILE)" >&2
        exit 1
    fi
fi
command -v python3 > /dev/null || { echo "langid_corpus.sh: python3 is missing (apt-get install python3)" >&2; exit 1; }
for l in $LISTS; do
    pkg=${l#*:}; pkg=${pkg%%:*}
    echo "$pkg $(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || echo '?') /usr/share/dict/${l##*:}" >&2
done
# shellcheck disable=SC2086 # one argument per language
python3 - "$out" "$rows" "$words" "$seed" $LISTS << 'EOF'
import random, sys
out, rows, words, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
langs = [l.split(":") for l in sys.argv[5:]]
pools = {}
for name, _, path in langs:
    with open("/usr/share/dict/" + path, encoding="utf-8", errors="strict") as f:
        pools[name] = {w.strip().lower() for w in f if w.strip().isalpha()}
seen = {}
for name in pools:
    for w in pools[name]:
        seen[w] = seen.get(w, 0) + 1
rng = random.Random(seed)
lines = []
for name, _, _ in langs:
    pool = sorted(w for w in pools[name] if seen[w] == 1)
    if len(pool) < words:
        sys.exit("langid_corpus.sh: the %s list has %d words of its own, fewer than %d a row" % (name, len(pool), words))
    print("%s: %d words of its own (of %d)" % (name, len(pool), len(pools[name])), file=sys.stderr)
    for _ in range(rows):
        lines.append(name + "\t" + " ".join(rng.sample(pool, words)))
rng.shuffle(lines)
with open(out, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
print("wrote %s: %d rows, %d languages, %d words a row" % (out, len(lines), len(langs), words), file=sys.stderr)
EOF
