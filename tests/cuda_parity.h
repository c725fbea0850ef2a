/* cuda_parity.h - what every CUDA parity suite (tests/test_cuda*.cpp) shares: the implementation with
 * the CUDA backend (over the emulator tests/cuda_emu.h when g++ builds it, on the real GPU when nvcc
 * does), the thread orders, smaller shapes under ASan, and the CPU-vs-GPU comparison helpers. */
#ifndef MF_CUDA_PARITY_H
#define MF_CUDA_PARITY_H
#ifndef __CUDACC__
#include "cuda_emu.h"
#endif
#define METAFORMER_IMPLEMENTATION
#define METAFORMER_CUDA
#include "metaformer.h"
#include "mf_test.h"

#include <string.h>
#include <string>
#include <vector>

/* the emulator runs the GPU side in each thread order (a missing barrier or a race shows up as a
   difference); a real GPU has one */
#ifdef MF_CUDA_EMU
static const int N_ORDERS = 3;
static const int ORDERS[3] = {MF_EMU_ORDER_IN, MF_EMU_ORDER_REVERSED, MF_EMU_ORDER_SHUFFLED};
static inline void set_order(int o) { mf_emu_set_order(ORDERS[o], 1234u + (unsigned)o); }
#else
static const int N_ORDERS = 1;
static inline void set_order(int o) { (void)o; }
#endif

#if defined(__SANITIZE_ADDRESS__)
#define MFT_SMALL 1 /* smaller shapes under ASan */
#else
#define MFT_SMALL 0
#endif

static const double TOL = 1e-5; /* CPU vs GPU, relative to the tensor's largest value */

static inline std::vector<float> rand_vec(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v((size_t)n);
    for (int64_t i = 0; i < n; i++) v[(size_t)i] = lo + (hi - lo) * mf__uniform(seed, 77, (uint64_t)i);
    return v;
}
static inline std::vector<float> host_of(mf_ctx *ctx, const mf_tensor *t, int grad) {
    std::vector<float> v((size_t)t->ne);
    if (grad) mf_grad_to_host(ctx, t, v.data()); else mf_to_host(ctx, t, v.data());
    return v;
}
/* max |a - b| / max(max |b|, floor) */
static inline double rel_err(const std::vector<float> &a, const std::vector<float> &b, double floor = 1e-3) {
    double e = 0, s = floor;
    if (a.size() != b.size()) return 1e30;
    for (size_t i = 0; i < a.size(); i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d; /* NaN counts */
        if (fabs((double)b[i]) > s) s = fabs((double)b[i]);
    }
    return e / s;
}
#endif
