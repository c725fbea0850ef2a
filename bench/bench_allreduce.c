/* bench_allreduce.c - MPI_Allreduce (sum, in place) of float buffers between the ranks of mpirun:
   the best of REPS timings per size, after a barrier, as bench/dist.sh's cost model needs them
   (alpha: the smallest size; beta: the algorithm bandwidth of a gradient bucket).
     mpicc -O2 bench/bench_allreduce.c -o build/bench_allreduce && mpirun -np 2 build/bench_allreduce
   Rank 0 prints "RESULT floats=N bytes=B best_ms=T gb_s=G" per size. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    static const long SIZES[] = {1, 1024, 1L << 16, 1L << 18, 1L << 20, 1L << 22};
    enum { REPS = 20 };
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (size_t s = 0; s < sizeof SIZES / sizeof SIZES[0]; s++) {
        long n = SIZES[s];
        float *buf = (float *)calloc((size_t)n, sizeof *buf);
        double best = 1e30;
        if (!buf) { fprintf(stderr, "bench_allreduce: out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
        for (int r = 0; r < REPS; r++) {
            double t;
            MPI_Barrier(MPI_COMM_WORLD);
            t = MPI_Wtime();
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            t = MPI_Wtime() - t;
            if (t < best) best = t;
        }
        /* the slowest rank's best time is the collective's */
        MPI_Allreduce(MPI_IN_PLACE, &best, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0)
            printf("RESULT floats=%ld bytes=%ld best_ms=%.4f gb_s=%.3f\n", n, 4 * n, best * 1e3, 4.0 * n / best / 1e9);
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
