/*
 * A user callback destroys the endpoint it was called for, and rc_gdr must
 * not touch that endpoint afterwards: the receive path after an active
 * message handler, and the bounce lane (a completion called from its
 * receive of the ACK, or from its sweep of a dead endpoint).
 *
 * Freed memory is only caught when it is reused or poisoned: glibc fills
 * freed memory during these tests (M_PERTURB, as MALLOC_PERTURB_=165 does),
 * so that a use after free reads garbage and crashes instead of passing by
 * luck.
 *
 * The bounce lane's tests (callback_destroy_gpu_emulated) need keyless
 * "GPU" memory: the emulated GPU (. contrib/env.sh --emulated-gpu, run.sh's
 * with_emulated_gpu) and UCX_RC_GDR_REG_METHODS=dmabuf, which they set.
 *
 * See file LICENSE for terms.
 */

#include "uct_rc_gdr_test.h"

#include <uct/ib_gdr/rc_gdr_cuda.h>

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>


class callback_destroy : public uct_rc_gdr_test {
protected:
    static const uint8_t AM_ID  = 7;
    static const size_t  LENGTH = 1000;

    /* A completion that destroys the endpoint of node */
    struct destroy_comp {
        uct_completion_t comp;
        uct_test_node_t  *node;
        int              calls;
        ucs_status_t     status;
    };

    void SetUp() override;
    void TearDown() override;

    static ucs_status_t destroy_am_handler(void *arg, void *data,
                                           size_t length, unsigned flags);
    static void destroy_comp_cb(uct_completion_t *self);
    static void destroy_comp_init(destroy_comp *c, uct_test_node_t *node);

    /* Progresses until calls() is not 0, bounded, then 1000 times more:
     * whatever the transport still does after the callback */
    template <typename F>
    void progress_after_call(uct_test_node_t **nodes, int count, F calls);

    /* a on dev_a and b on dev_b, connected to each other */
    void open_pair();

    int handler_calls = 0;
};


void callback_destroy::SetUp()
{
    mallopt(M_PERTURB, 165);
    uct_rc_gdr_test::SetUp();
}

void callback_destroy::TearDown()
{
    uct_rc_gdr_test::TearDown();
    mallopt(M_PERTURB, 0);
}

ucs_status_t callback_destroy::destroy_am_handler(void *arg, void *data,
                                                  size_t length,
                                                  unsigned flags)
{
    callback_destroy *self = (callback_destroy*)arg;
    uct_test_node_t *node  = self->b;

    ++self->handler_calls;
    if (node->ep != NULL) {
        uct_ep_destroy(node->ep);
        node->ep = NULL;
    }
    return UCS_OK;
}

void callback_destroy::destroy_comp_cb(uct_completion_t *self)
{
    destroy_comp *c = ucs_container_of(self, destroy_comp, comp);

    ++c->calls;
    c->status = self->status;
    if (c->node->ep != NULL) {
        uct_ep_destroy(c->node->ep);
        c->node->ep = NULL;
    }
}

void callback_destroy::destroy_comp_init(destroy_comp *c,
                                         uct_test_node_t *node)
{
    memset(c, 0, sizeof(*c));
    c->comp.func  = destroy_comp_cb;
    c->comp.count = 1;
    c->node       = node;
}

template <typename F>
void callback_destroy::progress_after_call(uct_test_node_t **nodes, int count,
                                           F calls)
{
    double deadline = uct_test_now() + uct_test_timeout_s;
    int i;

    while ((calls() == 0) && (uct_test_now() < deadline)) {
        uct_test_progress(nodes, count);
    }
    for (i = 0; i < 1000; ++i) {
        uct_test_progress(nodes, count);
    }
}


void callback_destroy::open_pair()
{
    a        = node_open(dev_a(), 0);
    b        = node_open(dev_b(), 0);
    nodes[0] = a;
    nodes[1] = b;
    uct_test_node_connect_pair(a, b, NULL, NULL);
}


/* b's handler destroys b's endpoint; the receive path returns credits after
 * the handler */
TEST_F(callback_destroy, am_handler_destroys_its_endpoint)
{
    ucs_status_t status;

    open_pair();
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(b->iface, AM_ID,
                                               destroy_am_handler, this, 0));

    status = UCT_TEST_RETRY(nodes, 2, uct_ep_am_short(a->ep, AM_ID, 0x1234,
                                                      NULL, 0));
    progress_after_call(nodes, 2, [this]() { return handler_calls; });

    UCT_TEST_EXPECT((status == UCS_OK) && (handler_calls == 1) &&
                    (b->ep == NULL), "active-message handler destroyed its "
                    "endpoint; the receive path carried on without it (%s, "
                    "%d calls)", ucs_status_string(status), handler_calls);
}


/* The completion of a's put, called from the send queue's poll, destroys
 * a's endpoint while the poll still walks its requests */
TEST_F(callback_destroy, put_completion_destroys_its_endpoint)
{
    static char src[LENGTH], dst[LENGTH];
    uct_mem_h src_memh, dst_memh;
    uct_rkey_bundle_t rkey;
    void *src_packed, *dst_packed;
    ucs_status_t status;
    destroy_comp c;
    uct_iov_t iov;

    open_pair();
    uct_test_mem_reg(a, src, LENGTH, &src_memh, &src_packed);
    uct_test_mem_reg(b, dst, LENGTH, &dst_memh, &dst_packed);
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(a->component, dst_packed, &rkey));

    memset(src, 0x5a, sizeof(src));
    destroy_comp_init(&c, a);
    uct_test_iov_init(&iov, src, LENGTH, src_memh);
    status = UCT_TEST_RETRY(nodes, 2, uct_ep_put_zcopy(a->ep, &iov, 1,
                                                       (uintptr_t)dst,
                                                       rkey.rkey, &c.comp));
    progress_after_call(nodes, 2, [&c]() { return c.calls; });

    UCT_TEST_EXPECT((status == UCS_INPROGRESS) && (c.calls == 1) &&
                    (c.status == UCS_OK) && (a->ep == NULL) &&
                    (memcmp(src, dst, LENGTH) == 0),
                    "put's completion destroyed its endpoint; the send "
                    "queue's poll carried on without it (%s, %d calls, %s)",
                    ucs_status_string(status), c.calls,
                    ucs_status_string(c.status));

    uct_rkey_release(a->component, &rkey);
    uct_md_mem_dereg(a->md, src_memh);
    uct_md_mem_dereg(b->md, dst_memh);
    free(src_packed);
    free(dst_packed);
}


class callback_destroy_gpu_emulated : public callback_destroy {
protected:
    void SetUp() override;
    void TearDown() override;

    /* The peer of the sweep test: keyless memory, connected, then silent
     * (no progress, so no ACK) until it is killed. Never returns. */
    static void death_peer(const char *dev, int to_parent, int from_parent);

    void bounce_put_destroys_its_endpoint(bool b_first);

    /* b's "GPU" buffer, registered without a NIC key */
    void *gpu        = nullptr;
    uct_mem_h memh   = UCT_MEM_HANDLE_NULL;
    void *packed     = nullptr;
    uct_rkey_bundle_t rkey;
    bool rkey_unpacked = false;
    pid_t child        = -1;
};


void callback_destroy_gpu_emulated::SetUp()
{
    const char *emulated = getenv("RC_GDR_GPU_EMULATED");

    callback_destroy::SetUp();
    if (IsSkipped()) {
        return;
    }

    if ((emulated == NULL) || strcmp(emulated, "1")) {
        GTEST_SKIP() << "needs the emulated GPU (. contrib/env.sh"
                        " --emulated-gpu; run.sh's with_emulated_gpu)";
    }
    emulated_gpu_note();
    env_set("UCX_RC_GDR_REG_METHODS", "dmabuf");
    nic_spec_set("dmabuf:off");     /* the stand-in NIC would serve it */
}

void callback_destroy_gpu_emulated::TearDown()
{
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    if (rkey_unpacked) {
        uct_rkey_release(a->component, &rkey);
    }
    if (memh != UCT_MEM_HANDLE_NULL) {
        uct_md_mem_dereg(b->md, memh);
    }
    free(packed);
    if (a != nullptr) {
        node_close(a);
    }
    if (b != nullptr) {
        node_close(b);
    }
    if (gpu != nullptr) {
        uct_rc_gdr_cuda_mem_free(gpu);
    }
    callback_destroy::TearDown();
}


/* The completion of a's bounce put to b's keyless "GPU" memory destroys
 * a's endpoint. It is called from the lane's receive of the ACK when the
 * data's send completion came first, from that send completion when the ACK
 * did (b_first: b progresses alone until both are there). */
void callback_destroy_gpu_emulated::bounce_put_destroys_its_endpoint(
        bool b_first)
{
    static char src[LENGTH], dst[LENGTH];
    uct_rc_gdr_cuda_ctx_h ctx;
    uct_test_md_stats_t md_stats;
    ucs_status_t status;
    double deadline;
    destroy_comp c;
    uct_iov_t iov;

    ASSERT_TRUE((uct_rc_gdr_cuda_init() == UCS_OK) &&
                (uct_rc_gdr_cuda_ctx_activate(0, &ctx) == UCS_OK) &&
                (uct_rc_gdr_cuda_mem_alloc(LENGTH, &gpu) == UCS_OK))
        << "CUDA driver (run with the emulated GPU)";

    open_pair();
    uct_test_mem_reg(b, gpu, LENGTH, &memh, &packed);
    md_stats = uct_test_md_stats(b->md);
    ASSERT_EQ(1u, md_stats.bounce_regs)
        << "the GPU registration has a NIC key (bounce_regs "
        << md_stats.bounce_regs << "): UCX_RC_GDR_REG_METHODS=dmabuf";
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(a->component, packed, &rkey));
    rkey_unpacked = true;

    memset(src, 0x3c, sizeof(src));
    destroy_comp_init(&c, a);
    uct_test_iov_init(&iov, src, LENGTH, UCT_MEM_HANDLE_NULL);
    status = UCT_TEST_RETRY(nodes, 2, uct_ep_put_zcopy(a->ep, &iov, 1,
                                                       (uintptr_t)gpu,
                                                       rkey.rkey, &c.comp));
    if (b_first) {
        deadline = uct_test_now() + 0.5;
        while (uct_test_now() < deadline) {
            uct_test_progress(&b, 1);
        }
    }
    progress_after_call(nodes, 2, [&c]() { return c.calls; });

    ASSERT_EQ(UCS_OK, uct_rc_gdr_cuda_memcpy_dtoh(dst, gpu, LENGTH));
    UCT_TEST_EXPECT((status == UCS_INPROGRESS) && (c.calls == 1) &&
                    (c.status == UCS_OK) && (a->ep == NULL) &&
                    (memcmp(dst, src, LENGTH) == 0),
                    "bounce put's completion destroyed its endpoint; the lane "
                    "carried on without it (%s, %d calls, %s%s)",
                    ucs_status_string(status), c.calls,
                    ucs_status_string(c.status),
                    b_first ? ", the peer progressed first" : "");
}

TEST_F(callback_destroy_gpu_emulated,
       bounce_ack_completion_destroys_its_endpoint)
{
    bounce_put_destroys_its_endpoint(false);
}

TEST_F(callback_destroy_gpu_emulated,
       bounce_data_completion_after_ack_destroys_its_endpoint)
{
    bounce_put_destroys_its_endpoint(true);
}


void callback_destroy_gpu_emulated::death_peer(const char *dev, int to_parent,
                                               int from_parent)
{
    uct_rc_gdr_cuda_ctx_h ctx;
    uct_test_wire_t wire, peer;
    uct_test_node_t b;
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

/* Two bounce puts wait for the ACKs of a forked peer that is then killed;
 * the first completion, called from the lane's sweep of the dead endpoint,
 * destroys it while the sweep still has the second */
TEST_F(callback_destroy_gpu_emulated,
       bounce_sweep_completion_destroys_dead_endpoint)
{
    static char src[2 * LENGTH];
    int to_child[2], from_child[2];
    uct_test_wire_t wire, mine;
    ucs_status_t status[2];
    destroy_comp c[2];
    double deadline;
    uct_iov_t iov;
    char ready;
    int i;

    env_set("UCX_RC_GDR_FAILURE_TIMEOUT", "2s");
    ASSERT_TRUE((pipe(to_child) == 0) && (pipe(from_child) == 0))
        << "pipe: " << strerror(errno);
    fflush(stdout);
    fflush(stderr);
    child = fork();
    ASSERT_NE(-1, child) << "fork: " << strerror(errno);
    if (child == 0) {
        death_peer(dev_b(), from_child[1], to_child[0]);
    }

    a        = node_open(dev_a(), 0);
    nodes[0] = a;
    uct_test_read_all(from_child[0], &wire, sizeof(wire));
    uct_test_node_wire(a, &mine);
    uct_test_write_all(to_child[1], &mine, sizeof(mine));
    uct_test_node_connect(a, &wire);
    uct_test_read_all(from_child[0], &ready, 1);
    for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) {
        close(fd);
    }
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(a->component, wire.rkey, &rkey));
    rkey_unpacked = true;

    memset(src, 0x3c, sizeof(src));
    for (i = 0; i < 2; ++i) {
        destroy_comp_init(&c[i], a);
        uct_test_iov_init(&iov, src + i * LENGTH, LENGTH,
                          UCT_MEM_HANDLE_NULL);
        status[i] = UCT_TEST_RETRY(nodes, 1,
                                   uct_ep_put_zcopy(a->ep, &iov, 1,
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
    child = -1;

    progress_after_call(nodes, 1, [&c]() { return c[0].calls + c[1].calls; });

    UCT_TEST_EXPECT((status[0] == UCS_INPROGRESS) &&
                    (status[1] == UCS_INPROGRESS) &&
                    (c[0].calls + c[1].calls == 1) && (a->ep == NULL) &&
                    ((c[0].calls ? c[0].status : c[1].status) ==
                     UCS_ERR_ENDPOINT_TIMEOUT),
                    "bounce puts to a killed peer: its death found by a "
                    "probe, the first completion (%s) destroyed the endpoint "
                    "during the lane's sweep, the other ended without a "
                    "callback (%d, %d calls)",
                    ucs_status_string(c[0].calls ? c[0].status :
                                      c[1].status),
                    c[0].calls, c[1].calls);
}
