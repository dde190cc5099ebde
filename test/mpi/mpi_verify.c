/*
 * mpi_verify: two ranks exchange 8 B .. 4 MiB messages point-to-point, then
 * run one MPI_Put / MPI_Get epoch; every byte is checked on the receiving
 * side. Run it with Open MPI's pml ucx over rc_gdr (test/rxe/run.sh).
 *
 * With --gpu the buffers are GPU memory from the CUDA driver (what
 * RC_GDR_CUDA_LIBRARY names, default libcuda.so.1; in the soft-RoCE guest the
 * project's stand-in, so the GPU is EMULATED), filled and checked through
 * the driver's copies.
 *
 * With --threads the program asks for MPI_THREAD_MULTIPLE and runs
 * THREADS threads per rank at once, each exchanging its own messages (its
 * own tag) from buffers it allocates and frees every round: the frees run
 * the memory hooks on one thread while the others transfer.
 *
 * Rank 0 prints one "ok ..." or "BAD ..." line per exchange and a last
 * "verification: PASSED" or "FAILED"; the program exits non-zero when any
 * byte differs on either rank. Counting results is the runner's (one check
 * per run), so these lines say PASS or FAIL nowhere.
 *
 * MPI_VERIFY_NIC_BYTES=DEV[,DEV...] ("rxe0:1,rxe1:1"): after the
 * point-to-point exchanges each rank prints the zero-copy bytes rc_gdr's
 * interfaces on each device started in this process, and of those the
 * bytes staged through host memory (the bounce lane), from rc_gdr's own
 * counters (uct_rc_gdr_dev_stats_query), so a runner can tell which NIC and
 * lane carried a rank's rendezvous without reading UCX's logs.
 */

#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <mpi.h>

#include <uct/ib_gdr/rc_gdr_iface_stats.h>

#include <dlfcn.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define MAX_SIZE (4u * 1024 * 1024)


/* The few driver calls this program needs, looked up at run time so that
 * it builds without CUDA. */
static struct {
    int  (*init)(unsigned);
    int  (*device_get)(int*, int);
    int  (*ctx_retain)(void**, int);
    int  (*ctx_set)(void*);
    int  (*alloc)(uintptr_t*, size_t);
    int  (*free)(uintptr_t);
    int  (*htod)(uintptr_t, const void*, size_t);
    int  (*dtoh)(void*, uintptr_t, size_t);
} cu;
static int g_gpu;
static int g_gpu_ordinal;


static void gpu_init(void)
{
    const char *lib = getenv("RC_GDR_CUDA_LIBRARY");
    void *handle    = dlopen(lib ? lib : "libcuda.so.1", RTLD_NOW);
    const char *per_rank = getenv("MPI_VERIFY_GPU_PER_RANK");
    void *ctx;
    int dev, rank, ordinal = 0;

    if (handle == NULL) {
        fprintf(stderr, "mpi_verify: --gpu: %s\n", dlerror());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    *(void**)&cu.init       = dlsym(handle, "cuInit");
    *(void**)&cu.device_get = dlsym(handle, "cuDeviceGet");
    *(void**)&cu.ctx_retain = dlsym(handle, "cuDevicePrimaryCtxRetain");
    *(void**)&cu.ctx_set    = dlsym(handle, "cuCtxSetCurrent");
    *(void**)&cu.alloc      = dlsym(handle, "cuMemAlloc_v2");
    *(void**)&cu.free       = dlsym(handle, "cuMemFree_v2");
    *(void**)&cu.htod       = dlsym(handle, "cuMemcpyHtoD_v2");
    *(void**)&cu.dtoh       = dlsym(handle, "cuMemcpyDtoH_v2");
    /* MPI_VERIFY_GPU_PER_RANK=N: rank r uses GPU r % N (a GPU per rank,
     * as on a multi-GPU node) */
    if ((per_rank != NULL) && (atoi(per_rank) > 0)) {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        ordinal = rank % atoi(per_rank);
    }
    g_gpu_ordinal = ordinal;
    if (!cu.init || !cu.dtoh || cu.init(0) || cu.device_get(&dev, ordinal) ||
        cu.ctx_retain(&ctx, dev) || cu.ctx_set(ctx)) {
        fprintf(stderr, "mpi_verify: --gpu: CUDA driver not usable\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    g_gpu = 1;
}


/* Buffers: GPU memory with --gpu, host memory otherwise. */
static void *buf_alloc(size_t size)
{
    uintptr_t ptr;

    if (!g_gpu) {
        return malloc(size);
    }
    if (cu.alloc(&ptr, size) != 0) {
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return (void*)ptr;
}


static void buf_free(void *buf)
{
    g_gpu ? (void)cu.free((uintptr_t)buf) : free(buf);
}


static void buf_write(void *dst, const void *src, size_t size)
{
    g_gpu ? (void)cu.htod((uintptr_t)dst, src, size) :
            (void)memcpy(dst, src, size);
}


static void buf_read(void *dst, const void *src, size_t size)
{
    g_gpu ? (void)cu.dtoh(dst, (uintptr_t)src, size) :
            (void)memcpy(dst, src, size);
}


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


/* What rank 1 - rank sent into buf (copied out to check), verified on both
 * ranks: the bad bytes of the two, and rank 0's line for what */
static long verify_exchange(const void *buf, unsigned char *check,
                            size_t size, int rank, const char *what)
{
    long bad, total_bad;

    buf_read(check, buf, size);
    bad = count_bad(check, size, 1 - rank);
    MPI_Allreduce(&bad, &total_bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("%s %s %zu bytes%s (%ld bad bytes)\n",
               total_bad ? "BAD" : "ok", what, size,
               g_gpu ? " GPU->GPU" : "", total_bad);
    }
    return total_bad;
}


#define THREADS        4
#define THREAD_ROUNDS  8


static int g_peer;


/* One thread's exchanges: its own tag, fresh buffers every round (freed
 * at its end, so the unmap of large ones fires hooks on this thread while
 * the other threads' messages are in flight); returns its bad bytes */
static void *thread_exchange(void *arg)
{
    long tag = (long)(uintptr_t)arg;
    unsigned char *sbuf, *rbuf;
    long bad = 0;
    unsigned round;
    size_t size, i;
    int rank;

    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (round = 0; round < THREAD_ROUNDS; ++round) {
        for (size = 8; size <= MAX_SIZE; size *= 8) {
            sbuf = malloc(size);
            rbuf = calloc(1, size);
            if ((sbuf == NULL) || (rbuf == NULL)) {
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            for (i = 0; i < size; ++i) {
                sbuf[i] = pattern(i, size, rank) ^ (unsigned char)tag;
            }
            MPI_Sendrecv(sbuf, (int)size, MPI_BYTE, g_peer, (int)tag, rbuf,
                         (int)size, MPI_BYTE, g_peer, (int)tag,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (i = 0; i < size; ++i) {
                bad += (rbuf[i] !=
                        (pattern(i, size, g_peer) ^ (unsigned char)tag));
            }
            free(sbuf);
            free(rbuf);
        }
    }
    return (void*)(uintptr_t)bad;
}


static int run_threads(int rank)
{
    pthread_t threads[THREADS];
    long bad = 0, total_bad;
    void *ret;
    long t;

    for (t = 0; t < THREADS; ++t) {
        if (pthread_create(&threads[t], NULL, thread_exchange,
                           (void*)(uintptr_t)(t + 1)) != 0) {
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    for (t = 0; t < THREADS; ++t) {
        pthread_join(threads[t], &ret);
        bad += (long)(uintptr_t)ret;
    }

    MPI_Allreduce(&bad, &total_bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("%s MPI_THREAD_MULTIPLE: %d threads x %d rounds of sendrecv "
               "8 B..%u MiB (%ld bad bytes)\n", total_bad ? "BAD" : "ok",
               THREADS, THREAD_ROUNDS, MAX_SIZE >> 20, total_bad);
        printf("verification: %s\n", total_bad ? "FAILED" : "PASSED");
    }
    return total_bad ? 1 : 0;
}


/* uct_rc_gdr_iface_stats_t is versioned by size, fields only appended: one
 * that ends before rma_zcopy_bytes lacks it. Looked up at run time: UCX
 * loads the module. */
#define NIC_STATS_NEEDED \
    (offsetof(uct_rc_gdr_iface_stats_t, rma_zcopy_bytes) + sizeof(uint64_t))

static void print_nic_bytes(int rank, const char *phase)
{
    /* ucs_status_t: UCS_OK is 0 */
    typedef int (*query_func_t)(const char*, uct_rc_gdr_iface_stats_t*);
    const char *list = getenv("MPI_VERIFY_NIC_BYTES");
    uct_rc_gdr_iface_stats_t stats;
    char devs[256], line[1024], *dev, *save;
    query_func_t query;
    size_t len;

    if ((list == NULL) || (*list == '\0')) {
        return;
    }
    *(void**)&query = dlsym(RTLD_DEFAULT, "uct_rc_gdr_dev_stats_query");
    if (query == NULL) {
        printf("rank %d: no uct_rc_gdr_dev_stats_query in this process\n",
               rank);
        return;
    }
    snprintf(devs, sizeof(devs), "%s", list);
    len = (size_t)snprintf(line, sizeof(line), "rank %d GPU%d %s:", rank,
                           g_gpu_ordinal, phase);
    for (dev = strtok_r(devs, ",", &save); dev != NULL;
         dev = strtok_r(NULL, ",", &save)) {
        memset(&stats, 0, sizeof(stats));
        stats.size = sizeof(stats);
        if (query(dev, &stats) != 0) {
            /* no interface there: nothing moved */
            memset(&stats, 0, sizeof(stats));
        } else if (stats.size < NIC_STATS_NEEDED) {
            printf("rank %d: rc_gdr's counters lack rma_zcopy_bytes\n",
                   rank);
            return;
        }
        len += (size_t)snprintf(line + len, sizeof(line) - len,
                                " %s %llu B (%llu staged),", dev,
                                (unsigned long long)
                                stats.rma_zcopy_bytes,
                                (unsigned long long)
                                stats.bounce_staged_bytes);
        if (len >= sizeof(line)) {
            len = sizeof(line) - 1;
            break;
        }
    }
    printf("%.*s (zero-copy bytes from rc_gdr's counters)\n",
           (int)(len - 1), line);
    fflush(stdout);
}


int main(int argc, char **argv)
{
    unsigned char *sbuf, *rbuf, *win_buf, *host, *check;
    long bad, all_bad = 0;
    int rank, nranks, peer;
    size_t size, i, min_size;
    MPI_Win win;

    int threads  = (argc > 1) && !strcmp(argv[1], "--threads");
    int provided = MPI_THREAD_SINGLE;

    if (threads) {
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks != 2) {
        if (rank == 0) {
            fprintf(stderr, "mpi_verify needs exactly 2 ranks\n");
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    peer   = 1 - rank;
    g_peer = peer;
    if (threads) {
        if (provided != MPI_THREAD_MULTIPLE) {
            if (rank == 0) {
                printf("BAD MPI_THREAD_MULTIPLE not provided (%d)\n",
                       provided);
            }
            MPI_Finalize();
            return 1;
        }
        bad = run_threads(rank);
        MPI_Finalize();
        return (int)bad;
    }
    if ((argc > 1) && !strcmp(argv[1], "--gpu")) {
        gpu_init();
    }
    min_size = (argc > 2) ? (size_t)atol(argv[2]) : 8;

    sbuf  = buf_alloc(MAX_SIZE);
    rbuf  = buf_alloc(MAX_SIZE);
    host  = malloc(2 * MAX_SIZE);
    check = malloc(2 * MAX_SIZE);

    for (size = min_size; size <= MAX_SIZE; size *= 4) {
        for (i = 0; i < size; ++i) {
            host[i] = pattern(i, size, rank);
        }
        buf_write(sbuf, host, size);
        memset(host, 0, size);
        buf_write(rbuf, host, size);
        MPI_Sendrecv(sbuf, (int)size, MPI_BYTE, peer, 1, rbuf, (int)size,
                     MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        all_bad += verify_exchange(rbuf, check, size, rank, "sendrecv");
    }
    print_nic_bytes(rank, "point-to-point");

    /* One-sided: each rank puts its pattern into the peer's window, then
     * reads the peer's pattern back with a get. */
    size = 1024 * 1024;
    win_buf = buf_alloc(2 * size);
    memset(host, 0, 2 * size);
    for (i = 0; i < size; ++i) {
        host[size + i] = pattern(i, size, rank); /* exposed for gets */
    }
    buf_write(win_buf, host, 2 * size);
    for (i = 0; i < size; ++i) {
        host[i] = pattern(i, size, rank);
    }
    buf_write(sbuf, host, size);
    MPI_Win_create(win_buf, 2 * size, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);

    MPI_Win_fence(0, win);
    MPI_Put(sbuf, (int)size, MPI_BYTE, peer, 0, (int)size, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    all_bad += verify_exchange(win_buf, check, size, rank, "MPI_Put");

    memset(host, 0, size);
    buf_write(rbuf, host, size);
    MPI_Win_fence(0, win);
    MPI_Get(rbuf, (int)size, MPI_BYTE, peer, size, (int)size, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    all_bad += verify_exchange(rbuf, check, size, rank, "MPI_Get");
    if (rank == 0) {
        printf("verification: %s\n", all_bad ? "FAILED" : "PASSED");
    }

    MPI_Win_free(&win);
    buf_free(win_buf);
    buf_free(sbuf);
    buf_free(rbuf);
    free(host);
    free(check);
    MPI_Finalize();
    return all_bad ? 1 : 0;
}
