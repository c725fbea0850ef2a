/* nccl_emu.h - an NCCL stand-in over MPI for the CUDA emulator (tests/cuda_emu.h), so that the NCCL
 * transport of metaformer.h's [mf:dist] (METAFORMER_NCCL) runs in tests on machines without a GPU.
 *
 *   mpicxx -std=c++14 -DMETAFORMER_MPI -DMETAFORMER_NCCL -Itests tests/test_dist_cuda.cpp (the test
 *   includes cuda_emu.h, then mpi.h and this file, then the library with METAFORMER_CUDA)
 *
 * What it does: the subset of NCCL's API the library uses, with NCCL's signatures and result codes.
 * Device memory is host memory under the emulator, so each collective is the matching MPI call on
 * the buffers: ncclAllReduce (ncclSum, ncclAvg: the sum divided by the rank count), ncclReduceScatter,
 * ncclAllGather, ncclBroadcast, ncclFloat only. Each one is queued on its CUDA stream like a kernel
 * (mf_emu::enqueue) and runs when something waits for that stream, so the library's events and
 * stream waits decide when it reads and writes; before it reads its input it asks the emulator
 * whether that memory was last written by an operation not ordered before it (a race, counted by
 * mf_emu_race_count). ncclCommInitRank splits MPI_COMM_WORLD by the unique id, so every process of
 * the world must call it (as every test does). ncclGroupStart / End only count: the operations are
 * queued in the order they are called either way.
 * Failures for tests: mf_nccl_emu_fail_next(result, async) makes the next collective return `result`
 * (async 0), or run and leave `result` for ncclCommGetAsyncError (async 1, the data untouched).
 */
#ifndef MF_NCCL_EMU_H
#define MF_NCCL_EMU_H
#ifndef MF_CUDA_EMU_H
#error "include cuda_emu.h before nccl_emu.h"
#endif
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1 /* the C API only */
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 0
#define NCCL_VERSION_CODE (NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH)
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
typedef enum { ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
               ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7,
               ncclNumResults = 8 } ncclResult_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef enum { ncclInt8 = 0, ncclChar = 0, ncclUint8 = 1, ncclInt32 = 2, ncclInt = 2, ncclUint32 = 3, ncclInt64 = 4,
               ncclUint64 = 5, ncclFloat16 = 6, ncclHalf = 6, ncclFloat32 = 7, ncclFloat = 7, ncclFloat64 = 8,
               ncclDouble = 8 } ncclDataType_t;
struct ncclComm { unsigned magic; MPI_Comm mpi; int rank, nranks; ncclResult_t async; };
typedef struct ncclComm *ncclComm_t;

namespace mf_nccl_emu {
struct State { int group = 0; unsigned long long ids = 0; ncclResult_t fail = ncclSuccess; int fail_async = 0; };
static inline State &S() { static State s; return s; }
static inline bool live(ncclComm_t c) { return c && c->magic == 0x4CC1u; }
/* the checks every collective makes when it is called (NCCL's own: a live communicator, floats, a
   known reduction), and the injected failure */
static inline ncclResult_t check(ncclComm_t c, ncclDataType_t t, ncclRedOp_t op, const void *send, const void *recv) {
    if (!live(c) || (!send && !recv)) return ncclInvalidArgument;
    if (t != ncclFloat || (op != ncclSum && op != ncclAvg)) return ncclInvalidArgument; /* all the library needs */
    if (S().fail != ncclSuccess && !S().fail_async) {
        ncclResult_t r = S().fail;
        S().fail = ncclSuccess;
        return r;
    }
    return ncclSuccess;
}
/* queue `body` on the stream; the injected asynchronous failure replaces it */
template <class F> static inline ncclResult_t queue(ncclComm_t c, cudaStream_t st, const char *name, F body) {
    if (S().fail != ncclSuccess && S().fail_async) {
        ncclResult_t r = S().fail;
        S().fail = ncclSuccess;
        mf_emu::enqueue(st, name, [c, r](mf_emu_stream *) { c->async = r; });
        return ncclSuccess;
    }
    mf_emu::enqueue(st, name, [c, body](mf_emu_stream *self) {
        if (c->async == ncclSuccess && body(self) != MPI_SUCCESS) c->async = ncclSystemError;
    });
    return ncclSuccess;
}
} /* namespace mf_nccl_emu */

static inline void mf_nccl_emu_fail_next(ncclResult_t r, int async) {
    mf_nccl_emu::S().fail = r;
    mf_nccl_emu::S().fail_async = async;
}

static inline const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}
static inline const char *ncclGetLastError(ncclComm_t) { return ""; }
static inline ncclResult_t ncclGetVersion(int *v) {
    if (!v) return ncclInvalidArgument;
    *v = NCCL_VERSION_CODE;
    return ncclSuccess;
}
static inline ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return ncclInvalidArgument;
    unsigned long long k[2] = {(unsigned long long)getpid() * 0x9E3779B97F4A7C15ull ^ (unsigned long long)time(NULL),
                               ++mf_nccl_emu::S().ids};
    memset(id, 0, sizeof *id);
    memcpy(id->internal, k, sizeof k);
    return ncclSuccess;
}
/* collective over MPI_COMM_WORLD: the processes with the same id become one communicator */
static inline ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    unsigned long long k[2];
    MPI_Comm c;
    int n = 0, r = -1;
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    memcpy(k, id.internal, sizeof k);
    if (MPI_Comm_split(MPI_COMM_WORLD, (int)((k[0] ^ k[1]) & 0x7fffffff), rank, &c) != MPI_SUCCESS) return ncclSystemError;
    MPI_Comm_size(c, &n);
    MPI_Comm_rank(c, &r);
    if (n != nranks || r != rank) { MPI_Comm_free(&c); return ncclInvalidUsage; }
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    *comm = new ncclComm{0x4CC1u, c, rank, nranks, ncclSuccess};
    return ncclSuccess;
}
static inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!mf_nccl_emu::live(comm)) return ncclInvalidArgument;
    cudaDeviceSynchronize(); /* its queued collectives run first */
    MPI_Comm_free(&comm->mpi);
    comm->magic = 0;
    delete comm;
    return ncclSuccess;
}
static inline ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }
static inline ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *r) {
    if (!mf_nccl_emu::live(comm) || !r) return ncclInvalidArgument;
    *r = comm->async;
    return ncclSuccess;
}
static inline ncclResult_t ncclCommCount(const ncclComm_t comm, int *n) {
    if (!mf_nccl_emu::live(comm) || !n) return ncclInvalidArgument;
    *n = comm->nranks;
    return ncclSuccess;
}
static inline ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *r) {
    if (!mf_nccl_emu::live(comm) || !r) return ncclInvalidArgument;
    *r = comm->rank;
    return ncclSuccess;
}
static inline ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *d) {
    if (!mf_nccl_emu::live(comm) || !d) return ncclInvalidArgument;
    return cudaGetDevice(d) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}
static inline ncclResult_t ncclGroupStart(void) { mf_nccl_emu::S().group++; return ncclSuccess; }
static inline ncclResult_t ncclGroupEnd(void) {
    if (mf_nccl_emu::S().group <= 0) return ncclInvalidUsage;
    mf_nccl_emu::S().group--;
    return ncclSuccess;
}

static inline ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                         ncclComm_t comm, cudaStream_t st) {
    ncclResult_t r = mf_nccl_emu::check(comm, t, op, send, recv);
    if (r != ncclSuccess) return r;
    return mf_nccl_emu::queue(comm, st, "ncclAllReduce", [=](mf_emu_stream *self) {
        float *out = (float *)recv;
        mf_emu::check_read(self, send, count * 4, "ncclAllReduce");
        int e = MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, MPI_FLOAT, MPI_SUM, comm->mpi);
        if (op == ncclAvg)
            for (size_t i = 0; i < count; i++) out[i] /= (float)comm->nranks;
        return e;
    });
}
/* rank r keeps the reduction of [r * count, (r + 1) * count) of send (in place: recv == send + r * count) */
static inline ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t,
                                             ncclRedOp_t op, ncclComm_t comm, cudaStream_t st) {
    ncclResult_t r = mf_nccl_emu::check(comm, t, op, send, recv);
    if (r != ncclSuccess) return r;
    return mf_nccl_emu::queue(comm, st, "ncclReduceScatter", [=](mf_emu_stream *self) {
        std::vector<float> in((const float *)send, (const float *)send + count * comm->nranks), out(count);
        mf_emu::check_read(self, send, count * comm->nranks * 4, "ncclReduceScatter");
        int e = MPI_Reduce_scatter_block(in.data(), out.data(), (int)count, MPI_FLOAT, MPI_SUM, comm->mpi);
        for (size_t i = 0; i < count; i++) ((float *)recv)[i] = op == ncclAvg ? out[i] / (float)comm->nranks : out[i];
        return e;
    });
}
/* recv[r * count, (r + 1) * count) = rank r's send (in place: send == recv + r * count) */
static inline ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t comm,
                                         cudaStream_t st) {
    ncclResult_t r = mf_nccl_emu::check(comm, t, ncclSum, send, recv);
    if (r != ncclSuccess) return r;
    return mf_nccl_emu::queue(comm, st, "ncclAllGather", [=](mf_emu_stream *self) {
        std::vector<float> in((const float *)send, (const float *)send + count);
        mf_emu::check_read(self, send, count * 4, "ncclAllGather");
        return MPI_Allgather(in.data(), (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, comm->mpi);
    });
}
static inline ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                                         ncclComm_t comm, cudaStream_t st) {
    ncclResult_t r = mf_nccl_emu::check(comm, t, ncclSum, send ? send : recv, recv);
    if (r != ncclSuccess) return r;
    if (root < 0 || root >= comm->nranks) return ncclInvalidArgument;
    return mf_nccl_emu::queue(comm, st, "ncclBroadcast", [=](mf_emu_stream *self) {
        if (comm->rank == root) {
            mf_emu::check_read(self, send, count * 4, "ncclBroadcast");
            if (send != recv) memmove(recv, send, count * 4);
        }
        return MPI_Bcast(recv, (int)count, MPI_FLOAT, root, comm->mpi);
    });
}
#endif /* MF_NCCL_EMU_H */
