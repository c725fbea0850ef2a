/* test_stats.c - the statistics of several seeds (examples/common.h [stats]): Student's t quantiles
   against their tabulated values, the mean, standard deviation and 95% interval of a few numbers,
   Welch's test on samples that differ and on samples that do not. */
#define _POSIX_C_SOURCE 200809L
#include "metaformer.h"
#include "mf_test.h"
#include "examples/common.h"
#include <math.h>

static void test_t95(void) {
    MFT_NEAR(t95(1), 12.706, 1e-9);
    MFT_NEAR(t95(4), 2.776, 1e-9);
    MFT_NEAR(t95(2.5), (4.303 + 3.182) / 2, 1e-9);
    MFT_NEAR(t95(60), 2.000, 2e-3);  /* the tables: 2.000 */
    MFT_NEAR(t95(120), 1.980, 2e-3); /* 1.980 */
    MFT_CHECK(isnan(t95(0.5)));
}

static void test_summarize(void) {
    const double v[5] = {1, 2, NAN, 3, 4};
    stat_summary a = summarize(v, 5), one = summarize(v, 1), none = summarize(v + 2, 1);
    MFT_CHECK(a.n == 4);
    MFT_NEAR(a.mean, 2.5, 1e-12);
    MFT_NEAR(a.sd, sqrt(5.0 / 3.0), 1e-12);
    MFT_NEAR(a.ci, 3.182 * sqrt(5.0 / 3.0) / 2.0, 1e-12);
    MFT_CHECK(one.n == 1 && one.mean == 1 && isnan(one.sd) && isnan(one.ci));
    MFT_CHECK(none.n == 0 && isnan(none.mean));
}

static void test_welch(void) {
    const double a[4] = {1.00, 1.02, 0.98, 1.01}, b[4] = {1.20, 1.22, 1.19, 1.21}, c[4] = {1.01, 0.97, 1.03, 0.99};
    stat_summary sa = summarize(a, 4), sb = summarize(b, 4), sc = summarize(c, 4), s1 = summarize(a, 1);
    MFT_CHECK(welch_differs(sa, sb) == 1);  /* t about 19 */
    MFT_CHECK(welch_differs(sa, sc) == 0);  /* the same mean, about */
    MFT_CHECK(welch_differs(sa, s1) == -1); /* one value: no test */
}

int main(void) {
    MFT_RUN(test_t95);
    MFT_RUN(test_summarize);
    MFT_RUN(test_welch);
    return mft_finish();
}
