/* mf_test.h - the tiny test runner shared by every tests/test_*.c(pp) file.
 *
 *   #include "mf_test.h"
 *   static void test_something(void) { MFT_CHECK(1 + 1 == 2); MFT_NEAR(x, 1.0, 1e-6); }
 *   int main(void) { MFT_RUN(test_something); return mft_finish(); }
 *
 * mft_rel_err(a, b, n, floor) measures a tensor against a reference (the tolerance checks);
 * mft_uniform(seed, stream, i) draws the library's random numbers.
 *
 * Each binary prints "ok   name" or "FAIL name" per test, the failing checks with file:line,
 * and ends with "N passed, N failed"; tests/run.sh adds the counts of all binaries and prints
 * the suite's closing line. Exit status is non-zero when any test failed. */
#ifndef MF_TEST_H
#define MF_TEST_H
#include <stdio.h>
#include <math.h>
#include <stdint.h>

static int mft__pass = 0, mft__fail = 0, mft__cur_bad = 0;

#define MFT_CHECK(cond) do { if (!(cond)) { \
    printf("    check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); mft__cur_bad = 1; } } while (0)

/* |a - b| <= tol * max(1, |b|): relative for large values, absolute near zero */
#define MFT_NEAR(a, b, tol) do { double mft__a = (double)(a), mft__b = (double)(b); \
    double mft__s = fabs(mft__b) > 1.0 ? fabs(mft__b) : 1.0; \
    if (!(fabs(mft__a - mft__b) <= (tol) * mft__s)) { \
        printf("    near failed at %s:%d: %s = %.9g, %s = %.9g (tol %g)\n", __FILE__, __LINE__, \
               #a, mft__a, #b, mft__b, (double)(tol)); mft__cur_bad = 1; } } while (0)

/* How far a is from the reference b: max |a - b| / max(max |b|, floor), one number for a whole
   tensor, so the tolerance is relative to the tensor's largest value (elements near zero do not
   need their own). floor keeps an all-small reference from turning rounding noise into a large
   error. A NaN difference makes the result NaN, which fails every "<= tol" check. */
static inline double mft_rel_err(const float *a, const float *b, int64_t n, double floor) {
    double num = 0, den = floor;
    int64_t i;
    for (i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d != d) return d;
        if (d > num) num = d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return num / den;
}

/* uniform in [0, 1): the library's counter-based generator (mf__uniform), bit for bit, for the
   tests linked against the shared implementation (see the Makefile), which cannot call the
   header's static functions */
static inline uint64_t mft__mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static inline float mft_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t r = mft__mix64(mft__mix64(seed ^ mft__mix64(stream + 0x9e3779b97f4a7c15ULL)) + index);
    return (float)(r >> 40) * (1.0f / 16777216.0f);
}

#define MFT_RUN(fn) mft__run(#fn, fn)

static void mft__run(const char *name, void (*fn)(void)) {
    mft__cur_bad = 0;
    fn();
    if (mft__cur_bad) { mft__fail++; printf("FAIL %s\n", name); }
    else { mft__pass++; printf("ok   %s\n", name); }
    fflush(stdout);
}

static int mft_finish(void) {
    printf("%d passed, %d failed\n", mft__pass, mft__fail);
    return mft__fail ? 1 : 0;
}
#endif
