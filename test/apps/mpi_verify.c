/*
 * mpi_verify: two ranks exchange 8 B .. 4 MiB messages point-to-point, then
 * run one MPI_Put / MPI_Get epoch; every byte is checked on the receiving
 * side. Run it with Open MPI's pml ucx over rc_gdr (test/rxe/run.sh).
 *
 * Prints "PASS ..." / "FAIL ..." lines from rank 0 and exits non-zero when
 * any byte differs on either rank.
 */

#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define MAX_SIZE (4u * 1024 * 1024)


static unsigned char pattern(size_t i, size_t size, int rank)
{
    return (unsigned char)(i * 7 + size * 13 + rank * 101 + (i >> 12));
}


static long count_bad(const unsigned char *buf, size_t size, int from_rank)
{
    long bad = 0;
    size_t i;

    for (i = 0; i < size; ++i) {
        bad += (buf[i] != pattern(i, size, from_rank));
    }
    return bad;
}


int main(int argc, char **argv)
{
    unsigned char *sbuf, *rbuf, *win_buf;
    long bad, total_bad, all_bad = 0;
    int rank, nranks, peer;
    size_t size, i;
    MPI_Win win;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks != 2) {
        if (rank == 0) {
            fprintf(stderr, "mpi_verify needs exactly 2 ranks\n");
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    peer = 1 - rank;

    sbuf = malloc(MAX_SIZE);
    rbuf = malloc(MAX_SIZE);

    for (size = 8; size <= MAX_SIZE; size *= 4) {
        for (i = 0; i < size; ++i) {
            sbuf[i] = pattern(i, size, rank);
        }
        memset(rbuf, 0, size);
        MPI_Sendrecv(sbuf, (int)size, MPI_BYTE, peer, 1, rbuf, (int)size,
                     MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        bad = count_bad(rbuf, size, peer);
        MPI_Allreduce(&bad, &total_bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        all_bad += total_bad;
        if (rank == 0) {
            printf("%s sendrecv %zu bytes (%ld bad bytes)\n",
                   total_bad ? "FAIL" : "PASS", size, total_bad);
        }
    }

    /* One-sided: each rank puts its pattern into the peer's window, then
     * reads the peer's pattern back with a get. */
    size = 1024 * 1024;
    MPI_Alloc_mem(2 * size, MPI_INFO_NULL, &win_buf);
    memset(win_buf, 0, 2 * size);
    for (i = 0; i < size; ++i) {
        win_buf[size + i] = pattern(i, size, rank); /* exposed for gets */
        sbuf[i]           = pattern(i, size, rank);
    }
    MPI_Win_create(win_buf, 2 * size, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);

    MPI_Win_fence(0, win);
    MPI_Put(sbuf, (int)size, MPI_BYTE, peer, 0, (int)size, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    bad = count_bad(win_buf, size, peer);
    MPI_Allreduce(&bad, &total_bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    all_bad += total_bad;
    if (rank == 0) {
        printf("%s MPI_Put %zu bytes (%ld bad bytes)\n",
               total_bad ? "FAIL" : "PASS", size, total_bad);
    }

    memset(rbuf, 0, size);
    MPI_Win_fence(0, win);
    MPI_Get(rbuf, (int)size, MPI_BYTE, peer, size, (int)size, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    bad = count_bad(rbuf, size, peer);
    MPI_Allreduce(&bad, &total_bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    all_bad += total_bad;
    if (rank == 0) {
        printf("%s MPI_Get %zu bytes (%ld bad bytes)\n",
               total_bad ? "FAIL" : "PASS", size, total_bad);
        printf("verification: %s\n", all_bad ? "FAILED" : "PASSED");
    }

    MPI_Win_free(&win);
    MPI_Free_mem(win_buf);
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return all_bad ? 1 : 0;
}
