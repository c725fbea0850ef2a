/* svg.h - the examples' charts as SVG files, written by hand (no library): the axes, ticks and colours
   of line charts (build/ablate's loss plot, build/study's), a generic line chart of named series and
   panels of annotated heatmaps (matrices with their values in the cells). Include after common.h. */
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

/* n matrices in a grid of `per_row` panels, each coloured on its own scale (max |v| of the panel)
   with the value printed in every cell; `subtitle` under the title */
EX_FN void svg_heatmaps(const char *path, const char *title, const char *subtitle, const svg_matrix *m, int n, int per_row) {
    const double cell = 34, gap = 56, lab = 22, head = 70;
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
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">", x0 + (c + 0.5) * cell, y0 - 6);
            if (m[i].col_labels) xml_text(f, m[i].col_labels[c]); else fprintf(f, "%d", c);
            fprintf(f, "</text>\n");
        }
        for (int r = 0; r < m[i].rows; r++) {
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">", x0 - 4, y0 + (r + 0.6) * cell);
            if (m[i].row_labels) xml_text(f, m[i].row_labels[r]); else fprintf(f, "%d", r);
            fprintf(f, "</text>\n");
            for (int c = 0; c < m[i].cols; c++) {
                double v = m[i].v[r * m[i].cols + c];
                char fill[16];
                if (isfinite(v)) svg_diverging(mx > 0 ? v / mx : 0, fill, sizeof fill);
                else snprintf(fill, sizeof fill, "#cccccc");
                fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.0f\" height=\"%.0f\" fill=\"%s\" stroke=\"white\"/>", x0 + c * cell,
                        y0 + r * cell, cell, cell, fill);
                if (isfinite(v))
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
#endif /* EXAMPLES_SVG_H */
