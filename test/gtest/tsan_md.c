/*
 * tsan_md: free hooks firing on other threads while registrations, lookups
 * and the data path's reads of memory handles run, built with
 * -fsanitize=thread (module sources, stand-in verbs of test/mocks, no
 * RDMA). UCP calls an iface from one thread at a time, but free hooks run
 * on whichever thread calls munmap or cudaFree (here: ucm_vm_munmap(), the
 * dispatch of UCM's unmap event): every race between them and the md is a
 * ThreadSanitizer report. test_tsan_md.cc runs it as a googletest test.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <uct/ib_gdr/rc_gdr_md.h>
#include "../mocks/mock_verbs.h"

#include <ucm/api/ucm.h>
#include <uct/api/uct.h>

#include <inttypes.h>
#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>


#define TSAN_MD_BUFFERS    32
#define TSAN_MD_HELD       8
#define TSAN_MD_LENGTH     (64 * 1024)
#define TSAN_MD_ITERATIONS 3000


static struct {
    uct_md_h        md;
    char            *buffers[TSAN_MD_BUFFERS];
    char            *held_buffers[TSAN_MD_HELD];
    uct_mem_h       held[TSAN_MD_HELD];
    int             stop;
    unsigned        errors;
    pthread_mutex_t lock;
} tsan_md = {
    .lock = PTHREAD_MUTEX_INITIALIZER
};


static void tsan_md_error(const char *what, ucs_status_t status)
{
    fprintf(stderr, "tsan_md: %s: %s\n", what, ucs_status_string(status));
    pthread_mutex_lock(&tsan_md.lock);
    ++tsan_md.errors;
    pthread_mutex_unlock(&tsan_md.lock);
}

/* Registrations and lookups, as a worker thread's UCP does them */
static void *tsan_md_user(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    char rkey[256];
    uct_mem_h memh;
    ucs_status_t status;
    unsigned i;
    char *buf;

    for (i = 0; i < TSAN_MD_ITERATIONS; ++i) {
        buf    = tsan_md.buffers[rand_r(&seed) % TSAN_MD_BUFFERS];
        status = uct_md_mem_reg(tsan_md.md, buf + (i % 64), 4096,
                                UCT_MD_MEM_ACCESS_ALL, &memh);
        if (status != UCS_OK) {
            tsan_md_error("mem_reg", status);
            continue;
        }

        (void)uct_rc_gdr_memh_lkey(memh);
        status = uct_md_mkey_pack(tsan_md.md, memh, rkey);
        if (status != UCS_OK) {
            tsan_md_error("mkey_pack", status);
        }
        status = uct_md_mem_dereg(tsan_md.md, memh);
        if (status != UCS_OK) {
            tsan_md_error("mem_dereg", status);
        }
    }
    return NULL;
}

/* The data path: what a put reads from the memory handles it is given,
 * without the md's lock */
static void *tsan_md_data_path(void *arg)
{
    const uct_rc_gdr_mr_t *mr;
    uint64_t sum = 0;
    unsigned i;

    while (!__atomic_load_n(&tsan_md.stop, __ATOMIC_ACQUIRE)) {
        for (i = 0; i < TSAN_MD_HELD; ++i) {
            mr   = uct_rc_gdr_memh_mr(tsan_md.held[i]);
            sum += uct_rc_gdr_memh_lkey(tsan_md.held[i]) + mr->rkey_flags +
                   uct_rc_gdr_mr_is_nic(mr) + (mr->gpu >= 0);
        }
    }
    return (void*)(uintptr_t)(sum & 1);
}

/* Free hooks: memory going away under registrations, on another thread */
static void *tsan_md_freer(void *arg)
{
    unsigned seed = 7;
    unsigned i;

    for (i = 0; i < TSAN_MD_ITERATIONS; ++i) {
        if (i % 4 == 0) {
            ucm_vm_munmap(tsan_md.held_buffers[rand_r(&seed) % TSAN_MD_HELD],
                          TSAN_MD_LENGTH);
        } else {
            ucm_vm_munmap(tsan_md.buffers[rand_r(&seed) % TSAN_MD_BUFFERS],
                          TSAN_MD_LENGTH);
        }
    }
    return NULL;
}

static char *tsan_md_map(void)
{
    void *p = mmap(NULL, TSAN_MD_LENGTH, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (p == MAP_FAILED) {
        perror("tsan_md: mmap");
        exit(1);
    }
    return p;
}

/* The whole run; returns the number of errors, each said on stderr. Needs
 * UCX_MEM_MMAP_HOOK_MODE=none from the start (test_tsan_md.cc). */
unsigned tsan_md_run(void)
{
    pthread_t users[2], data_path, freer;
    uct_rc_gdr_md_stats_t stats;
    uct_rc_gdr_md_t *gdr_md;
    uct_md_config_t *config;
    ucs_status_t status;
    unsigned i;

    ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);

    status = uct_md_config_read(&uct_rc_gdr_component, NULL, NULL, &config);
    if (status == UCS_OK) {
        status = uct_md_open(&uct_rc_gdr_component, MOCK_VERBS_DEVICE_NAME,
                             config, &tsan_md.md);
        uct_config_release(config);
    }
    if (status != UCS_OK) {
        fprintf(stderr, "tsan_md: md open: %s\n", ucs_status_string(status));
        return 1;
    }

    /* Without memory events no hook fires, and this tests nothing */
    gdr_md = ucs_derived_of(tsan_md.md, uct_rc_gdr_md_t);
    if (!gdr_md->mem_events) {
        fprintf(stderr, "tsan_md: no memory events in this process\n");
        return 1;
    }

    for (i = 0; i < TSAN_MD_BUFFERS; ++i) {
        tsan_md.buffers[i] = tsan_md_map();
    }
    for (i = 0; i < TSAN_MD_HELD; ++i) {
        tsan_md.held_buffers[i] = tsan_md_map();
        status = uct_md_mem_reg(tsan_md.md, tsan_md.held_buffers[i],
                                TSAN_MD_LENGTH, UCT_MD_MEM_ACCESS_ALL,
                                &tsan_md.held[i]);
        if (status != UCS_OK) {
            tsan_md_error("mem_reg", status);
            return tsan_md.errors;
        }
    }

    pthread_create(&users[0], NULL, tsan_md_user, (void*)1);
    pthread_create(&users[1], NULL, tsan_md_user, (void*)2);
    pthread_create(&data_path, NULL, tsan_md_data_path, NULL);
    pthread_create(&freer, NULL, tsan_md_freer, NULL);
    pthread_join(users[0], NULL);
    pthread_join(users[1], NULL);
    pthread_join(freer, NULL);
    __atomic_store_n(&tsan_md.stop, 1, __ATOMIC_RELEASE);
    pthread_join(data_path, NULL);

    for (i = 0; i < TSAN_MD_HELD; ++i) {
        status = uct_md_mem_dereg(tsan_md.md, tsan_md.held[i]);
        if (status != UCS_OK) {
            tsan_md_error("mem_dereg", status);
        }
    }
    /* The hooks fired, on the freeing thread */
    stats.size = sizeof(stats);
    uct_rc_gdr_md_stats_query(tsan_md.md, &stats);
    if (stats.invalidations == 0) {
        tsan_md_error("no registration was invalidated", UCS_ERR_NO_PROGRESS);
    }
    uct_md_close(tsan_md.md);
    for (i = 0; i < TSAN_MD_BUFFERS; ++i) {
        munmap(tsan_md.buffers[i], TSAN_MD_LENGTH);
    }
    for (i = 0; i < TSAN_MD_HELD; ++i) {
        munmap(tsan_md.held_buffers[i], TSAN_MD_LENGTH);
    }

    printf("free hooks on another thread (%" PRIu64 " invalidations), %u "
           "registrations each on 2 threads (%" PRIu64 " cache hits): %u "
           "errors, %u NIC registrations left\n", stats.invalidations,
           TSAN_MD_ITERATIONS, stats.cache_hits, tsan_md.errors,
           mock_verbs_live_count());
    return tsan_md.errors;
}
