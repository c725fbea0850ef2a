# gnuplot script: draws forms_model.png (run it in its directory)
if (strstrt(' '.GPVAL_TERMINALS.' ', ' png ') > 0) { set terminal png size 3476,1192 noenhanced } else { set terminal pngcairo size 3476,1192 noenhanced font ',10' }
set output 'forms_model.png'
set palette defined (-1 '#0000ff', 0 '#ffffff', 1 '#ff0000')
unset colorbox
unset key
set tics scale 0
set xtics font ',9'
set ytics font ',9'
set multiplot
set label 1 'Each head''s bilinear form on the layer input (D x D)' at screen 0.5, screen 0.9799 center font ',14'
set label 2 'score = x A x''^T / sqrt(dk); sdpa: Wq_h^T Wk_h, metric / quadratic: Wp_h^T M_h Wp_h' at screen 0.5, screen 0.9631 center textcolor rgb '#555555'
set lmargin at screen 0.0121
set rmargin at screen 0.1001
set tmargin at screen 0.9077
set bmargin at screen 0.6510
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.204724:0.204724]
set title 'L0 h0 sdpa: Wq^T Wk' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 0 matrix with image, \
    '' index 0 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 0 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
unset label 1
unset label 2
set lmargin at screen 0.1226
set rmargin at screen 0.2106
set tmargin at screen 0.9077
set bmargin at screen 0.6510
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.291246:0.291246]
set title 'L0 h1 sdpa: Wq^T Wk' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 1 matrix with image, \
    '' index 1 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 1 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.2330
set rmargin at screen 0.3211
set tmargin at screen 0.9077
set bmargin at screen 0.6510
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.26205:0.26205]
set title 'L0 h2 sdpa: Wq^T Wk' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 2 matrix with image, \
    '' index 2 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 2 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.3435
set rmargin at screen 0.4315
set tmargin at screen 0.9077
set bmargin at screen 0.6510
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.141658:0.141658]
set title 'L0 h0 metric: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 3 matrix with image, \
    '' index 3 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 3 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.4540
set rmargin at screen 0.5420
set tmargin at screen 0.9077
set bmargin at screen 0.6510
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.0984708:0.0984708]
set title 'L0 h1 metric: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 4 matrix with image, \
    '' index 4 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 4 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.5644
set rmargin at screen 0.6525
set tmargin at screen 0.9077
set bmargin at screen 0.6510
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.0914096:0.0914096]
set title 'L0 h2 metric: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 5 matrix with image, \
    '' index 5 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 5 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.6749
set rmargin at screen 0.7629
set tmargin at screen 0.9077
set bmargin at screen 0.6510
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.218226:0.218226]
set title 'L0 h0 quadratic: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 6 matrix with image, \
    '' index 6 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 6 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.7854
set rmargin at screen 0.8734
set tmargin at screen 0.9077
set bmargin at screen 0.6510
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.0873891:0.0873891]
set title 'L0 h1 quadratic: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 7 matrix with image, \
    '' index 7 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 7 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.8959
set rmargin at screen 0.9839
set tmargin at screen 0.9077
set bmargin at screen 0.6510
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.106287:0.106287]
set title 'L0 h2 quadratic: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 8 matrix with image, \
    '' index 8 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 8 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.0121
set rmargin at screen 0.1001
set tmargin at screen 0.5940
set bmargin at screen 0.3372
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.169142:0.169142]
set title 'L1 h0 sdpa: Wq^T Wk' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 9 matrix with image, \
    '' index 9 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 9 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.1226
set rmargin at screen 0.2106
set tmargin at screen 0.5940
set bmargin at screen 0.3372
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.217937:0.217937]
set title 'L1 h1 sdpa: Wq^T Wk' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 10 matrix with image, \
    '' index 10 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 10 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.2330
set rmargin at screen 0.3211
set tmargin at screen 0.5940
set bmargin at screen 0.3372
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.193639:0.193639]
set title 'L1 h2 sdpa: Wq^T Wk' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 11 matrix with image, \
    '' index 11 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 11 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.3435
set rmargin at screen 0.4315
set tmargin at screen 0.5940
set bmargin at screen 0.3372
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.121362:0.121362]
set title 'L1 h0 metric: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 12 matrix with image, \
    '' index 12 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 12 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.4540
set rmargin at screen 0.5420
set tmargin at screen 0.5940
set bmargin at screen 0.3372
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.32105:0.32105]
set title 'L1 h1 metric: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 13 matrix with image, \
    '' index 13 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 13 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.5644
set rmargin at screen 0.6525
set tmargin at screen 0.5940
set bmargin at screen 0.3372
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.196914:0.196914]
set title 'L1 h2 metric: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 14 matrix with image, \
    '' index 14 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 14 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.6749
set rmargin at screen 0.7629
set tmargin at screen 0.5940
set bmargin at screen 0.3372
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.0656411:0.0656411]
set title 'L1 h0 quadratic: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 15 matrix with image, \
    '' index 15 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 15 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.7854
set rmargin at screen 0.8734
set tmargin at screen 0.5940
set bmargin at screen 0.3372
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.15066:0.15066]
set title 'L1 h1 quadratic: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 16 matrix with image, \
    '' index 16 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 16 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.8959
set rmargin at screen 0.9839
set tmargin at screen 0.5940
set bmargin at screen 0.3372
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.177927:0.177927]
set title 'L1 h2 quadratic: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 17 matrix with image, \
    '' index 17 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 17 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.0121
set rmargin at screen 0.1001
set tmargin at screen 0.2802
set bmargin at screen 0.0235
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.232732:0.232732]
set title 'L2 h0 sdpa: Wq^T Wk' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 18 matrix with image, \
    '' index 18 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 18 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.1226
set rmargin at screen 0.2106
set tmargin at screen 0.2802
set bmargin at screen 0.0235
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.176375:0.176375]
set title 'L2 h1 sdpa: Wq^T Wk' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 19 matrix with image, \
    '' index 19 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 19 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.2330
set rmargin at screen 0.3211
set tmargin at screen 0.2802
set bmargin at screen 0.0235
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.29696:0.29696]
set title 'L2 h2 sdpa: Wq^T Wk' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 20 matrix with image, \
    '' index 20 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 20 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.3435
set rmargin at screen 0.4315
set tmargin at screen 0.2802
set bmargin at screen 0.0235
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.168619:0.168619]
set title 'L2 h0 metric: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 21 matrix with image, \
    '' index 21 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 21 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.4540
set rmargin at screen 0.5420
set tmargin at screen 0.2802
set bmargin at screen 0.0235
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.112534:0.112534]
set title 'L2 h1 metric: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 22 matrix with image, \
    '' index 22 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 22 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.5644
set rmargin at screen 0.6525
set tmargin at screen 0.2802
set bmargin at screen 0.0235
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.290864:0.290864]
set title 'L2 h2 metric: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 23 matrix with image, \
    '' index 23 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 23 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.6749
set rmargin at screen 0.7629
set tmargin at screen 0.2802
set bmargin at screen 0.0235
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.0962123:0.0962123]
set title 'L2 h0 quadratic: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 24 matrix with image, \
    '' index 24 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 24 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.7854
set rmargin at screen 0.8734
set tmargin at screen 0.2802
set bmargin at screen 0.0235
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.254412:0.254412]
set title 'L2 h1 quadratic: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 25 matrix with image, \
    '' index 25 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 25 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
set lmargin at screen 0.8959
set rmargin at screen 0.9839
set tmargin at screen 0.2802
set bmargin at screen 0.0235
set xrange [-0.5:8.5]
set yrange [8.5:-0.5]
set cbrange [-0.1149:0.1149]
set title 'L2 h2 quadratic: Wp^T M Wp' offset 0,-0.6
set xtics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
set ytics ('0' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8)
plot 'forms_model.dat' index 26 matrix with image, \
    '' index 26 matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder, \
    '' index 26 matrix using 1:2:($3 == $3 ? sprintf('%.2f', $3) : '-') with labels font ',7'
unset multiplot
