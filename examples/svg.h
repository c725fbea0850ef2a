/* svg.h - the examples' charts as SVG files, written by hand (no library): the axes, ticks and colours
   of line charts (build/ablate's loss plot, build/study's), a generic line chart of named series and
   panels of annotated heatmaps (matrices with their values in the cells). The same charts as PNG
   through gnuplot when it is installed: a data file and a gnuplot script next to the SVG (written
   always, so the PNG can be drawn later), run when gnuplot is on the PATH. Include after common.h. */
#ifndef EXAMPLES_SVG_H
#define EXAMPLES_SVG_H

/* ---- files, axes, ticks, colours ------------------------------------------------------------- */
EX_FN FILE *open_out(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) die("cannot write \"%s\": %s (does the directory exist?)", path, strerror(errno));
    return f;
}
EX_FN void close_out(FILE *f, const char *path) {
    if (ferror(f) | fclose(f)) die("cannot write \"%s\": %s", path, strerror(errno));
}

/* a "nice" tick spacing near range / 6: 1, 2 or 5 times a power of ten */
EX_FN double nice_step(double range) {
    double raw = range / 6, p = pow(10, floor(log10(raw))), r = raw / p;
    return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * p;
}

/* the nearest 1, 2 or 5 times a power of ten at or below v (up: at or above) */
EX_FN double log_tick(double v, int up) {
    double p = pow(10, floor(log10(v))), r = v / p * (1 + (up ? -1e-9 : 1e-9));
    if (up) return (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * p;
    return (r >= 5 ? 5 : r >= 2 ? 2 : 1) * p;
}

/* a chart axis: data range [lo, hi] drawn from pixel p0 to p1, linear or logarithmic */
typedef struct axis { double lo, hi, p0, p1; int log; } axis;

EX_FN double axis_px(const axis *a, double v) {
    double t;
    v = v > a->hi ? a->hi : v < a->lo ? a->lo : v; /* a diverging run's larger values: at the edge */
    t = a->log ? log10(v / a->lo) / log10(a->hi / a->lo) : (v - a->lo) / (a->hi - a->lo);
    return a->p0 + t * (a->p1 - a->p0);
}

/* Tick values into ticks (at most max); with widen, lo and hi move out to ticks first. Linear: a
   nice step; logarithmic: 1, 2 and 5 times the powers of ten (only the powers over > 3 decades). */
EX_FN int axis_ticks(axis *a, int widen, double *ticks, int max) {
    int n = 0;
    if (a->log) {
        static const double mult[3] = {1, 2, 5};
        if (widen) { a->lo = log_tick(a->lo, 0); a->hi = log_tick(a->hi, 1); }
        int every = log10(a->hi / a->lo) > 3.01 ? 3 : 1;
        for (double d = pow(10, floor(log10(a->lo))); d <= a->hi * 1.0001 && n < max; d *= 10)
            for (int k = 0; k < 3 && n < max; k += every)
                if (d * mult[k] >= a->lo * 0.9999 && d * mult[k] <= a->hi * 1.0001) ticks[n++] = d * mult[k];
        return n;
    }
    double step = nice_step(a->hi - a->lo);
    if (widen) { a->lo = floor(a->lo / step) * step; a->hi = ceil(a->hi / step) * step; }
    for (double v = ceil(a->lo / step - 1e-9) * step; v <= a->hi + step * 1e-6 && n < max; v += step)
        ticks[n++] = fabs(v) < step * 1e-6 ? 0.0 : v;
    return n;
}

EX_FN void xml_text(FILE *f, const char *s) {
    for (; *s; s++)
        if (*s == '<') fputs("&lt;", f); else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f); else if (*s == '"') fputs("&quot;", f); else fputc(*s, f);
}

EX_VAR const char *const COLORS[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                     "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000"};
#define N_COLORS ((int)(sizeof COLORS / sizeof COLORS[0]))

EX_FN void svg_line(FILE *f, double x1, double y1, double x2, double y2) {
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", x1, y1, x2, y2);
}


/* ---- a line chart of named series ------------------------------------------------------------ */
typedef struct svg_series {
    const char *name;
    const double *x, *y; /* n points; non-finite y values (and y <= 0 on a log axis) are skipped */
    int n;
    const double *lo, *hi; /* a band around the line (e.g. mean - sd .. mean + sd), or NULL */
} svg_series;

/* the range of the series' points: x and y from their smallest to their largest finite value */
EX_FN void svg_data_axes(const svg_series *s, int n, axis *x, axis *y) {
    x->lo = y->lo = INFINITY; x->hi = y->hi = -INFINITY; x->log = y->log = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < s[i].n; k++) {
            if (!isfinite(s[i].y[k])) continue;
            if (s[i].x[k] < x->lo) x->lo = s[i].x[k];
            if (s[i].x[k] > x->hi) x->hi = s[i].x[k];
            if (s[i].y[k] < y->lo) y->lo = s[i].y[k];
            if (s[i].y[k] > y->hi) y->hi = s[i].y[k];
        }
    if (!(x->hi > x->lo)) { x->lo = isfinite(x->lo) ? x->lo : 0; x->hi = x->lo + 1; }
    if (!(y->hi > y->lo)) { y->lo = isfinite(y->lo) ? y->lo : 0; y->hi = y->lo + 1; }
}

/* A line chart: grid, ticks, labels, a polyline per series (series i in COLORS[i]), a legend of the
   series that have a point. xr, yr: the axes' ranges (and y's log scale); NULL: the data's range. */
EX_FN void svg_line_chart(const char *path, const char *title, const char *xlabel, const char *ylabel,
                          const svg_series *s, int n, const axis *xr, const axis *yr) {
    const double W = 900, H = 540, L = 70, R = 210, TOP = 44, BOT = 56, right = W - R, bottom = H - BOT;
    double xt[64], yt[64];
    int nx, ny, legend = 0;
    axis x, y;
    FILE *f = open_out(path);
    svg_data_axes(s, n, &x, &y);
    if (xr) x = *xr;
    if (yr) y = *yr;
    x.p0 = L; x.p1 = right; y.p0 = bottom; y.p1 = TOP;
    ny = axis_ticks(&y, 1, yt, 64);
    nx = axis_ticks(&x, 0, xt, 64);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H, W, H);
    fprintf(f, "<text x=\"%.0f\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">", (L + right) / 2);
    xml_text(f, title);
    fprintf(f, "</text>\n<g stroke=\"#ddd\">\n");
    for (int i = 0; i < ny; i++) svg_line(f, L, axis_px(&y, yt[i]), right, axis_px(&y, yt[i]));
    for (int i = 0; i < nx; i++) svg_line(f, axis_px(&x, xt[i]), TOP, axis_px(&x, xt[i]), bottom);
    fprintf(f, "</g>\n<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"black\"/>\n", L, TOP,
            right - L, bottom - TOP);
    for (int i = 0; i < ny; i++)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", L - 6, axis_px(&y, yt[i]) + 4, yt[i]);
    for (int i = 0; i < nx; i++)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", axis_px(&x, xt[i]), bottom + 18, xt[i]);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">", (L + right) / 2, H - 12);
    xml_text(f, xlabel);
    fprintf(f, "</text>\n<text x=\"18\" y=\"%.0f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.0f)\">",
            (TOP + bottom) / 2, (TOP + bottom) / 2);
    xml_text(f, ylabel);
    fprintf(f, "</text>\n");
    for (int i = 0; i < n; i++) {
        const char *color = COLORS[i % N_COLORS];
        int drawn = 0;
        if (s[i].lo && s[i].hi) { /* the band: along hi, back along lo */
            fprintf(f, "<polygon fill=\"%s\" fill-opacity=\"0.18\" stroke=\"none\" points=\"", color);
            for (int k = 0; k < s[i].n; k++)
                if (isfinite(s[i].hi[k]) && !(y.log && s[i].hi[k] <= 0))
                    fprintf(f, "%.1f,%.1f ", axis_px(&x, s[i].x[k]), axis_px(&y, s[i].hi[k]));
            for (int k = s[i].n - 1; k >= 0; k--)
                if (isfinite(s[i].lo[k]) && !(y.log && s[i].lo[k] <= 0))
                    fprintf(f, "%.1f,%.1f ", axis_px(&x, s[i].x[k]), axis_px(&y, s[i].lo[k]));
            fprintf(f, "\"/>\n");
        }
        for (int k = 0; k < s[i].n; k++) {
            if (!isfinite(s[i].y[k]) || (y.log && s[i].y[k] <= 0)) continue;
            if (!drawn++) fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" points=\"", color);
            fprintf(f, "%.1f,%.1f ", axis_px(&x, s[i].x[k]), axis_px(&y, s[i].y[k]));
        }
        if (!drawn) continue;
        fprintf(f, "\"><title>");
        xml_text(f, s[i].name);
        fprintf(f, "</title></polyline>\n<g stroke=\"%s\" stroke-width=\"3\">", color);
        svg_line(f, right + 14, TOP + 10 + 20.0 * legend, right + 38, TOP + 10 + 20.0 * legend);
        fprintf(f, "</g><text x=\"%.0f\" y=\"%.0f\">", right + 44, TOP + 14 + 20.0 * legend);
        xml_text(f, s[i].name);
        fprintf(f, "</text>\n");
        legend++;
    }
    fprintf(f, "</svg>\n");
    close_out(f, path);
}

/* ---- panels of heatmaps ------------------------------------------------------------------------ */
typedef struct svg_matrix {
    char title[96];
    int rows, cols;
    const float *v;              /* rows x cols, row-major; a non-finite value is drawn grey, "-" */
    const char *const *row_labels, *const *col_labels; /* NULL: 0, 1, 2, ... */
} svg_matrix;

/* a diverging colour for v in [-1, 1]: blue (negative), white (0), red (positive) */
EX_FN void svg_diverging(double v, char *buf, size_t size) {
    double a = fabs(v) > 1 ? 1 : fabs(v);
    int other = (int)(255 * (1 - a) + 0.5);
    if (v >= 0) snprintf(buf, size, "#ff%02x%02x", other, other);
    else snprintf(buf, size, "#%02x%02xff", other, other);
}

/* The cell size of a set of panels and every how many rows / columns a label goes (*every): up to 12
   rows or columns 34 px with the value printed in every cell (svg_heatmap_values); larger matrices
   (a 64 x 64 metric tensor) shrink their cells to keep a panel about 300 px wide, without values,
   and label about 8 rows and columns. */
EX_FN double svg_heatmap_cell(const svg_matrix *m, int n, int *every) {
    int big = 0;
    for (int i = 0; i < n; i++) {
        if (m[i].rows > big) big = m[i].rows;
        if (m[i].cols > big) big = m[i].cols;
    }
    *every = big <= 12 ? 1 : (big + 7) / 8;
    return big <= 12 ? 34 : floor(300.0 / big) > 4 ? floor(300.0 / big) : 4;
}
#define svg_heatmap_values(cell) ((cell) >= 34)

/* n matrices in a grid of `per_row` panels, each coloured on its own scale (max |v| of the panel)
   with the value printed in every cell (small matrices: svg_heatmap_cell); `subtitle` under the title */
EX_FN void svg_heatmaps(const char *path, const char *title, const char *subtitle, const svg_matrix *m, int n, int per_row) {
    int every;
    const double cell = svg_heatmap_cell(m, n, &every), gap = 56, lab = 22, head = 70;
    double pw = 0, ph = 0, W, H;
    FILE *f = open_out(path);
    for (int i = 0; i < n; i++) {
        if (m[i].cols * cell + lab > pw) pw = m[i].cols * cell + lab;
        if (m[i].rows * cell + lab + 18 > ph) ph = m[i].rows * cell + lab + 18;
    }
    if (per_row < 1) per_row = 1;
    W = 20 + (per_row < n ? per_row : n) * (pw + gap);
    H = head + ((n + per_row - 1) / per_row) * (ph + gap / 2);
    if (W < 520) W = 520;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H, W, H);
    fprintf(f, "<text x=\"%.0f\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">", W / 2);
    xml_text(f, title);
    fprintf(f, "</text>\n<text x=\"%.0f\" y=\"44\" text-anchor=\"middle\" fill=\"#555\">", W / 2);
    xml_text(f, subtitle ? subtitle : "");
    fprintf(f, "</text>\n");
    for (int i = 0; i < n; i++) {
        double x0 = 20 + (i % per_row) * (pw + gap) + lab, y0 = head + (i / per_row) * (ph + gap / 2) + lab + 18, mx = 0;
        for (int k = 0; k < m[i].rows * m[i].cols; k++) if (isfinite(m[i].v[k]) && fabs(m[i].v[k]) > mx) mx = fabs(m[i].v[k]);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">", x0 - lab, y0 - lab - 4);
        xml_text(f, m[i].title);
        fprintf(f, "</text>\n");
        for (int c = 0; c < m[i].cols; c++) {
            if (c % every) continue;
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">", x0 + (c + 0.5) * cell, y0 - 6);
            if (m[i].col_labels) xml_text(f, m[i].col_labels[c]); else fprintf(f, "%d", c);
            fprintf(f, "</text>\n");
        }
        for (int r = 0; r < m[i].rows; r++) {
            if (r % every == 0) {
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">", x0 - 4, y0 + (r + 0.6) * cell);
                if (m[i].row_labels) xml_text(f, m[i].row_labels[r]); else fprintf(f, "%d", r);
                fprintf(f, "</text>\n");
            }
            for (int c = 0; c < m[i].cols; c++) {
                double v = m[i].v[r * m[i].cols + c];
                char fill[16];
                if (isfinite(v)) svg_diverging(mx > 0 ? v / mx : 0, fill, sizeof fill);
                else snprintf(fill, sizeof fill, "#cccccc");
                fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.0f\" height=\"%.0f\" fill=\"%s\"%s/>", x0 + c * cell,
                        y0 + r * cell, cell, cell, fill,  svg_heatmap_values(cell) ? " stroke=\"white\"" : " stroke=\"none\"");
                if (!svg_heatmap_values(cell)) fprintf(f, "\n");
                else if (isfinite(v))
                    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"9\">%.2f</text>\n", x0 + (c + 0.5) * cell,
                            y0 + (r + 0.6) * cell, v);
                else fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"9\">-</text>\n", x0 + (c + 0.5) * cell,
                             y0 + (r + 0.6) * cell);
            }
        }
    }
    fprintf(f, "</svg>\n");
    close_out(f, path);
}
/* ---- the same charts as PNG, through gnuplot ------------------------------------------------------
   A chart's STEM (a path without extension) names its files: STEM.gp the script, STEM.png the image,
   STEM.dat the data where the chart writes its own. The scripts name their files without directory
   and run from the directory of STEM, so `cd DIR && gnuplot STEM.gp` redraws a PNG by hand. */

/* the last component of a path */
EX_FN const char *file_base(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* STEM + ext into buf (dies if it does not fit) */
EX_FN char *stem_path(char *buf, size_t size, const char *stem, const char *ext) {
    int n = snprintf(buf, size, "%s%s", stem, ext);
    if (n < 0 || (size_t)n >= size) die("the path \"%s%s\" is too long", stem, ext);
    return buf;
}

/* 1 when a gnuplot program is on the PATH (asked once) */
EX_FN int gnuplot_found(void) {
    static int found = -1;
    if (found < 0) found = system("command -v gnuplot > /dev/null 2>&1") == 0;
    return found;
}

/* s as a gnuplot single-quoted string, where '' stands for ' */
EX_FN void gp_string(FILE *g, const char *s) {
    fputc('\'', g);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', g);
        fputc(*s, g);
    }
    fputc('\'', g);
}

/* Opens STEM.gp and writes its first lines: a width x height PNG into STEM.png, text taken literally
   (no enhanced-text markup). smooth: cairo's anti-aliased terminal first (curves); else libgd's
   indexed-colour one first (heatmaps: a third of the size, with a number in every cell). Either
   one when this gnuplot lacks the other. The caller writes the plot, then gp_draw. */
EX_FN FILE *gp_script(const char *stem, int width, int height, int smooth) {
    char path[4096], png[4096];
    FILE *g = open_out(stem_path(path, sizeof path, stem, ".gp"));
    fprintf(g, "# gnuplot script: draws %s (run it in its directory)\n", file_base(stem_path(png, sizeof png, stem, ".png")));
    fprintf(g, "if (strstrt(' '.GPVAL_TERMINALS.' ', ' %s ') > 0) { set terminal %s size %d,%d noenhanced%s } "
               "else { set terminal %s size %d,%d noenhanced%s }\nset output ", smooth ? "pngcairo" : "png",
            smooth ? "pngcairo" : "png", width, height, smooth ? " font ',10'" : "", smooth ? "png" : "pngcairo", width,
            height, smooth ? "" : " font ',10'");
    gp_string(g, file_base(png));
    fprintf(g, "\n");
    return g;
}

/* 1 when the file starts with the 8-byte PNG signature */
EX_FN int is_png(const char *path) {
    unsigned char magic[8] = {0};
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(magic, 1, sizeof magic, f) : 0;
    if (f) fclose(f);
    return n == sizeof magic && memcmp(magic, "\x89PNG\r\n\x1a\n", sizeof magic) == 0;
}

/* a markdown report's link to the figure DIR/NAME.svg ("![alt](NAME.svg)", the report beside it),
   and to DIR/NAME.png when gnuplot drew it */
EX_FN void md_figure(FILE *md, const char *dir, const char *alt, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.png", dir, name);
    fprintf(md, "![%s](%s.svg)", alt, name);
    if (is_png(path)) fprintf(md, " ([PNG](%s.png))", name);
    fprintf(md, "\n\n");
}

/* appends the n bytes of s to buf (holding *k bytes) single-quoted for the shell: ' becomes '\'' */
EX_FN void shell_quote(char *buf, size_t size, size_t *k, const char *s, size_t n) {
    const size_t worst = 4 * n + 3; /* every byte a quote, and the two quotes around */
    if (*k + worst >= size) die("the path \"%.*s\" is too long", (int)n, s);
    buf[(*k)++] = '\'';
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\'') { memcpy(buf + *k, "'\\''", 4); *k += 4; }
        else buf[(*k)++] = s[i];
    }
    buf[(*k)++] = '\'';
    buf[*k] = 0;
}

/* Closes the script g of STEM (gp_script) and runs it when gnuplot is installed: 1 when it drew
   STEM.png, 0 without gnuplot (the script stays, for later; no PNG either), -1 when gnuplot failed (a warning
   names the script; no PNG is left behind). */
EX_FN int gp_draw(const char *stem, FILE *g) {
    char script[4096], png[4096], command[4 * 4096 + 64] = "cd ";
    size_t k = 3;
    const char *base, *dir = ".";
    size_t dir_n = 1;
    stem_path(script, sizeof script, stem, ".gp");
    stem_path(png, sizeof png, stem, ".png");
    close_out(g, script);
    remove(png); /* an older run's PNG would not match the SVG */
    if (!gnuplot_found()) return 0;
    base = file_base(script);
    if (base != script) { dir = script; dir_n = (size_t)(base - script) - 1; if (!dir_n) dir_n = 1; /* "/" */ }
    shell_quote(command, sizeof command, &k, dir, dir_n);
    memcpy(command + k, " && gnuplot ", 13); k += 12;
    shell_quote(command, sizeof command, &k, base, strlen(base));
    memcpy(command + k, " > /dev/null 2>&1", 18);
    if (system(command) == 0 && is_png(png)) return 1;
    remove(png);
    fprintf(stderr, "%s: warning: gnuplot failed on \"%s\": no PNG (run it by hand in its directory to see why)\n", EX_PROG, script);
    return -1;
}

/* v as gnuplot reads it: NaN for a missing value */
EX_FN void gp_number(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.6g", v); else fputs("NaN", f);
}

/* The line chart of svg_line_chart as STEM.png: the series' points into STEM.dat (a block per series
   that has points, "x y" lines, "x y lo hi" for a series with a band), the script into STEM.gp. The
   same colours as the SVG, the bands filled behind the lines. Returns gp_draw's. */
EX_FN int png_line_chart(const char *stem, const char *title, const char *xlabel, const char *ylabel,
                         const svg_series *s, int n) {
    char dat[4096];
    FILE *f = open_out(stem_path(dat, sizeof dat, stem, ".dat")), *g;
    int blocks = 0;
    for (int i = 0; i < n; i++) {
        if (!s[i].n) continue;
        fprintf(f, "%s# ", blocks++ ? "\n\n" : "");
        fputs(s[i].name, f);
        for (int k = 0; k < s[i].n; k++) {
            fprintf(f, "\n");
            gp_number(f, s[i].x[k]);
            fputc(' ', f);
            gp_number(f, s[i].y[k]);
            if (s[i].lo && s[i].hi) {
                fputc(' ', f);
                gp_number(f, s[i].lo[k]);
                fputc(' ', f);
                gp_number(f, s[i].hi[k]);
            }
        }
        fprintf(f, "\n");
    }
    close_out(f, dat);
    g = gp_script(stem, 900, 540, 1);
    fprintf(g, "set grid\nset key outside right top\nset title ");
    gp_string(g, title);
    fprintf(g, "\nset xlabel ");
    gp_string(g, xlabel);
    fprintf(g, "\nset ylabel ");
    gp_string(g, ylabel);
    fprintf(g, "\nplot");
    blocks = 0;
    for (int i = 0, index = 0; i < n; i++) { /* the bands first, so that every line is drawn over them */
        if (!s[i].n) continue;
        if (s[i].lo && s[i].hi) {
            fprintf(g, "%s ", blocks ? ", \\\n    " : "");
            gp_string(g, file_base(dat));
            fprintf(g, " index %d using 1:3:4 with filledcurves fillcolor rgb '%s' fillstyle transparent solid 0.18 noborder "
                       "notitle", index, COLORS[i % N_COLORS]);
            blocks = 1;
        }
        index++;
    }
    for (int i = 0, index = 0; i < n; i++) {
        if (!s[i].n) continue;
        fprintf(g, "%s ", blocks ? ", \\\n    " : "");
        gp_string(g, file_base(dat));
        fprintf(g, " index %d using 1:2 with lines lw 2 lc rgb '%s' title ", index++, COLORS[i % N_COLORS]);
        blocks = 1;
        gp_string(g, s[i].name);
    }
    if (!blocks) fprintf(g, " NaN notitle"); /* an empty chart, not a gnuplot error */
    fprintf(g, "\n");
    return gp_draw(stem, g);
}

/* ticks labelled by `labels` (NULL: 0, 1, 2, ...) at 0, every, 2 every, ... < n on axis "x" or "y" */
EX_FN void gp_label_tics(FILE *g, const char *axis, const char *const *labels, int n, int every) {
    fprintf(g, "set %stics (", axis);
    for (int i = 0; i < n; i += every) {
        char number[16];
        snprintf(number, sizeof number, "%d", i);
        fprintf(g, "%s", i ? ", " : "");
        gp_string(g, labels ? labels[i] : number);
        fprintf(g, " %d", i);
    }
    fprintf(g, ")\n");
}

/* The panels of svg_heatmaps as STEM.png, laid out alike: the matrices into STEM.dat (a block of
   rows per matrix, NaN where a value is missing), the script into STEM.gp: each panel on its own
   blue-white-red scale, its values printed in the cells, missing cells grey with "-" (gnuplot warns
   of the missing values when run by hand). Returns gp_draw's. */
EX_FN int png_heatmaps(const char *stem, const char *title, const char *subtitle, const svg_matrix *m, int n, int per_row) {
    int every;
    const double cell = svg_heatmap_cell(m, n, &every), gap = 56, lab = 22, head = 70;
    double pw = 0, ph = 0, W, H;
    char dat[4096];
    FILE *f = open_out(stem_path(dat, sizeof dat, stem, ".dat")), *g;
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s# ", i ? "\n\n" : "");
        fputs(m[i].title, f);
        fprintf(f, "\n");
        for (int r = 0; r < m[i].rows; r++)
            for (int c = 0; c < m[i].cols; c++) {
                gp_number(f, m[i].v[r * m[i].cols + c]);
                fputc(c + 1 < m[i].cols ? ' ' : '\n', f);
            }
        if (m[i].cols > pw) pw = m[i].cols;
        if (m[i].rows > ph) ph = m[i].rows;
    }
    close_out(f, dat);
    if (per_row < 1) per_row = 1;
    pw = pw * cell + lab; ph = ph * cell + lab + 18;
    W = 20 + (per_row < n ? per_row : n) * (pw + gap);
    H = head + ((n + per_row - 1) / per_row) * (ph + gap / 2);
    if (W < 520) W = 520;
    g = gp_script(stem, (int)W, (int)H, 0);
    fprintf(g, "set palette defined (-1 '#0000ff', 0 '#ffffff', 1 '#ff0000')\nunset colorbox\nunset key\nset tics scale 0\n"
               "set xtics font ',9'\nset ytics font ',9'\nset multiplot\n");
    fprintf(g, "set label 1 ");
    gp_string(g, title);
    fprintf(g, " at screen 0.5, screen %.4f center font ',14'\nset label 2 ", 1 - 24 / H);
    gp_string(g, subtitle ? subtitle : "");
    fprintf(g, " at screen 0.5, screen %.4f center textcolor rgb '#555555'\n", 1 - 44 / H);
    for (int i = 0; i < n; i++) {
        double x0 = 20 + (i % per_row) * (pw + gap) + lab, y0 = head + (i / per_row) * (ph + gap / 2) + lab + 18, mx = 0;
        for (int k = 0; k < m[i].rows * m[i].cols; k++) if (isfinite(m[i].v[k]) && fabs(m[i].v[k]) > mx) mx = fabs(m[i].v[k]);
        if (i == 1) fprintf(g, "unset label 1\nunset label 2\n"); /* the titles once, with the first panel */
        fprintf(g, "set lmargin at screen %.4f\nset rmargin at screen %.4f\nset tmargin at screen %.4f\nset bmargin at screen %.4f\n",
                x0 / W, (x0 + m[i].cols * cell) / W, 1 - y0 / H, 1 - (y0 + m[i].rows * cell) / H);
        fprintf(g, "set xrange [-0.5:%d.5]\nset yrange [%d.5:-0.5]\nset cbrange [%g:%g]\nset title ", m[i].cols - 1,
                m[i].rows - 1, mx > 0 ? -mx : -1, mx > 0 ? mx : 1);
        gp_string(g, m[i].title);
        fprintf(g, " offset 0,-0.6\n");
        gp_label_tics(g, "x", m[i].col_labels, m[i].cols, every);
        gp_label_tics(g, "y", m[i].row_labels, m[i].rows, every);
        fprintf(g, "plot ");
        gp_string(g, file_base(dat));
        fprintf(g, " index %d matrix with image, \\\n    '' index %d matrix using 1:($3 == $3 ? NaN : $2):(0.5):(0.5) "
                   "with boxxy fillcolor rgb '#cccccc' fillstyle solid noborder", i, i);
        if (svg_heatmap_values(cell))
            fprintf(g, ", \\\n    '' index %d matrix using 1:2:($3 == $3 ? sprintf('%%.2f', $3) : '-') with labels font ',7'", i);
        fprintf(g, "\n");
    }
    fprintf(g, "unset multiplot\n");
    return gp_draw(stem, g);
}

#endif /* EXAMPLES_SVG_H */
