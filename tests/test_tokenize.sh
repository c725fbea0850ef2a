#!/usr/bin/env bash
# The tokenize example (examples/tokenize.c) end to end, on files the test writes (no download):
# byte, character, GPT-2-format (a tiny vocabulary written here) and trained BPE vocabularies; the
# shards hold the encoding of the whole text split at the stated fraction, in llm.c's format or raw
# uint16; the pieces encoded for the progress line give the ids of the whole text; the tokenizer
# file loads back; every user error exits 1 with a message that names it.
# Needs build/tokenize (make build/tokenize). Prints ok/FAIL lines and the runner's summary line.
set -u
cd "$(dirname "$0")/.."
TOK=${TOK:-$PWD/build/tokenize}
# shellcheck source=tests/lib.sh
. tests/lib.sh
start_test "$TOK" "make build/tokenize"
export LC_ALL=C # awk and od work on bytes

# ---- helpers: the shards read with od (little-endian host) ----
header() { od -An -t u4 -N 12 "$1" | awk '{ print $1, $2, $3 }'; }        # "magic version count"
ids16()  { od -An -v -t u2 -j "${2:-0}" "$1" | awk '{ for (i = 1; i <= NF; i++) print $i }'; }
llmc()   { ids16 "$1" 1024; }                                              # the ids of an llm.c shard
bytes()  { od -An -v -t u1 "$1" | awk '{ for (i = 1; i <= NF; i++) print $i }'; }
size()   { wc -c < "$1" | tr -d ' '; }
tokens() { sed -n 's/.* -> \([0-9]*\) tokens .*/\1/p' "$1"; }              # from the summary line
vocab()  { sed -n 's/.*, vocabulary \([0-9]*\) .*/\1/p' "$1"; }
# round(F * n), as tokenize splits
n_val()  { awk -v f="$1" -v n="$2" 'BEGIN { printf "%d", f * n + 0.5 }'; }
# an llm.c shard is well formed: header magic 20240520, version 1, the count; 1024 + 2 * count bytes
well_formed() { [ "$(header "$1")" = "20240520 1 $2" ] && [ "$(size "$1")" -eq $((1024 + 2 * $2)) ]; }

# a few KB of text with UTF-8 (2-, 3- and 4-byte characters), digits, punctuation and newlines
awk 'BEGIN {
    n = split("The king|A queen|My lord|Good sir|The people|Her brother|That soldier|Der König|La reine", s, "|");
    m = split("speaks of|dreams of|fights for|laughs at|waits for|sings to|weeps for|träumt von|rêve de", v, "|");
    k = split("the crown|the sea|his honour|a red rose|the long night|our fortune|日本の月|café crème|🌙 moon", o, "|");
    for (i = 0; i < 120; i++) printf "%s %s %s, %d times in %d.\n", s[i % n + 1], v[(i * 7 + int(i / 3)) % m + 1], o[(i * 5 + 3) % k + 1], i * 37 % 100, 1500 + i;
}' > text.txt
n_bytes=$(size text.txt)

# ==== 1. --bytes: the ids are the bytes, split at round(0.1 * n), llm.c's header ====
"$TOK" --bytes text.txt --out b > b.out 2>&1; rc=$?
nv=$(n_val 0.1 "$n_bytes"); nt=$((n_bytes - nv))
if [ $rc -eq 0 ] && [ "$(tokens b.out)" = "$n_bytes" ] && [ "$(vocab b.out)" = 256 ]
then ok "--bytes: $n_bytes bytes -> $n_bytes tokens, vocabulary 256"
else bad "--bytes: $n_bytes bytes -> $n_bytes tokens, vocabulary 256" "rc $rc" "$(cat b.out)"; fi
if well_formed b_train.bin "$nt" && well_formed b_val.bin "$nv"
then ok "--bytes: llm.c headers (20240520, 1, count) and sizes: $nt train + $nv val = $n_bytes, val = round(0.1 * n)"
else bad "--bytes: llm.c headers and sizes ($nt + $nv)" "$(header b_train.bin) / $(header b_val.bin)" \
         "$(size b_train.bin) / $(size b_val.bin)"; fi
if [ "$(cat <(llmc b_train.bin) <(llmc b_val.bin))" = "$(bytes text.txt)" ]
then ok "--bytes: train then val ids are the text's bytes, in order"
else bad "--bytes: train then val ids are the text's bytes, in order"; fi
if grep -q "^train: $nt tokens -> b_train.bin$" b.out && grep -q "^val:   $nv tokens -> b_val.bin$" b.out &&
   grep -q '^tokenizer -> b.tok$' b.out && grep -q '[0-9.]* bytes/token), vocabulary 256 (bytes), [0-9.]* s, [0-9.]* MB/s$' b.out
then ok "the summary: bytes, tokens, bytes/token, vocabulary, time, MB/s, the files"
else bad "the summary: bytes, tokens, bytes/token, vocabulary, time, MB/s, the files" "$(cat b.out)"; fi

# several files are concatenated in order: the same shards as one file with their text
head -c 1000 text.txt > part1.txt; tail -c +1001 text.txt > part2.txt
"$TOK" --bytes part1.txt part2.txt --out b2 > b2.out 2>&1; rc=$?
if [ $rc -eq 0 ] && cmp -s b_train.bin b2_train.bin && cmp -s b_val.bin b2_val.bin && grep -q '^2 files, ' b2.out
then ok "two files are encoded as their concatenation"
else bad "two files are encoded as their concatenation" "rc $rc" "$(cat b2.out)"; fi

# --val-fraction and --format raw16 (the uint16 ids alone)
"$TOK" --bytes text.txt --out r --format raw16 --val-fraction 0.25 > r.out 2>&1; rc=$?
nv=$(n_val 0.25 "$n_bytes"); nt=$((n_bytes - nv))
if [ $rc -eq 0 ] && [ "$(size r_train.bin)" -eq $((2 * nt)) ] && [ "$(size r_val.bin)" -eq $((2 * nv)) ] &&
   [ "$(cat <(ids16 r_train.bin) <(ids16 r_val.bin))" = "$(bytes text.txt)" ]
then ok "--format raw16 --val-fraction 0.25: $nt + $nv uint16 ids without a header, the text's bytes"
else bad "--format raw16 --val-fraction 0.25: $nt + $nv uint16 ids without a header" "rc $rc" "$(cat r.out)"; fi

# ==== 2. --chars: id = rank of the byte among the text's distinct bytes ====
"$TOK" --chars text.txt --out c > c.out 2>&1; rc=$?
distinct=$(bytes text.txt | sort -n -u | wc -l | tr -d ' ')
want=$(bytes text.txt | awk 'NR == FNR { rank[$1] = r++; next } { print rank[$1] }' <(bytes text.txt | sort -n -u) -)
if [ $rc -eq 0 ] && [ "$(vocab c.out)" = "$distinct" ] && [ "$(cat <(llmc c_train.bin) <(llmc c_val.bin))" = "$want" ]
then ok "--chars: vocabulary of the $distinct distinct bytes, id = rank"
else bad "--chars: vocabulary of the $distinct distinct bytes, id = rank" "rc $rc" "$(cat c.out)"; fi

# ==== 3. --gpt2 DIR: a tiny vocabulary in GPT-2's format ====
# encoder.json: GPT-2's 256 byte tokens (bytes_to_unicode: the printable bytes stand for themselves,
# the others for U+0100 onwards, in GPT-2's id order) and 6 merged tokens whose ids are NOT in merge
# order, so the test sees that ids come from encoder.json; vocab.bpe: the merges in rank order.
mkdir gpt2
awk 'function utf8(c) { return c < 128 ? sprintf("%c", c) : sprintf("%c%c", 192 + int(c / 64), 128 + c % 64) }
     function key(b) { return b == 34 ? "\"\\\"\"" : b == 92 ? "\"\\\\\"" : "\"" utf8(ch[b]) "\"" }
BEGIN {
    n = 0
    for (b = 33; b <= 126; b++) { ch[b] = b; order[n++] = b }
    for (b = 161; b <= 172; b++) { ch[b] = b; order[n++] = b }
    for (b = 174; b <= 255; b++) { ch[b] = b; order[n++] = b }
    k = 0
    for (b = 0; b < 256; b++) if (!(b in ch)) { ch[b] = 256 + k++; order[n++] = b }
    printf "{"
    for (i = 0; i < 256; i++) printf "%s: %d, ", key(order[i]), i
    G = utf8(ch[32]); q = sprintf("%c", 39)   # the space ("Ġ") and the apostrophe
    printf "\"%scat\": 256, \"at\": 257, \"%sc\": 258, \"the\": 259, \"he\": 260, \"%ss\": 261}\n", G, G, q
    printf "#version: 0.2\nh e\nt he\n%s c\na t\n%sc at\n%s s\n", G, G, q > "gpt2/vocab.bpe"
}' > gpt2/encoder.json
printf "the cat\nthe hat it's café 42\n" > g.txt
# pre-tokens: the|Ġcat|\n|the|Ġhat|Ġit|'s|Ġcafé|Ġ42|\n; bytes: Ġ 220, \n 198, h 71, i 72, t 83,
# a 64, f 69, é = C3 A9: 127 102, 4 19, 2 17; merged: the 259, Ġcat 256, at 257, 's 261, Ġc 258
gwant="259 256 198 259 220 71 257 220 72 83 261 258 64 69 127 102 220 19 17 198"
"$TOK" --gpt2 gpt2 g.txt --out g > g.out 2>&1; rc=$?
got=$(cat <(llmc g_train.bin 2> /dev/null) <(llmc g_val.bin 2> /dev/null) | tr '\n' ' ')
if [ $rc -eq 0 ] && [ "$got" = "$gwant " ] && [ "$(vocab g.out)" = 262 ] && well_formed g_val.bin 2
then ok "--gpt2 DIR (a tiny GPT-2-format vocabulary): the expected ids, 18 + 2"
else bad "--gpt2 DIR (a tiny GPT-2-format vocabulary): the expected ids" "rc $rc" "want $gwant" "got  $got" "$(cat g.out)"; fi

# the pieces of the progress line give the ids of the whole text (--piece-bytes 1: a cut at every
# point where one is allowed; 0: one piece)
for i in 1 2 3 4 5 6 7 8; do cat g.txt; printf "the cat  sat \n\n  on the hat's rim,\n42 times\r\n"; done > g8.txt
cat text.txt >> g8.txt
"$TOK" --gpt2 gpt2 g8.txt --out whole --piece-bytes 0 > whole.out 2>&1; rc1=$?
"$TOK" --gpt2 gpt2 g8.txt --out piece --piece-bytes 1 > piece.out 2>&1; rc2=$?
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && cmp -s whole_train.bin piece_train.bin && cmp -s whole_val.bin piece_val.bin
then ok "--gpt2: encoded in pieces (--piece-bytes 1) = encoded whole"
else bad "--gpt2: encoded in pieces (--piece-bytes 1) = encoded whole" "rc $rc1 $rc2" "$(cat whole.out piece.out)"; fi

# ==== 4. --train-bpe: a vocabulary of 300, fewer tokens than bytes; the .tok loads back ====
"$TOK" --train-bpe 300 text.txt --out t > t.out 2>&1; rc=$?
nt=$(tokens t.out)
if [ $rc -eq 0 ] && [ "$(vocab t.out)" = 300 ] && [ -n "$nt" ] && [ "$nt" -lt $((n_bytes * 2 / 3)) ] &&
   well_formed t_train.bin $((nt - $(n_val 0.1 "$nt"))) && grep -q '^trained BPE: 300 ids (256 bytes + 44 merges)' t.out
then ok "--train-bpe 300: 44 merges, $nt tokens for $n_bytes bytes"
else bad "--train-bpe 300: 44 merges, fewer tokens than bytes" "rc $rc" "$(cat t.out)"; fi
"$TOK" --train-bpe 300 text.txt --out tp --piece-bytes 1 > tp.out 2>&1; rc=$?
if [ $rc -eq 0 ] && cmp -s t_train.bin tp_train.bin && cmp -s t_val.bin tp_val.bin
then ok "--train-bpe: encoded in pieces (--piece-bytes 1) = encoded whole"
else bad "--train-bpe: encoded in pieces (--piece-bytes 1) = encoded whole" "rc $rc" "$(cat tp.out)"; fi
for k in t g c b; do
    args=(text.txt); [ $k = g ] && args=(g8.txt)
    "$TOK" --tokenizer $k.tok "${args[@]}" --out re$k > re$k.out 2>&1; rc=$?
    ref=$k; [ $k = g ] && ref=whole
    if [ $rc -eq 0 ] && cmp -s ${ref}_train.bin re${k}_train.bin && cmp -s ${ref}_val.bin re${k}_val.bin &&
       cmp -s $k.tok re$k.tok
    then ok "$k.tok loads back (--tokenizer): the same ids, and it saves the same file"
    else bad "$k.tok loads back (--tokenizer): the same ids, and it saves the same file" "rc $rc" "$(cat re$k.out)"; fi
done

# ==== 5. errors: exit 1 and a message that names the problem ====
: > empty.txt
mkdir adir half
cp gpt2/encoder.json half/
printf 'ab' > ab.txt
expect_error "no vocabulary given"         "no vocabulary given"           "$TOK" text.txt --out x
expect_error "two vocabularies given"      "--bytes and --chars both"      "$TOK" --bytes --chars text.txt --out x
expect_error "no input file"               "no input file"                 "$TOK" --bytes --out x
expect_error "no --out"                    "no --out PREFIX"               "$TOK" --bytes text.txt
expect_error "--gpt2: missing folder"      '--gpt2 "nodir": no such folder' "$TOK" --gpt2 nodir text.txt --out x
expect_error "--gpt2: vocab.bpe missing"   '"half/vocab.bpe" is missing'   "$TOK" --gpt2 half text.txt --out x
expect_error "missing input file"          'cannot open "nofile.txt"'      "$TOK" --bytes nofile.txt --out x
expect_error "unreadable input (a folder)" 'cannot read "adir"'            "$TOK" --bytes adir --out x
expect_error "empty input"                 '"empty.txt" is empty'          "$TOK" --bytes text.txt empty.txt --out x
expect_error "vocabulary above 65,536 ids" "at most 65,536 ids"            "$TOK" --train-bpe 70000 text.txt --out x
expect_error "--val-fraction 0"            "--val-fraction must be between 0 and 1" "$TOK" --bytes text.txt --out x --val-fraction 0
expect_error "--val-fraction 1"            "--val-fraction must be between 0 and 1" "$TOK" --bytes text.txt --out x --val-fraction 1
expect_error "--val-fraction 1.5"          "--val-fraction must be between 0 and 1" "$TOK" --bytes text.txt --out x --val-fraction 1.5
expect_error "empty validation part"       "the validation part would be empty" "$TOK" --bytes ab.txt --out x
expect_error "empty training part"         "the training part would be empty" "$TOK" --bytes ab.txt --out x --val-fraction 0.9
expect_error "output folder missing"       'the output folder "no/such" of --out no/such/x does not exist' \
                                                                           "$TOK" --bytes text.txt --out no/such/x
expect_error "--train-bpe below 257"       "--train-bpe must be >= 257"    "$TOK" --train-bpe 100 text.txt --out x
expect_error "unknown --format"            'unknown --format "u32"'        "$TOK" --bytes text.txt --out x --format u32
expect_error "--tokenizer: missing file"   '--tokenizer "no.tok": no such file' "$TOK" --tokenizer no.tok text.txt --out x
expect_error "--tokenizer: not a tokenizer" "is not a tokenizer file"      "$TOK" --tokenizer text.txt text.txt --out x
# a character vocabulary cannot encode a byte it lacks
printf '@@@\n' > other.txt
expect_error "--tokenizer chars: a byte outside it" "not in the"           "$TOK" --tokenizer c.tok other.txt --out x
if [ ! -e x_train.bin ] && [ ! -e x_val.bin ] && [ ! -e x.tok ]; then ok "a refused run writes nothing"
else bad "a refused run writes nothing" "$(ls x*)"; fi

# ==== 6. --help lists every option ====
"$TOK" --help > help.out 2>&1; rc=$?
missing=""
for o in gpt2 train-bpe bytes chars tokenizer out val-fraction format min-frequency piece-bytes help; do
    grep -q -- "--$o" help.out || missing="$missing --$o"
done
if [ $rc -eq 0 ] && [ -z "$missing" ]; then ok "--help lists every option"
else bad "--help lists every option" "rc $rc, missing:$missing" "$(cat help.out)"; fi

finish
