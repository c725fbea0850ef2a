# gnuplot script: draws forms_head.png (run it in its directory)
if (strstrt(' '.GPVAL_TERMINALS.' ', ' png ') > 0) { set terminal png size 1640,580 noenhanced } else { set terminal pngcairo size 1640,580 noenhanced font ',10' }
set output 'forms_head.png'
set palette defined (-1 '#0000ff', 0 '#ffffff', 1 '#ff0000')
unset colorbox
unset key
set tics scale 0
set xtics font ',9'
set ytics font ',9'
set multiplot
set label 1 'Each head''s metric tensor next to sdpa''s Wq Wk^T (dk x dk)' at screen 0.5, screen 0.9586 center font ',14'
set label 2 'metric: M_h (symmetric by construction), quadratic: M_h, sdpa: Wq_h Wk_h^T (the [dk, D] projections)' at screen 0.5, screen 0.9241 center textcolor rgb '#555555'
set lmargin at screen 0.0256
set rmargin at screen 0.0878
set tmargin at screen 0.8103
set bmargin at screen 0.6345
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.246469:0.246469]
set title 'L0 h0 sdpa: Wq Wk^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 0 matrix with image, \
    '' index 0 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 0 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
unset label 1
unset label 2
set lmargin at screen 0.1354
set rmargin at screen 0.1976
set tmargin at screen 0.8103
set bmargin at screen 0.6345
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.203783:0.203783]
set title 'L0 h1 sdpa: Wq Wk^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 1 matrix with image, \
    '' index 1 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 1 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.2451
set rmargin at screen 0.3073
set tmargin at screen 0.8103
set bmargin at screen 0.6345
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.23591:0.23591]
set title 'L0 h2 sdpa: Wq Wk^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 2 matrix with image, \
    '' index 2 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 2 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.3549
set rmargin at screen 0.4171
set tmargin at screen 0.8103
set bmargin at screen 0.6345
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-1:1]
set title 'L0 h0 metric: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 3 matrix with image, \
    '' index 3 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 3 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.4646
set rmargin at screen 0.5268
set tmargin at screen 0.8103
set bmargin at screen 0.6345
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-1:1]
set title 'L0 h1 metric: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 4 matrix with image, \
    '' index 4 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 4 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.5744
set rmargin at screen 0.6366
set tmargin at screen 0.8103
set bmargin at screen 0.6345
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-1:1]
set title 'L0 h2 metric: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 5 matrix with image, \
    '' index 5 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 5 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.6841
set rmargin at screen 0.7463
set tmargin at screen 0.8103
set bmargin at screen 0.6345
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.528154:0.528154]
set title 'L0 h0 quadratic: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 6 matrix with image, \
    '' index 6 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 6 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.7939
set rmargin at screen 0.8561
set tmargin at screen 0.8103
set bmargin at screen 0.6345
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.443778:0.443778]
set title 'L0 h1 quadratic: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 7 matrix with image, \
    '' index 7 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 7 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.9037
set rmargin at screen 0.9659
set tmargin at screen 0.8103
set bmargin at screen 0.6345
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.510689:0.510689]
set title 'L0 h2 quadratic: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 8 matrix with image, \
    '' index 8 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 8 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.0256
set rmargin at screen 0.0878
set tmargin at screen 0.5172
set bmargin at screen 0.3414
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.18519:0.18519]
set title 'L1 h0 sdpa: Wq Wk^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 9 matrix with image, \
    '' index 9 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 9 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.1354
set rmargin at screen 0.1976
set tmargin at screen 0.5172
set bmargin at screen 0.3414
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.224364:0.224364]
set title 'L1 h1 sdpa: Wq Wk^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 10 matrix with image, \
    '' index 10 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 10 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.2451
set rmargin at screen 0.3073
set tmargin at screen 0.5172
set bmargin at screen 0.3414
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.140732:0.140732]
set title 'L1 h2 sdpa: Wq Wk^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 11 matrix with image, \
    '' index 11 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 11 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.3549
set rmargin at screen 0.4171
set tmargin at screen 0.5172
set bmargin at screen 0.3414
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-1:1]
set title 'L1 h0 metric: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 12 matrix with image, \
    '' index 12 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 12 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.4646
set rmargin at screen 0.5268
set tmargin at screen 0.5172
set bmargin at screen 0.3414
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-1:1]
set title 'L1 h1 metric: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 13 matrix with image, \
    '' index 13 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 13 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.5744
set rmargin at screen 0.6366
set tmargin at screen 0.5172
set bmargin at screen 0.3414
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-1:1]
set title 'L1 h2 metric: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 14 matrix with image, \
    '' index 14 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 14 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.6841
set rmargin at screen 0.7463
set tmargin at screen 0.5172
set bmargin at screen 0.3414
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.55362:0.55362]
set title 'L1 h0 quadratic: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 15 matrix with image, \
    '' index 15 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 15 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.7939
set rmargin at screen 0.8561
set tmargin at screen 0.5172
set bmargin at screen 0.3414
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.696579:0.696579]
set title 'L1 h1 quadratic: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 16 matrix with image, \
    '' index 16 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 16 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.9037
set rmargin at screen 0.9659
set tmargin at screen 0.5172
set bmargin at screen 0.3414
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.58453:0.58453]
set title 'L1 h2 quadratic: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 17 matrix with image, \
    '' index 17 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 17 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.0256
set rmargin at screen 0.0878
set tmargin at screen 0.2241
set bmargin at screen 0.0483
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.272815:0.272815]
set title 'L2 h0 sdpa: Wq Wk^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 18 matrix with image, \
    '' index 18 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 18 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.1354
set rmargin at screen 0.1976
set tmargin at screen 0.2241
set bmargin at screen 0.0483
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.175953:0.175953]
set title 'L2 h1 sdpa: Wq Wk^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 19 matrix with image, \
    '' index 19 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 19 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.2451
set rmargin at screen 0.3073
set tmargin at screen 0.2241
set bmargin at screen 0.0483
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.352721:0.352721]
set title 'L2 h2 sdpa: Wq Wk^T' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 20 matrix with image, \
    '' index 20 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 20 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.3549
set rmargin at screen 0.4171
set tmargin at screen 0.2241
set bmargin at screen 0.0483
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-1:1]
set title 'L2 h0 metric: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 21 matrix with image, \
    '' index 21 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 21 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.4646
set rmargin at screen 0.5268
set tmargin at screen 0.2241
set bmargin at screen 0.0483
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-1:1]
set title 'L2 h1 metric: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 22 matrix with image, \
    '' index 22 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 22 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.5744
set rmargin at screen 0.6366
set tmargin at screen 0.2241
set bmargin at screen 0.0483
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-1:1]
set title 'L2 h2 metric: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 23 matrix with image, \
    '' index 23 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 23 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.6841
set rmargin at screen 0.7463
set tmargin at screen 0.2241
set bmargin at screen 0.0483
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.509478:0.509478]
set title 'L2 h0 quadratic: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 24 matrix with image, \
    '' index 24 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 24 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.7939
set rmargin at screen 0.8561
set tmargin at screen 0.2241
set bmargin at screen 0.0483
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.522136:0.522136]
set title 'L2 h1 quadratic: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 25 matrix with image, \
    '' index 25 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 25 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.9037
set rmargin at screen 0.9659
set tmargin at screen 0.2241
set bmargin at screen 0.0483
set xrange [-0.5:2.5]
set yrange [2.5:-0.5]
set cbrange [-0.621792:0.621792]
set title 'L2 h2 quadratic: M' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2)
set ytics ('0' 0, '1' 1, '2' 2)
plot 'forms_head.dat' index 26 matrix with image, \
    '' index 26 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 26 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
unset multiplot
