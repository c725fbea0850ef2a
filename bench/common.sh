# bench/common.sh - the shell helpers bench/run.sh (CPU) and bench/run_cuda.sh (GPU) share.
# Source it after setting REPORT (the report file rep() appends to).
say() { printf '%s\n' "$*"; }
rep() { printf '%s\n' "$*" >> "$REPORT"; printf '%s\n' "$*"; }   # to the report and the terminal
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }                        # RESULT lines -> values
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print ""; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
maxval() { sort -g | tail -n 1; }
relabel() { sed "s/ mixer=[^ ]* / mixer=$1 /"; }  # a RESULT line renamed to its row (compressive runs --mixer relative)
