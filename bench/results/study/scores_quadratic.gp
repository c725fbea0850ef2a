# gnuplot script: draws scores_quadratic.png (run it in its directory)
if (strstrt(' '.GPVAL_TERMINALS.' ', ' png ') > 0) { set terminal png size 1376,1396 noenhanced } else { set terminal pngcairo size 1376,1396 noenhanced font ',10' }
set output 'scores_quadratic.png'
set palette defined (-1 '#0000ff', 0 '#ffffff', 1 '#ff0000')
unset colorbox
unset key
set tics scale 0
set xtics font ',9'
set ytics font ',9'
set multiplot
set label 1 'quadratic attention scores on a fixed input (rows: queries, columns: keys)' at screen 0.5, screen 0.9828 center font ',14'
set label 2 'scaled as the softmax sees them; grey: masked (a key after the query)' at screen 0.5, screen 0.9685 center textcolor rgb '#555555'
set lmargin at screen 0.0305
set rmargin at screen 0.3023
set tmargin at screen 0.9212
set bmargin at screen 0.6533
set xrange [-0.5:10.5]
set yrange [10.5:-0.5]
set cbrange [-0.639386:0.639386]
set title 'layer 0 head 0' offset 0,-0.6
set xtics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
set ytics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
plot 'scores_quadratic.dat' index 0 matrix with image, \
    '' index 0 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 0 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
unset label 1
unset label 2
set lmargin at screen 0.3590
set rmargin at screen 0.6308
set tmargin at screen 0.9212
set bmargin at screen 0.6533
set xrange [-0.5:10.5]
set yrange [10.5:-0.5]
set cbrange [-0.303872:0.303872]
set title 'layer 0 head 1' offset 0,-0.6
set xtics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
set ytics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
plot 'scores_quadratic.dat' index 1 matrix with image, \
    '' index 1 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 1 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.6875
set rmargin at screen 0.9593
set tmargin at screen 0.9212
set bmargin at screen 0.6533
set xrange [-0.5:10.5]
set yrange [10.5:-0.5]
set cbrange [-0.283529:0.283529]
set title 'layer 0 head 2' offset 0,-0.6
set xtics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
set ytics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
plot 'scores_quadratic.dat' index 2 matrix with image, \
    '' index 2 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 2 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.0305
set rmargin at screen 0.3023
set tmargin at screen 0.6046
set bmargin at screen 0.3367
set xrange [-0.5:10.5]
set yrange [10.5:-0.5]
set cbrange [-0.34555:0.34555]
set title 'layer 1 head 0' offset 0,-0.6
set xtics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
set ytics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
plot 'scores_quadratic.dat' index 3 matrix with image, \
    '' index 3 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 3 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.3590
set rmargin at screen 0.6308
set tmargin at screen 0.6046
set bmargin at screen 0.3367
set xrange [-0.5:10.5]
set yrange [10.5:-0.5]
set cbrange [-1.09773:1.09773]
set title 'layer 1 head 1' offset 0,-0.6
set xtics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
set ytics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
plot 'scores_quadratic.dat' index 4 matrix with image, \
    '' index 4 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 4 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.6875
set rmargin at screen 0.9593
set tmargin at screen 0.6046
set bmargin at screen 0.3367
set xrange [-0.5:10.5]
set yrange [10.5:-0.5]
set cbrange [-0.852369:0.852369]
set title 'layer 1 head 2' offset 0,-0.6
set xtics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
set ytics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
plot 'scores_quadratic.dat' index 5 matrix with image, \
    '' index 5 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 5 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.0305
set rmargin at screen 0.3023
set tmargin at screen 0.2880
set bmargin at screen 0.0201
set xrange [-0.5:10.5]
set yrange [10.5:-0.5]
set cbrange [-0.443719:0.443719]
set title 'layer 2 head 0' offset 0,-0.6
set xtics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
set ytics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
plot 'scores_quadratic.dat' index 6 matrix with image, \
    '' index 6 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 6 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.3590
set rmargin at screen 0.6308
set tmargin at screen 0.2880
set bmargin at screen 0.0201
set xrange [-0.5:10.5]
set yrange [10.5:-0.5]
set cbrange [-0.52635:0.52635]
set title 'layer 2 head 1' offset 0,-0.6
set xtics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
set ytics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
plot 'scores_quadratic.dat' index 7 matrix with image, \
    '' index 7 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 7 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.6875
set rmargin at screen 0.9593
set tmargin at screen 0.2880
set bmargin at screen 0.0201
set xrange [-0.5:10.5]
set yrange [10.5:-0.5]
set cbrange [-1.37019:1.37019]
set title 'layer 2 head 2' offset 0,-0.6
set xtics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
set ytics ('2' 0, '0' 1, '1' 2, '1' 3, '0' 4, '2' 5, '2' 6, '1' 7, '0' 8, '0' 9, '1' 10)
plot 'scores_quadratic.dat' index 8 matrix with image, \
    '' index 8 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 8 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
unset multiplot
