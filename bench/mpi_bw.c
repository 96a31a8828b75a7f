/* Point-to-point bandwidth between ranks 0 and 1 (the netsim link's check, docs/distributed.md).
 *
 * Rank 0 sends `--reps` messages of `--mib` MiB (default 10 x 16 MiB) to rank 1 with
 * MPI_Send / MPI_Recv, after one untimed warm-up message; rank 1 answers each round with
 * a one-byte message so that rank 0's clock stops when the data has arrived. Rank 0
 * prints the median round's bandwidth in Gbit/s (10^9 bits per second) and where the two
 * ranks ran. Ranks beyond 2 idle.
 *
 *   mpirun -n 2 bench/mpi_bw [--mib M] [--reps R] */
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

enum { MAX_REPS = 1000, MAX_MIB = 1024, TAG_DATA = 1, TAG_ACK = 2 };

/* Parses --mib / --reps into *mib / *reps; false on anything else. */
static bool parse_args(int argc, char **argv, long *mib, long *reps) {
    for (int i = 1; i < argc; i++) {
        long *target = strcmp(argv[i], "--mib") == 0 ? mib : strcmp(argv[i], "--reps") == 0 ? reps : NULL;
        long max = target == mib ? MAX_MIB : MAX_REPS;
        char *end;
        if (!target || i + 1 >= argc) return false;
        *target = strtol(argv[++i], &end, 10);
        if (*end || *target < 1 || *target > max) return false;
    }
    return true;
}

/* One round from rank 0's side: the message out, the acknowledgement back; its seconds. */
static double send_round(char *buf, int bytes) {
    char ack;
    double t0 = MPI_Wtime();
    MPI_Send(buf, bytes, MPI_CHAR, 1, TAG_DATA, MPI_COMM_WORLD);
    MPI_Recv(&ack, 1, MPI_CHAR, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return MPI_Wtime() - t0;
}

static void receive_round(char *buf, int bytes) {
    char ack = 0;
    MPI_Recv(buf, bytes, MPI_CHAR, 0, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(&ack, 1, MPI_CHAR, 0, TAG_ACK, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long mib = 16, reps = 10;
    if (!parse_args(argc, argv, &mib, &reps) || size < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -n 2 mpi_bw [--mib M (1..%d, default 16)] [--reps R (1..%d, default 10)]\n",
                    MAX_MIB, MAX_REPS);
        MPI_Finalize();
        return 2;
    }
    int bytes = (int)(mib << 20);
    char *buf = malloc((size_t)bytes);
    double *seconds = malloc((size_t)reps * sizeof *seconds);
    if (!buf || !seconds) MPI_Abort(MPI_COMM_WORLD, 1);
    memset(buf, rank, (size_t)bytes);
    char host[MPI_MAX_PROCESSOR_NAME], peer[MPI_MAX_PROCESSOR_NAME] = "";
    int len;
    MPI_Get_processor_name(host, &len);
    if (rank == 0) MPI_Recv(peer, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 1, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (rank == 1) MPI_Send(host, len + 1, MPI_CHAR, 0, TAG_DATA, MPI_COMM_WORLD);
    for (long r = -1; r < reps && rank < 2; r++) { /* round -1: the warm-up */
        if (rank == 0) {
            double s = send_round(buf, bytes);
            if (r >= 0) seconds[r] = s;
        } else {
            receive_round(buf, bytes);
        }
    }
    if (rank == 0) {
        double median = bench_median(seconds, (int)reps);
        printf("mpi_bw: %ld x %ld MiB rank 0 (%s) -> rank 1 (%s): median %.3f s, %.2f Gbit/s (best %.2f)\n", reps,
               mib, host, peer, median, 8.0 * bytes / median / 1e9, 8.0 * bytes / seconds[0] / 1e9);
    }
    free(buf);
    free(seconds);
    MPI_Finalize();
    return 0;
}
