# gnuplot script: draws metric_heads_init.png (run it in its directory)
if (strstrt(' '.GPVAL_TERMINALS.' ', ' png ') > 0) { set terminal png size 1484,782 noenhanced } else { set terminal pngcairo size 1484,782 noenhanced font ',10' }
set output 'metric_heads_init.png'
set palette defined (-1 '#0000ff', 0 '#ffffff', 1 '#ff0000')
unset colorbox
unset key
set tics scale 0
set xtics font ',9'
set ytics font ',9'
set multiplot
set label 1 'The metric heads M_h of the metric model at initialisation (softmax_tril form, seed 1)' at screen 0.5, screen 0.9693 center font ',14'
set label 2 'score = p M_h p''^T / sqrt(dk), p = Wp_h x; each panel on its own scale (red +, blue -)' at screen 0.5, screen 0.9437 center textcolor rgb '#555555'
set lmargin at screen 0.0283
set rmargin at screen 0.2224
set tmargin at screen 0.8593
set bmargin at screen 0.4910
set xrange [-0.5:15.5]
set yrange [15.5:-0.5]
set cbrange [-1:1]
set title 'layer 0 head 0' offset 0,-0.6
set xtics ('0' 0, '2' 2, '4' 4, '6' 6, '8' 8, '10' 10, '12' 12, '14' 14)
set ytics ('0' 0, '2' 2, '4' 4, '6' 6, '8' 8, '10' 10, '12' 12, '14' 14)
plot 'metric_heads_init.dat' index 0 matrix with image, \
    '' index 0 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder
unset label 1
unset label 2
set lmargin at screen 0.2749
set rmargin at screen 0.4690
set tmargin at screen 0.8593
set bmargin at screen 0.4910
set xrange [-0.5:15.5]
set yrange [15.5:-0.5]
set cbrange [-1:1]
set title 'layer 0 head 1' offset 0,-0.6
set xtics ('0' 0, '2' 2, '4' 4, '6' 6, '8' 8, '10' 10, '12' 12, '14' 14)
set ytics ('0' 0, '2' 2, '4' 4, '6' 6, '8' 8, '10' 10, '12' 12, '14' 14)
plot 'metric_heads_init.dat' index 1 matrix with image, \
    '' index 1 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder
set lmargin at screen 0.5216
set rmargin at screen 0.7156
set tmargin at screen 0.8593
set bmargin at screen 0.4910
set xrange [-0.5:15.5]
set yrange [15.5:-0.5]
set cbrange [-1:1]
set title 'layer 0 head 2' offset 0,-0.6
set xtics ('0' 0, '2' 2, '4' 4, '6' 6, '8' 8, '10' 10, '12' 12, '14' 14)
set ytics ('0' 0, '2' 2, '4' 4, '6' 6, '8' 8, '10' 10, '12' 12, '14' 14)
plot 'metric_heads_init.dat' index 2 matrix with image, \
    '' index 2 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder
set lmargin at screen 0.7682
set rmargin at screen 0.9623
set tmargin at screen 0.8593
set bmargin at screen 0.4910
set xrange [-0.5:15.5]
set yrange [15.5:-0.5]
set cbrange [-1:1]
set title 'layer 0 head 3' offset 0,-0.6
set xtics ('0' 0, '2' 2, '4' 4, '6' 6, '8' 8, '10' 10, '12' 12, '14' 14)
set ytics ('0' 0, '2' 2, '4' 4, '6' 6, '8' 8, '10' 10, '12' 12, '14' 14)
plot 'metric_heads_init.dat' index 3 matrix with image, \
    '' index 3 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder
set lmargin at screen 0.0283
set rmargin at screen 0.2224
set tmargin at screen 0.4041
set bmargin at screen 0.0358
set xrange [-0.5:15.5]
set yrange [15.5:-0.5]
set cbrange [-1:1]
set title 'layer 1 head 0' offset 0,-0.6
set xtics ('0' 0, '2' 2, '4' 4, '6' 6, '8' 8, '10' 10, '12' 12, '14' 14)
set ytics ('0' 0, '2' 2, '4' 4, '6' 6, '8' 8, '10' 10, '12' 12, '14' 14)
plot 'metric_heads_init.dat' index 4 matrix with image, \
    '' index 4 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder
set lmargin at screen 0.2749
set rmargin at screen 0.4690
set tmargin at screen 0.4041
set bmargin at screen 0.0358
set xrange [-0.5:15.5]
set yrange [15.5:-0.5]
set cbrange [-1:1]
set title 'layer 1 head 1' offset 0,-0.6
set xtics ('0' 0, '2' 2, '4' 4, '6' 6, '8' 8, '10' 10, '12' 12, '14' 14)
set ytics ('0' 0, '2' 2, '4' 4, '6' 6, '8' 8, '10' 10, '12' 12, '14' 14)
plot 'metric_heads_init.dat' index 5 matrix with image, \
    '' index 5 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder
set lmargin at screen 0.5216
set rmargin at screen 0.7156
set tmargin at screen 0.4041
set bmargin at screen 0.0358
set xrange [-0.5:15.5]
set yrange [15.5:-0.5]
set cbrange [-1:1]
set title 'layer 1 head 2' offset 0,-0.6
set xtics ('0' 0, '2' 2, '4' 4, '6' 6, '8' 8, '10' 10, '12' 12, '14' 14)
set ytics ('0' 0, '2' 2, '4' 4, '6' 6, '8' 8, '10' 10, '12' 12, '14' 14)
plot 'metric_heads_init.dat' index 6 matrix with image, \
    '' index 6 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder
set lmargin at screen 0.7682
set rmargin at screen 0.9623
set tmargin at screen 0.4041
set bmargin at screen 0.0358
set xrange [-0.5:15.5]
set yrange [15.5:-0.5]
set cbrange [-1:1]
set title 'layer 1 head 3' offset 0,-0.6
set xtics ('0' 0, '2' 2, '4' 4, '6' 6, '8' 8, '10' 10, '12' 12, '14' 14)
set ytics ('0' 0, '2' 2, '4' 4, '6' 6, '8' 8, '10' 10, '12' 12, '14' 14)
plot 'metric_heads_init.dat' index 7 matrix with image, \
    '' index 7 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder
unset multiplot
