/* metaformer_cuda.cu - the metaformer.h implementation with the CUDA backend, for C programs.
 *
 * nvcc compiles this file (the kernels need it); the program itself stays C and is compiled by
 * the C compiler without the implementation. `make train-cuda` does it for examples/train.c:
 *
 *   nvcc -O2 -arch=sm_90 -c examples/metaformer_cuda.cu -o build/metaformer_cuda.o
 *   cc -O2 -c examples/train.c -DMETAFORMER_IMPLEMENTATION_DONE -o build/train_cuda.o
 *       (train.c defines METAFORMER_IMPLEMENTATION itself; METAFORMER_IMPLEMENTATION_DONE skips it)
 *   nvcc build/train_cuda.o build/metaformer_cuda.o -lcublas -o build/train-cuda
 *
 * A program that does not define METAFORMER_IMPLEMENTATION needs no -D flag at all. */
#define METAFORMER_IMPLEMENTATION
#define METAFORMER_CUDA
#include "../metaformer.h"
