# gnuplot script: draws loss.png (run it in its directory)
if (strstrt(' '.GPVAL_TERMINALS.' ', ' pngcairo ') > 0) { set terminal pngcairo size 900,540 noenhanced font ',10' } else { set terminal png size 900,540 noenhanced }
set output 'loss.png'
set grid
set key outside right top
set title 'Training loss, mean of 2 seeds (band: ± one sd; each point the mean of 2 steps)'
set xlabel 'step'
set ylabel 'cross-entropy (nats per token)'
plot 'loss.dat' index 0 using 1:3:4 with filledcurves fillcolor rgb '#1f77b4' fillstyle transparent solid 0.18 noborder notitle, \
     'loss.dat' index 1 using 1:3:4 with filledcurves fillcolor rgb '#ff7f0e' fillstyle transparent solid 0.18 noborder notitle, \
     'loss.dat' index 2 using 1:3:4 with filledcurves fillcolor rgb '#2ca02c' fillstyle transparent solid 0.18 noborder notitle, \
     'loss.dat' index 3 using 1:3:4 with filledcurves fillcolor rgb '#d62728' fillstyle transparent solid 0.18 noborder notitle, \
     'loss.dat' index 4 using 1:3:4 with filledcurves fillcolor rgb '#9467bd' fillstyle transparent solid 0.18 noborder notitle, \
     'loss.dat' index 0 using 1:2 with lines lw 2 lc rgb '#1f77b4' title 'sdpa', \
     'loss.dat' index 1 using 1:2 with lines lw 2 lc rgb '#ff7f0e' title 'metric', \
     'loss.dat' index 2 using 1:2 with lines lw 2 lc rgb '#2ca02c' title 'quadratic', \
     'loss.dat' index 3 using 1:2 with lines lw 2 lc rgb '#d62728' title 'pool', \
     'loss.dat' index 4 using 1:2 with lines lw 2 lc rgb '#9467bd' title 'identity'
