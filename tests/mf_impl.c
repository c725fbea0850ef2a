/* mf_impl.c - the implementation of metaformer.h in a file of its own. The Makefile compiles it
 * once per build flavour (optimized, ASan/UBSan, and as C++ over the CUDA emulator with
 * -DMF_IMPL_CUDA_EMU) and links it into every test that uses only the public API: those tests are
 * compiled with -DMETAFORMER_IMPLEMENTATION_DONE, which skips the implementation they include, so
 * the header's ~8k lines are compiled three times instead of once per test binary. Tests that call
 * the header's static internals (mf__*, MF__*) still compile the implementation themselves. */
#ifdef MF_IMPL_CUDA_EMU
#include "cuda_emu.h" /* before the header: the kernels run on the emulator's fibers */
#define METAFORMER_CUDA
#endif
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
