/* mf_cuda.cu - the metaformer.h implementation with the CUDA backend, compiled by nvcc for the CUDA
 * build (make cuda); main.c is then compiled by cc with -DMETAFORMER_IMPLEMENTATION_DONE, which
 * skips its own copy of the implementation, and nvcc links the two with cuBLAS. */
#define METAFORMER_IMPLEMENTATION
#define METAFORMER_CUDA
#include "metaformer.h"
