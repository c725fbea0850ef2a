# gnuplot script: draws embeddings.png (run it in its directory)
if (strstrt(' '.GPVAL_TERMINALS.' ', ' png ') > 0) { set terminal png size 740,580 noenhanced } else { set terminal pngcairo size 740,580 noenhanced font ',10' }
set output 'embeddings.png'
set palette defined (-1 '#0000ff', 0 '#ffffff', 1 '#ff0000')
unset colorbox
unset key
set tics scale 0
set xtics font ',9'
set ytics font ',9'
set multiplot
set label 1 'Distances between the learned token embeddings (seed form)' at screen 0.5, screen 0.9586 center font ',14'
set label 2 'left: Euclidean; then per head of layer 0: (e_i - e_j) A_h (e_i - e_j)^T, A_h the head''s D x D form' at screen 0.5, screen 0.9241 center textcolor rgb '#555555'
set lmargin at screen 0.0568
set rmargin at screen 0.1946
set tmargin at screen 0.8103
set bmargin at screen 0.6345
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-4.78062:4.78062]
set title 'sdpa: |e_i - e_j|' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'embeddings.dat' index 0 matrix with image, \
    '' index 0 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 0 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
unset label 1
unset label 2
set lmargin at screen 0.3000
set rmargin at screen 0.4378
set tmargin at screen 0.8103
set bmargin at screen 0.6345
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.733456:0.733456]
set title 'sdpa head 0: d A d^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'embeddings.dat' index 1 matrix with image, \
    '' index 1 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 1 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.5432
set rmargin at screen 0.6811
set tmargin at screen 0.8103
set bmargin at screen 0.6345
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-1.41523:1.41523]
set title 'sdpa head 1: d A d^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'embeddings.dat' index 2 matrix with image, \
    '' index 2 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 2 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.7865
set rmargin at screen 0.9243
set tmargin at screen 0.8103
set bmargin at screen 0.6345
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.624789:0.624789]
set title 'sdpa head 2: d A d^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'embeddings.dat' index 3 matrix with image, \
    '' index 3 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 3 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.0568
set rmargin at screen 0.1946
set tmargin at screen 0.5172
set bmargin at screen 0.3414
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-4.82064:4.82064]
set title 'metric: |e_i - e_j|' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'embeddings.dat' index 4 matrix with image, \
    '' index 4 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 4 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.3000
set rmargin at screen 0.4378
set tmargin at screen 0.5172
set bmargin at screen 0.3414
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.693482:0.693482]
set title 'metric head 0: d A d^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'embeddings.dat' index 5 matrix with image, \
    '' index 5 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 5 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.5432
set rmargin at screen 0.6811
set tmargin at screen 0.5172
set bmargin at screen 0.3414
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.720312:0.720312]
set title 'metric head 1: d A d^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'embeddings.dat' index 6 matrix with image, \
    '' index 6 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 6 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.7865
set rmargin at screen 0.9243
set tmargin at screen 0.5172
set bmargin at screen 0.3414
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-1.06364:1.06364]
set title 'metric head 2: d A d^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'embeddings.dat' index 7 matrix with image, \
    '' index 7 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 7 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.0568
set rmargin at screen 0.1946
set tmargin at screen 0.2241
set bmargin at screen 0.0483
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-4.77765:4.77765]
set title 'quadratic: |e_i - e_j|' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'embeddings.dat' index 8 matrix with image, \
    '' index 8 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 8 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.3000
set rmargin at screen 0.4378
set tmargin at screen 0.2241
set bmargin at screen 0.0483
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-1.10159:1.10159]
set title 'quadratic head 0: d A d^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'embeddings.dat' index 9 matrix with image, \
    '' index 9 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 9 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.5432
set rmargin at screen 0.6811
set tmargin at screen 0.2241
set bmargin at screen 0.0483
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.742011:0.742011]
set title 'quadratic head 1: d A d^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'embeddings.dat' index 10 matrix with image, \
    '' index 10 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 10 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.7865
set rmargin at screen 0.9243
set tmargin at screen 0.2241
set bmargin at screen 0.0483
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-1.08707:1.08707]
set title 'quadratic head 2: d A d^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'embeddings.dat' index 11 matrix with image, \
    '' index 11 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 11 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
unset multiplot
