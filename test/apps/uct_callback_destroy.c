/*
 * uct_callback_destroy: a user callback destroys the endpoint it was called
 * for, and rc_gdr must not touch that endpoint afterwards (issue 13, item 7).
 *
 *   uct_callback_destroy am DEV_A DEV_B      B's active-message handler
 *                                            destroys B's endpoint (the
 *                                            receive path returns credits
 *                                            after the handler)
 *   uct_callback_destroy bounce DEV_A DEV_B  the completion of A's bounce put
 *                                            to B's keyless "GPU" memory,
 *                                            called from the lane's receive
 *                                            of the ACK, destroys A's
 *                                            endpoint (emulated GPU,
 *                                            UCX_RC_GDR_REG_METHODS=dmabuf)
 *   uct_callback_destroy bounce-death DEV_A DEV_B
 *                                            two bounce puts wait for the ACKs
 *                                            of a forked peer that is then
 *                                            killed; the first completion,
 *                                            called from the lane's sweep of
 *                                            the dead endpoint, destroys it
 *                                            while the sweep still has the
 *                                            second (UCX_RC_GDR_FAILURE_TIMEOUT
 *                                            short, emulated GPU as above)
 *
 * Freed memory is only caught when it is reused or poisoned: run with
 * MALLOC_PERTURB_ set (glibc fills freed memory), so that a use after free
 * reads garbage and crashes instead of passing by luck.
 *
 * Prints PASS/FAIL lines and "N passed, N failed".
 */

#define _GNU_SOURCE

#include <uct/ib_gdr/rc_gdr_cuda.h>
#include "uct_test_util.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>


#define AM_ID  7
#define LENGTH 1000


static int handler_calls;


static ucs_status_t destroy_am_handler(void *arg, void *data, size_t length,
                                       unsigned flags)
{
    uct_test_node_t *node = arg;

    ++handler_calls;
    if (node->ep != NULL) {
        uct_ep_destroy(node->ep);
        node->ep = NULL;
    }
    return UCS_OK;
}


static void run_am(const char *dev_a, const char *dev_b)
{
    uct_test_node_t a, b, *nodes[2] = {&a, &b};
    uint64_t hdr = 0x1234;
    ucs_status_t status;
    double deadline;
    int i;

    uct_test_node_open(&a, dev_a, 0);
    uct_test_node_open(&b, dev_b, 0);
    uct_test_node_connect_pair(&a, &b, NULL, NULL);
    if (uct_iface_set_am_handler(b.iface, AM_ID, destroy_am_handler, &b,
                                 0) != UCS_OK) {
        uct_test_die("uct_iface_set_am_handler", UCS_ERR_IO_ERROR);
    }

    status = UCT_TEST_RETRY(nodes, 2, uct_ep_am_short(a.ep, AM_ID, hdr, NULL,
                                                      0));
    deadline = uct_test_now() + uct_test_timeout_s;
    while ((handler_calls == 0) && (uct_test_now() < deadline)) {
        uct_test_progress(nodes, 2);
    }
    for (i = 0; i < 1000; ++i) {
        uct_test_progress(nodes, 2);
    }

    uct_test_check((status == UCS_OK) && (handler_calls == 1) &&
                   (b.ep == NULL), "active-message handler destroyed its "
                   "endpoint; the receive path carried on without it (%s, %d "
                   "calls)", ucs_status_string(status), handler_calls);

    uct_test_node_close(&a);
    uct_test_node_close(&b);
}


typedef struct {
    uct_completion_t comp;
    uct_test_node_t  *node;
    int              calls;
    ucs_status_t     status;
} destroy_comp_t;


static void destroy_comp_cb(uct_completion_t *self)
{
    destroy_comp_t *c = ucs_container_of(self, destroy_comp_t, comp);

    ++c->calls;
    c->status = self->status;
    if (c->node->ep != NULL) {
        uct_ep_destroy(c->node->ep);
        c->node->ep = NULL;
    }
}


static void run_bounce(const char *dev_a, const char *dev_b)
{
    uct_test_node_t a, b, *nodes[2] = {&a, &b};
    static char src[LENGTH];
    uct_rkey_bundle_t rkey;
    uct_rc_gdr_cuda_ctx_h ctx;
    uct_test_md_stats_t md_stats;
    destroy_comp_t c;
    ucs_status_t status;
    uct_mem_h memh;
    double deadline;
    void *gpu, *packed;
    uct_iov_t iov;
    int i;

    if ((uct_rc_gdr_cuda_init() != UCS_OK) ||
        (uct_rc_gdr_cuda_ctx_activate(0, &ctx) != UCS_OK) ||
        (uct_rc_gdr_cuda_mem_alloc(LENGTH, &gpu) != UCS_OK)) {
        uct_test_die("CUDA driver (run with the emulated GPU)",
                     UCS_ERR_NO_DEVICE);
    }

    uct_test_node_open(&a, dev_a, 0);
    uct_test_node_open(&b, dev_b, 0);
    uct_test_node_connect_pair(&a, &b, NULL, NULL);
    uct_test_mem_reg(&b, gpu, LENGTH, &memh, &packed);
    md_stats = uct_test_md_stats(b.md);
    if (md_stats.bounce_regs != 1) {
        printf("FAIL the GPU registration has a NIC key (bounce_regs %"
               PRIu64 "): run with UCX_RC_GDR_REG_METHODS=dmabuf\n",
               md_stats.bounce_regs);
        exit(1);
    }
    if (uct_rkey_unpack(a.component, packed, &rkey) != UCS_OK) {
        uct_test_die("uct_rkey_unpack", UCS_ERR_INVALID_PARAM);
    }

    memset(src, 0x3c, sizeof(src));
    memset(&c, 0, sizeof(c));
    c.comp.func  = destroy_comp_cb;
    c.comp.count = 1;
    c.node       = &a;
    uct_test_iov_init(&iov, src, LENGTH, UCT_MEM_HANDLE_NULL);
    status = UCT_TEST_RETRY(nodes, 2, uct_ep_put_zcopy(a.ep, &iov, 1,
                                                       (uintptr_t)gpu,
                                                       rkey.rkey, &c.comp));
    deadline = uct_test_now() + uct_test_timeout_s;
    while ((c.calls == 0) && (uct_test_now() < deadline)) {
        uct_test_progress(nodes, 2);
    }
    for (i = 0; i < 1000; ++i) {
        uct_test_progress(nodes, 2);
    }

    uct_test_check((status == UCS_INPROGRESS) && (c.calls == 1) &&
                   (c.status == UCS_OK) && (a.ep == NULL),
                   "bounce put's completion destroyed its endpoint; the lane "
                   "carried on without it (%s, %d calls, %s)",
                   ucs_status_string(status), c.calls,
                   ucs_status_string(c.status));

    uct_rkey_release(a.component, &rkey);
    uct_md_mem_dereg(b.md, memh);
    free(packed);
    uct_test_node_close(&a);
    uct_test_node_close(&b);
    uct_rc_gdr_cuda_mem_free(gpu);
}


/* The peer of bounce-death: keyless memory, connected, then silent (no
 * progress, so no ACK) until it is killed */
static void death_peer(const char *dev, int to_parent, int from_parent)
{
    uct_test_node_t b;
    uct_test_wire_t wire, peer;
    uct_rc_gdr_cuda_ctx_h ctx;
    uct_mem_h memh;
    void *gpu, *packed;
    char ready = 1;

    if ((uct_rc_gdr_cuda_init() != UCS_OK) ||
        (uct_rc_gdr_cuda_ctx_activate(0, &ctx) != UCS_OK) ||
        (uct_rc_gdr_cuda_mem_alloc(2 * LENGTH, &gpu) != UCS_OK)) {
        uct_test_die("CUDA driver (run with the emulated GPU)",
                     UCS_ERR_NO_DEVICE);
    }

    uct_test_node_open(&b, dev, 0);
    uct_test_mem_reg(&b, gpu, 2 * LENGTH, &memh, &packed);
    uct_test_node_wire(&b, &wire);
    memcpy(wire.rkey, packed, b.md_attr.rkey_packed_size);
    wire.buf = (uintptr_t)gpu;
    uct_test_write_all(to_parent, &wire, sizeof(wire));
    uct_test_read_all(from_parent, &peer, sizeof(peer));
    uct_test_node_connect(&b, &peer);
    uct_test_write_all(to_parent, &ready, 1);
    for (;;) {
        pause();
    }
}


static void run_bounce_death(const char *dev_a, const char *dev_b)
{
    uct_test_node_t a, *nodes[1] = {&a};
    static char src[2 * LENGTH];
    int to_child[2], from_child[2];
    uct_test_wire_t wire, mine;
    uct_rkey_bundle_t rkey;
    destroy_comp_t c[2];
    ucs_status_t status[2];
    double deadline;
    uct_iov_t iov;
    pid_t child;
    char ready;
    int i;

    if ((pipe(to_child) != 0) || (pipe(from_child) != 0)) {
        uct_test_die("pipe", UCS_ERR_IO_ERROR);
    }
    child = fork();
    if (child == 0) {
        death_peer(dev_b, from_child[1], to_child[0]);
    }

    uct_test_node_open(&a, dev_a, 0);
    uct_test_read_all(from_child[0], &wire, sizeof(wire));
    uct_test_node_wire(&a, &mine);
    uct_test_write_all(to_child[1], &mine, sizeof(mine));
    uct_test_node_connect(&a, &wire);
    uct_test_read_all(from_child[0], &ready, 1);
    if (uct_rkey_unpack(a.component, wire.rkey, &rkey) != UCS_OK) {
        uct_test_die("uct_rkey_unpack", UCS_ERR_INVALID_PARAM);
    }

    memset(src, 0x3c, sizeof(src));
    for (i = 0; i < 2; ++i) {
        memset(&c[i], 0, sizeof(c[i]));
        c[i].comp.func  = destroy_comp_cb;
        c[i].comp.count = 1;
        c[i].node       = &a;
        uct_test_iov_init(&iov, src + i * LENGTH, LENGTH,
                          UCT_MEM_HANDLE_NULL);
        status[i] = UCT_TEST_RETRY(nodes, 1,
                                   uct_ep_put_zcopy(a.ep, &iov, 1,
                                                    wire.buf + i * LENGTH,
                                                    rkey.rkey, &c[i].comp));
    }

    /* the data reaches the silent peer's queue; then the peer dies */
    deadline = uct_test_now() + 1.0;
    while (uct_test_now() < deadline) {
        uct_test_progress(nodes, 1);
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);

    deadline = uct_test_now() + uct_test_timeout_s;
    while ((c[0].calls + c[1].calls == 0) && (uct_test_now() < deadline)) {
        uct_test_progress(nodes, 1);
    }
    for (i = 0; i < 1000; ++i) {
        uct_test_progress(nodes, 1);
    }

    uct_test_check((status[0] == UCS_INPROGRESS) &&
                   (status[1] == UCS_INPROGRESS) &&
                   (c[0].calls + c[1].calls == 1) && (a.ep == NULL) &&
                   ((c[0].calls ? c[0].status : c[1].status) ==
                    UCS_ERR_ENDPOINT_TIMEOUT),
                   "bounce puts to a killed peer: its death found by a probe, "
                   "the first completion (%s) destroyed the endpoint during "
                   "the lane's sweep, the other ended without a callback (%d, "
                   "%d calls)",
                   ucs_status_string(c[0].calls ? c[0].status : c[1].status),
                   c[0].calls, c[1].calls);

    uct_rkey_release(a.component, &rkey);
    uct_test_node_close(&a);
}


int main(int argc, char **argv)
{
    if ((argc != 4) ||
        (strcmp(argv[1], "am") && strcmp(argv[1], "bounce") &&
         strcmp(argv[1], "bounce-death"))) {
        fprintf(stderr, "usage: %s am|bounce|bounce-death DEV_A DEV_B\n",
                argv[0]);
        return UCT_TEST_EXIT_SETUP;
    }

    uct_test_init("uct_callback_destroy", 30.0);
    if (!strcmp(argv[1], "am")) {
        run_am(argv[2], argv[3]);
    } else if (!strcmp(argv[1], "bounce")) {
        run_bounce(argv[2], argv[3]);
    } else {
        run_bounce_death(argv[2], argv[3]);
    }
    return uct_test_summary();
}
