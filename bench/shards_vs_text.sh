#!/bin/bash
# run from a folder with train.bin / val.bin (the text's character ids as raw uint16); T: the train binary
T=${T:-$(dirname "$0")/../build/train}
C="--d-model 64 --heads 4 --layers 2 --d-ff 256 --seq-len 64 --batch 16 --steps 150 --eval-every 0 --eval-batches 1 --sample 0 --threads 1 --log-every 100"
for r in 1 2 3 4 5 6; do
  $T /work/shared/data/tinyshakespeare.txt $C | sed -n 's/^trained.*(\([0-9]*\) tokens\/s).*/text \1/p'
  $T --data train.bin --valid val.bin --vocab 65 $C | sed -n 's/^trained.*(\([0-9]*\) tokens\/s).*/shards \1/p'
done
