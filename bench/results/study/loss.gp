# gnuplot script: draws loss.png (run it in its directory)
if (strstrt(' '.GPVAL_TERMINALS.' ', ' pngcairo ') > 0) { set terminal pngcairo size 900,540 noenhanced font ',10' } else { set terminal png size 900,540 noenhanced }
set output 'loss.png'
set grid
set key outside right top
set title 'Training loss of the sorter (mean of every 10 steps)'
set xlabel 'epoch'
set ylabel 'cross-entropy (nats)'
plot 'loss.dat' index 0 using 1:2 with lines lw 2 lc rgb '#1f77b4' title 'sdpa, seed form', \
     'loss.dat' index 1 using 1:2 with lines lw 2 lc rgb '#ff7f0e' title 'metric, seed form', \
     'loss.dat' index 2 using 1:2 with lines lw 2 lc rgb '#2ca02c' title 'quadratic, seed form', \
     'loss.dat' index 3 using 1:2 with lines lw 2 lc rgb '#d62728' title 'sdpa, solvable form', \
     'loss.dat' index 4 using 1:2 with lines lw 2 lc rgb '#9467bd' title 'metric, solvable form', \
     'loss.dat' index 5 using 1:2 with lines lw 2 lc rgb '#8c564b' title 'quadratic, solvable form'
