/*
 * The stand-in NIC (test/tnic) behaves like the part it stands for: data
 * byte-exact, keys, access and bounds checked with a NIC's errors, RNR,
 * CQ overrun, registration limits, a dead peer bounded by the transport
 * timer, completion channels. Run with LD_LIBRARY_PATH=<build>/test/tnic/lib;
 * on another libibverbs every test skips and says why.
 *
 * See file LICENSE for terms.
 */

#include "tnic_fixture.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace {

TEST_F(tnic, write_read_send_atomics_byte_exact)
{
    struct ibv_wc wc;
    size_t i, len = 40000;   /* several segments */

    connect();
    for (i = 0; i < len; ++i) {
        a.buf[i] = (uint8_t)(i * 7 + 3);
    }
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 1, a.buf.data(), len,
                      a.mr->lkey, raddr(b, 100), b.mr->rkey));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(1u, wc.wr_id);
    EXPECT_EQ(IBV_WC_RDMA_WRITE, wc.opcode);
    EXPECT_EQ(0, memcmp(a.buf.data(), b.buf.data() + 100, len));

    /* read it back elsewhere */
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_READ, 2, a.buf.data() + 50000, 5000,
                      a.mr->lkey, raddr(b, 100), b.mr->rkey));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_RDMA_READ, wc.opcode);
    EXPECT_EQ(0, memcmp(a.buf.data() + 50000, a.buf.data(), 5000));

    /* send with immediate into a posted receive */
    ASSERT_EQ(0, post_recv(b, 77, b.buf.data() + 60000, 5000));
    struct ibv_sge sge = {(uintptr_t)a.buf.data(), 4097, a.mr->lkey};
    struct ibv_send_wr wr = {}, *bad;
    wr.wr_id = 3; wr.sg_list = &sge; wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND_WITH_IMM; wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htobe32(0x1234);
    ASSERT_EQ(0, ibv_post_send(a.qp, &wr, &bad));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    ASSERT_TRUE(wait_wc(b, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(77u, wc.wr_id);
    EXPECT_EQ(IBV_WC_RECV, wc.opcode);
    EXPECT_EQ(4097u, wc.byte_len);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(htobe32(0x1234), wc.imm_data);
    EXPECT_EQ(a.qp->qp_num, wc.src_qp);
    EXPECT_EQ(b.qp->qp_num, wc.qp_num);
    EXPECT_EQ(0, memcmp(a.buf.data(), b.buf.data() + 60000, 4097));

    /* inline: the data is taken at post time */
    memcpy(a.buf.data(), "inline!", 8);
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 4, a.buf.data(), 8, 0,
                      raddr(b, 9000), b.mr->rkey,
                      IBV_SEND_SIGNALED | IBV_SEND_INLINE));
    memcpy(a.buf.data(), "changed", 8);
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_STREQ("inline!", (char*)b.buf.data() + 9000);

    /* atomics on an aligned word */
    uint64_t *target = (uint64_t*)(b.buf.data() + 8192);
    uint64_t *result = (uint64_t*)(a.buf.data() + 8192);
    *target = 40;
    ASSERT_EQ(0, post(a, IBV_WR_ATOMIC_FETCH_AND_ADD, 5, result, 8,
                      a.mr->lkey, raddr(b, 8192), b.mr->rkey,
                      IBV_SEND_SIGNALED, 2));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_FETCH_ADD, wc.opcode);
    EXPECT_EQ(40u, *result);
    EXPECT_EQ(42u, *target);
    ASSERT_EQ(0, post(a, IBV_WR_ATOMIC_CMP_AND_SWP, 6, result, 8,
                      a.mr->lkey, raddr(b, 8192), b.mr->rkey,
                      IBV_SEND_SIGNALED, 42, 7));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(42u, *result);
    EXPECT_EQ(7u, *target);
}

TEST_F(tnic, unsignaled_complete_in_order)
{
    struct ibv_wc wc;
    int i;

    connect();
    for (i = 0; i < 3; ++i) {
        ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 100 + i, a.buf.data(), 16,
                          a.mr->lkey, raddr(b), b.mr->rkey, 0));
    }
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 999, a.buf.data(), 16,
                      a.mr->lkey, raddr(b), b.mr->rkey));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(999u, wc.wr_id);
    EXPECT_EQ(0, ibv_poll_cq(a.cq, 1, &wc));
}

TEST_F(tnic, sq_full_enomem_and_dropped_peer_retry_exceeded)
{
    struct ibv_wc wc;
    int i, ret = 0;

    /* a peer cut off: nothing is answered, the send queue fills */
    ASSERT_EQ(0, to_rts(a.qp, b.qp->qp_num, b.lid, 7, 12, 2));
    ASSERT_EQ(0, to_rts(b.qp, a.qp->qp_num, a.lid));
    ASSERT_EQ(0, fault_set("drop"));
    for (i = 0; (i < 64) && (ret == 0); ++i) {
        ret = post(a, IBV_WR_RDMA_WRITE, 100 + i, a.buf.data(), 16,
                   a.mr->lkey, raddr(b), b.mr->rkey, 0);
    }
    EXPECT_EQ(ENOMEM, ret);
    EXPECT_EQ(17, i);
    /* the transport timer: 3 tries of 16.8 ms, then the error, then the
     * rest flushed, unsignaled included */
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_RETRY_EXC_ERR, wc.status);
    EXPECT_EQ(100u, wc.wr_id);
    for (i = 1; i < 16; ++i) {
        ASSERT_TRUE(wait_wc(a, &wc));
        EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status);
        EXPECT_EQ(100u + i, wc.wr_id);
    }
}

/* A cut shorter than the retry budget (IB: the transport timer sends the
 * unanswered requests again): what was posted during the cut, a send and
 * a write, arrives once the wire is back, each once, and completes */
TEST_F(tnic, drop_window_requests_sent_again)
{
    struct ibv_wc wc;

    /* timeout 14: 67 ms a try; 7 tries, about 0.5 s */
    ASSERT_EQ(0, to_rts(a.qp, b.qp->qp_num, b.lid, 7, 14, 7));
    ASSERT_EQ(0, to_rts(b.qp, a.qp->qp_num, a.lid, 7, 14, 7));
    ASSERT_EQ(0, post_recv(b, 7, b.buf.data() + 4096, 64));
    memcpy(a.buf.data(), "cut-send", 8);
    memcpy(a.buf.data() + 8, "cutwrite", 8);
    ASSERT_EQ(0, fault_set("drop"));
    ASSERT_EQ(0, post(a, IBV_WR_SEND, 1, a.buf.data(), 8, a.mr->lkey, 0, 0,
                      0));
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 2, a.buf.data() + 8, 8,
                      a.mr->lkey, raddr(b, 8192), b.mr->rkey));
    usleep(200000);   /* three tries lost */
    EXPECT_EQ(0, ibv_poll_cq(a.cq, 1, &wc));
    fault_clear();

    ASSERT_TRUE(wait_wc(a, &wc, 2.0)) << "nothing sent again after the cut";
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(2u, wc.wr_id);
    ASSERT_TRUE(wait_wc(b, &wc, 2.0));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(7u, wc.wr_id);
    EXPECT_EQ(0, memcmp(b.buf.data() + 4096, "cut-send", 8));
    EXPECT_EQ(0, memcmp(b.buf.data() + 8192, "cutwrite", 8));
    EXPECT_EQ(0, ibv_poll_cq(b.cq, 1, &wc)) << "a receive taken twice";
}

/* The dup fault delivers every request twice: the responder executes each
 * once (a send takes one receive, a fetch-and-add adds once) and answers
 * the copy with what it answered first */
TEST_F(tnic, duplicate_requests_executed_once)
{
    uint64_t *target = (uint64_t*)(b.buf.data() + 8192);
    uint64_t *result = (uint64_t*)(a.buf.data() + 8192);
    struct ibv_wc wc;
    int i;

    connect();
    ASSERT_EQ(0, fault_set("dup"));
    *target = 40;
    for (i = 0; i < 3; ++i) {
        ASSERT_EQ(0, post_recv(b, 10 + i, b.buf.data() + 64 * i, 64));
    }
    ASSERT_EQ(0, post(a, IBV_WR_SEND, 1, a.buf.data(), 16, a.mr->lkey, 0,
                      0));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    ASSERT_EQ(0, post(a, IBV_WR_ATOMIC_FETCH_AND_ADD, 2, result, 8,
                      a.mr->lkey, raddr(b, 8192), b.mr->rkey,
                      IBV_SEND_SIGNALED, 2));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(40u, *result);
    EXPECT_EQ(42u, *target) << "the atomic executed twice";
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_READ, 3, a.buf.data() + 100, 8,
                      a.mr->lkey, raddr(b, 8192), b.mr->rkey));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(42u, *(uint64_t*)(a.buf.data() + 100));
    fault_clear();

    ASSERT_TRUE(wait_wc(b, &wc));
    EXPECT_EQ(10u, wc.wr_id);
    usleep(50000);
    EXPECT_EQ(0, ibv_poll_cq(b.cq, 1, &wc)) << "a receive taken twice";
    EXPECT_EQ(0, ibv_poll_cq(a.cq, 1, &wc)) << "a completion twice";
}

TEST_F(tnic, bad_rkey_rem_access_and_flush)
{
    struct ibv_wc wc;

    connect();
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 1, a.buf.data(), 64,
                      a.mr->lkey, raddr(b), b.mr->rkey ^ 0x5a5a0000));
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 2, a.buf.data(), 64,
                      a.mr->lkey, raddr(b), b.mr->rkey, 0));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, wc.status);
    EXPECT_EQ(1u, wc.wr_id);
    /* the QP is in error: what follows flushes, even unsignaled */
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status);
    EXPECT_EQ(2u, wc.wr_id);
    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr init;
    ASSERT_EQ(0, ibv_query_qp(a.qp, &attr, IBV_QP_STATE, &init));
    EXPECT_EQ(IBV_QPS_ERR, attr.qp_state);
    ASSERT_EQ(0, ibv_query_qp(b.qp, &attr, IBV_QP_STATE, &init));
    EXPECT_EQ(IBV_QPS_ERR, attr.qp_state);
    /* posting to a QP in error flushes */
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 3, a.buf.data(), 64,
                      a.mr->lkey, raddr(b), b.mr->rkey));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status);
}

TEST_F(tnic, remote_bounds_violation)
{
    struct ibv_wc wc;

    connect();
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 1, a.buf.data(), 64,
                      a.mr->lkey, raddr(b, BUF - 32), b.mr->rkey));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, wc.status);
    EXPECT_EQ(0, b.buf[BUF - 32]);
}

TEST_F(tnic, missing_remote_write_access)
{
    struct ibv_wc wc;
    std::vector<uint8_t> ro(4096, 0);
    struct ibv_mr *mr = ibv_reg_mr(b.pd, ro.data(), ro.size(),
                                   IBV_ACCESS_REMOTE_READ);

    ASSERT_NE(nullptr, mr);
    int access = 0;
    auto mr_access = tnic_sym<int (*)(uint32_t, int*)>("tnic_test_mr_access");
    ASSERT_EQ(0, mr_access(mr->rkey, &access));
    EXPECT_EQ(IBV_ACCESS_REMOTE_READ, access);
    connect();
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 1, a.buf.data(), 64,
                      a.mr->lkey, (uintptr_t)ro.data(), mr->rkey));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, wc.status);
    EXPECT_EQ(0, ro[0]);
    ibv_dereg_mr(mr);
}

TEST_F(tnic, local_key_checked)
{
    struct ibv_wc wc;

    connect();
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 1, a.buf.data(), 64,
                      a.mr->lkey + 1, raddr(b), b.mr->rkey));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_LOC_PROT_ERR, wc.status);
}

TEST_F(tnic, rnr_retry_exceeded_and_rnr_forever)
{
    struct ibv_wc wc;

    connect(1);
    ASSERT_EQ(0, post(a, IBV_WR_SEND, 1, a.buf.data(), 64, a.mr->lkey, 0,
                      0));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_RNR_RETRY_EXC_ERR, wc.status);

    /* rnr_retry 7: retried until a receive is posted */
    close_node(a);
    close_node(b);
    open_node(a, devs[0]);
    open_node(b, devs[1]);
    connect(7);
    ASSERT_EQ(0, post(a, IBV_WR_SEND, 2, a.buf.data(), 64, a.mr->lkey, 0,
                      0));
    double end = now_s() + 0.05;
    while (now_s() < end) {
        EXPECT_EQ(0, ibv_poll_cq(a.cq, 1, &wc));
    }
    ASSERT_EQ(0, post_recv(b, 5, b.buf.data(), 64));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    ASSERT_TRUE(wait_wc(b, &wc));
    EXPECT_EQ(5u, wc.wr_id);
}

TEST_F(tnic, send_longer_than_receive)
{
    struct ibv_wc wc;

    connect();
    ASSERT_EQ(0, post_recv(b, 5, b.buf.data(), 32));
    ASSERT_EQ(0, post(a, IBV_WR_SEND, 1, a.buf.data(), 64, a.mr->lkey, 0,
                      0));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_REM_INV_REQ_ERR, wc.status);
    ASSERT_TRUE(wait_wc(b, &wc));
    EXPECT_EQ(IBV_WC_LOC_LEN_ERR, wc.status);
}

TEST_F(tnic, cq_overrun_event)
{
    struct ibv_async_event ev;
    struct ibv_wc wc;
    int i;

    close_node(a);
    open_node(a, devs[0], 4);
    connect();
    for (i = 0; i < 8; ++i) {
        ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, i, a.buf.data(), 8,
                          a.mr->lkey, raddr(b), b.mr->rkey));
    }
    struct pollfd pfd = {a.ctx->async_fd, POLLIN, 0};
    double end        = now_s() + 5;
    /* keep the CQ full: poll b's only, which serves the device */
    while ((poll(&pfd, 1, 0) == 0) && (now_s() < end)) {
        ibv_poll_cq(b.cq, 1, &wc);
    }
    ASSERT_EQ(1, poll(&pfd, 1, 0)) << "no async event";
    ASSERT_EQ(0, ibv_get_async_event(a.ctx, &ev));
    EXPECT_EQ(IBV_EVENT_CQ_ERR, ev.event_type);
    EXPECT_EQ(a.cq, ev.element.cq);
    ibv_ack_async_event(&ev);
}

TEST_F(tnic, reg_budget_enomem)
{
    tnic_test_counters_t c;
    std::vector<uint8_t> big(1 << 20);

    counters(&c);
    ASSERT_EQ(0, fault_set(("reg_fail:budget=" +
                            std::to_string(c.reg_bytes + 4096)).c_str()));
    errno = 0;
    EXPECT_EQ(nullptr, ibv_reg_mr(a.pd, big.data(), big.size(),
                                  IBV_ACCESS_LOCAL_WRITE));
    EXPECT_EQ(ENOMEM, errno);
    struct ibv_mr *mr = ibv_reg_mr(a.pd, big.data(), 4096,
                                   IBV_ACCESS_LOCAL_WRITE);
    EXPECT_NE(nullptr, mr);
    ibv_dereg_mr(mr);
    ASSERT_EQ(0, fault_set("reg_fail:errno=EFAULT"));
    errno = 0;
    EXPECT_EQ(nullptr, ibv_reg_mr(a.pd, big.data(), 64,
                                  IBV_ACCESS_LOCAL_WRITE));
    EXPECT_EQ(EFAULT, errno);
    EXPECT_EQ(EINVAL, fault_set("no_such_fault"));
}

TEST_F(tnic, qp_transitions_checked)
{
    struct ibv_qp_attr attr = {};
    struct ibv_wc wc;

    /* RESET -> RTR is not a transition */
    attr.qp_state = IBV_QPS_RTR;
    EXPECT_EQ(EINVAL, ibv_modify_qp(a.qp, &attr, IBV_QP_STATE));
    /* RESET -> INIT without its required attributes */
    attr.qp_state = IBV_QPS_INIT;
    EXPECT_EQ(EINVAL, ibv_modify_qp(a.qp, &attr, IBV_QP_STATE));
    attr.port_num = 1;
    ASSERT_EQ(0, ibv_modify_qp(a.qp, &attr, IBV_QP_STATE | IBV_QP_PORT |
                               IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS));
    /* posting a send in INIT */
    EXPECT_EQ(EINVAL, post(a, IBV_WR_RDMA_WRITE, 1, a.buf.data(), 8,
                           a.mr->lkey, raddr(b), b.mr->rkey));
    (void)wc;
}

TEST_F(tnic, wc_error_fault)
{
    struct ibv_wc wc;

    connect();
    ASSERT_EQ(0, fault_set("wc_error:after=1:status=retry_exceeded"));
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 1, a.buf.data(), 8, a.mr->lkey,
                      raddr(b), b.mr->rkey));
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 2, a.buf.data(), 8, a.mr->lkey,
                      raddr(b), b.mr->rkey));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_RETRY_EXC_ERR, wc.status);
    EXPECT_EQ(2u, wc.wr_id);
}

TEST_F(tnic, completion_channel_fd_readable)
{
    struct ibv_comp_channel *ch = ibv_create_comp_channel(b.ctx);
    struct ibv_cq *cq, *ev_cq;
    void *ev_ctx;
    struct ibv_wc wc;

    ASSERT_NE(nullptr, ch);
    cq = ibv_create_cq(b.ctx, 16, (void*)0x42, ch, 0);
    ASSERT_NE(nullptr, cq);
    /* b's QP receives on the channel's CQ */
    ibv_destroy_qp(b.qp);
    struct ibv_qp_init_attr init = {};
    init.send_cq = b.cq; init.recv_cq = cq; init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = init.cap.max_recv_wr = 4;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    b.qp = ibv_create_qp(b.pd, &init);
    ASSERT_NE(nullptr, b.qp);
    connect();
    ASSERT_EQ(0, ibv_req_notify_cq(cq, 0));
    ASSERT_EQ(0, post_recv(b, 9, b.buf.data(), 64));
    struct pollfd pfd = {ch->fd, POLLIN, 0};
    EXPECT_EQ(0, poll(&pfd, 1, 0));
    ASSERT_EQ(0, post(a, IBV_WR_SEND, 1, a.buf.data(), 8, a.mr->lkey, 0, 0));
    ASSERT_TRUE(wait_wc(a, &wc));
    ASSERT_EQ(1, poll(&pfd, 1, 5000));
    ASSERT_EQ(0, ibv_get_cq_event(ch, &ev_cq, &ev_ctx));
    EXPECT_EQ(cq, ev_cq);
    EXPECT_EQ((void*)0x42, ev_ctx);
    ibv_ack_cq_events(cq, 1);
    EXPECT_EQ(1, ibv_poll_cq(cq, 1, &wc));
    /* not re-armed: no second event */
    ASSERT_EQ(0, post_recv(b, 10, b.buf.data(), 64));
    ASSERT_EQ(0, post(a, IBV_WR_SEND, 2, a.buf.data(), 8, a.mr->lkey, 0, 0));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(0, poll(&pfd, 1, 100));
    ibv_destroy_qp(b.qp);
    b.qp = nullptr;
    while (ibv_poll_cq(cq, 1, &wc) > 0) {
    }
    ibv_destroy_cq(cq);
    ibv_destroy_comp_channel(ch);
}

TEST_F(tnic, peer_killed_retry_exceeded_within_bound)
{
    int to_child[2], to_parent[2];
    uint32_t qpn, info[2];
    uint64_t addr_key[2];
    struct ibv_wc wc;

    ASSERT_EQ(0, pipe(to_child));
    ASSERT_EQ(0, pipe(to_parent));
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        /* the child's own device, QP and memory: the target */
        node c;
        open_child_node(c);
        if (read(to_child[0], &qpn, sizeof(qpn)) != sizeof(qpn)) _exit(1);
        to_rts(c.qp, qpn, 1);
        info[0]     = c.qp->qp_num;
        info[1]     = c.mr->rkey;
        addr_key[0] = (uintptr_t)c.buf.data();
        if (write(to_parent[1], info, sizeof(info)) < 0) _exit(1);
        if (write(to_parent[1], addr_key, 8) < 0) _exit(1);
        pause();
        _exit(0);
    }
    ASSERT_EQ((ssize_t)sizeof(uint32_t),
              write(to_child[1], &a.qp->qp_num, sizeof(uint32_t)));
    ASSERT_EQ((ssize_t)sizeof(info), read(to_parent[0], info, sizeof(info)));
    ASSERT_EQ(8, read(to_parent[0], addr_key, 8));
    /* timeout 10: 4.2 ms per try, retry_cnt 3: 4 tries */
    ASSERT_EQ(0, to_rts(a.qp, info[0], 2, 7, 10, 3));
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 1, a.buf.data(), 64,
                      a.mr->lkey, addr_key[0], info[1]));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);

    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    double start = now_s();
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 2, a.buf.data(), 64,
                      a.mr->lkey, addr_key[0], info[1]));
    ASSERT_TRUE(wait_wc(a, &wc, 10));
    double elapsed = now_s() - start;
    EXPECT_EQ(IBV_WC_RETRY_EXC_ERR, wc.status);
    /* the bound: 4 tries of 4.2 ms, and the device's timer granularity */
    EXPECT_LT(elapsed, 1.0);
    EXPECT_GE(elapsed, 0.015);
    close(to_child[0]); close(to_child[1]);
    close(to_parent[0]); close(to_parent[1]);
}

/* A process killed between claiming a cell of this process's inbox and
 * filling it (a SIGKILL mid-send) must not wedge the inbox: what comes
 * after still arrives, as on a wire a dead sender loses only its own */
TEST_F(tnic, writer_killed_mid_cell_does_not_wedge_inbox)
{
    int to_parent[2], ret = -1;
    struct ibv_wc wc;

    connect();
    ASSERT_EQ(0, pipe(to_parent));
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        node c;
        open_child_node(c);
        ret = tnic_sym<int (*)(uint32_t)>("tnic_test_inbox_abandon_cell")(
                  a.qp->qp_num);
        if (write(to_parent[1], &ret, sizeof(ret)) < 0) _exit(1);
        raise(SIGKILL);
    }
    ASSERT_EQ((ssize_t)sizeof(ret), read(to_parent[0], &ret, sizeof(ret)));
    waitpid(pid, nullptr, 0);
    close(to_parent[0]);
    close(to_parent[1]);
    ASSERT_EQ(0, ret) << "tnic_test_inbox_abandon_cell: " << strerror(ret);

    memset(a.buf.data(), 0x5a, 4096);
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 1, a.buf.data(), 4096,
                      a.mr->lkey, (uintptr_t)b.buf.data(), b.mr->rkey));
    ASSERT_TRUE(wait_wc(a, &wc, 10)) << "no completion in 10 s: the inbox "
                                        "is wedged behind the dead cell";
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(0, memcmp(a.buf.data(), b.buf.data(), 4096));
}

TEST_F(tnic, counters_follow_objects)
{
    tnic_test_counters_t c0, c1;

    counters(&c0);
    EXPECT_GE(c0.qps, 2);
    EXPECT_GE(c0.mrs, 2);
    struct ibv_qp *qp = create_qp(a, 4);
    counters(&c1);
    EXPECT_EQ(c0.qps + 1, c1.qps);
    ibv_destroy_qp(qp);
    counters(&c1);
    EXPECT_EQ(c0.qps, c1.qps);
    EXPECT_EQ(c0.reg_bytes, c1.reg_bytes);
}

TEST_F(tnic, ud_send_grh_space_and_qkey)
{
    struct ibv_qp_init_attr init = {};
    struct ibv_qp *ua, *ub;
    struct ibv_qp_attr attr = {};
    struct ibv_wc wc;

    init.send_cq = a.cq; init.recv_cq = a.cq; init.qp_type = IBV_QPT_UD;
    init.cap.max_send_wr = init.cap.max_recv_wr = 8;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    ua = ibv_create_qp(a.pd, &init);
    init.send_cq = b.cq; init.recv_cq = b.cq;
    ub = ibv_create_qp(b.pd, &init);
    ASSERT_TRUE(ua && ub);
    for (struct ibv_qp *qp : {ua, ub}) {
        attr = {};
        attr.qp_state = IBV_QPS_INIT; attr.port_num = 1; attr.qkey = 0x1ee7;
        ASSERT_EQ(0, ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PORT |
                                   IBV_QP_PKEY_INDEX | IBV_QP_QKEY));
        attr.qp_state = IBV_QPS_RTR;
        ASSERT_EQ(0, ibv_modify_qp(qp, &attr, IBV_QP_STATE));
        attr.qp_state = IBV_QPS_RTS;
        ASSERT_EQ(0, ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN));
    }
    struct ibv_ah_attr ah_attr = {};
    ah_attr.dlid = b.lid; ah_attr.port_num = 1;
    struct ibv_ah *ah = ibv_create_ah(a.pd, &ah_attr);
    ASSERT_NE(nullptr, ah);

    struct ibv_sge rsge = {(uintptr_t)b.buf.data(), 40 + 100, b.mr->lkey};
    struct ibv_recv_wr rwr = {}, *rbad;
    rwr.wr_id = 11; rwr.sg_list = &rsge; rwr.num_sge = 1;
    ASSERT_EQ(0, ibv_post_recv(ub, &rwr, &rbad));

    memset(a.buf.data(), 0xab, 100);
    struct ibv_sge sge = {(uintptr_t)a.buf.data(), 100, a.mr->lkey};
    struct ibv_send_wr wr = {}, *bad;
    wr.wr_id = 12; wr.sg_list = &sge; wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND; wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah; wr.wr.ud.remote_qpn = ub->qp_num;
    wr.wr.ud.remote_qkey = 0x1ee7;
    ASSERT_EQ(0, ibv_post_send(ua, &wr, &bad));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    ASSERT_TRUE(wait_wc(b, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(11u, wc.wr_id);
    EXPECT_EQ(140u, wc.byte_len);
    EXPECT_EQ(ua->qp_num, wc.src_qp);
    EXPECT_EQ(a.lid, wc.slid);
    EXPECT_EQ(0xab, b.buf[40]);
    EXPECT_EQ(0xab, b.buf[139]);

    /* a wrong qkey is dropped: the receive stays posted */
    ASSERT_EQ(0, ibv_post_recv(ub, &rwr, &rbad));
    wr.wr.ud.remote_qkey = 0x1ee8;
    ASSERT_EQ(0, ibv_post_send(ua, &wr, &bad));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_FALSE(wait_wc(b, &wc, 0.1));

    ibv_destroy_ah(ah);
    ibv_destroy_qp(ua);
    ibv_destroy_qp(ub);
    while (ibv_poll_cq(b.cq, 1, &wc) > 0) {
    }
}

TEST_F(tnic, srq_write_imm_multi_sge_solicited)
{
    struct ibv_srq_init_attr sattr = {};
    struct ibv_comp_channel *ch = ibv_create_comp_channel(b.ctx);
    struct ibv_cq *cq;
    struct ibv_wc wc;

    sattr.attr.max_wr = 8; sattr.attr.max_sge = 2;
    struct ibv_srq *srq = ibv_create_srq(b.pd, &sattr);
    ASSERT_NE(nullptr, srq);
    cq = ibv_create_cq(b.ctx, 16, nullptr, ch, 0);
    ibv_destroy_qp(b.qp);
    struct ibv_qp_init_attr init = {};
    init.send_cq = b.cq; init.recv_cq = cq; init.srq = srq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 4; init.cap.max_send_sge = 1;
    b.qp = ibv_create_qp(b.pd, &init);
    ASSERT_NE(nullptr, b.qp);
    connect();

    /* a receive of two SGEs takes a send of two SGEs */
    struct ibv_sge rsge[2] = {{(uintptr_t)b.buf.data(), 10, b.mr->lkey},
                              {(uintptr_t)b.buf.data() + 100, 10,
                               b.mr->lkey}};
    struct ibv_recv_wr rwr = {}, *rbad;
    rwr.wr_id = 21; rwr.sg_list = rsge; rwr.num_sge = 2;
    ASSERT_EQ(0, ibv_post_srq_recv(srq, &rwr, &rbad));
    ASSERT_EQ(0, ibv_post_srq_recv(srq, &rwr, &rbad));
    memcpy(a.buf.data(), "0123456789", 10);
    memcpy(a.buf.data() + 200, "abcdefghij", 10);
    struct ibv_sge sge[2] = {{(uintptr_t)a.buf.data(), 10, a.mr->lkey},
                             {(uintptr_t)a.buf.data() + 200, 10,
                              a.mr->lkey}};
    struct ibv_send_wr wr = {}, *bad;
    wr.wr_id = 22; wr.sg_list = sge; wr.num_sge = 2;
    wr.opcode = IBV_WR_SEND; wr.send_flags = IBV_SEND_SIGNALED;
    /* solicited-only arming ignores an unsolicited send */
    ASSERT_EQ(0, ibv_req_notify_cq(cq, 1));
    ASSERT_EQ(0, ibv_post_send(a.qp, &wr, &bad));
    ASSERT_TRUE(wait_wc(a, &wc));
    struct pollfd pfd = {ch->fd, POLLIN, 0};
    EXPECT_EQ(0, poll(&pfd, 1, 50));
    ASSERT_EQ(1, ibv_poll_cq(cq, 1, &wc));
    EXPECT_EQ(20u, wc.byte_len);
    EXPECT_EQ(0, memcmp(b.buf.data(), "0123456789", 10));
    EXPECT_EQ(0, memcmp(b.buf.data() + 100, "abcdefghij", 10));

    /* write with immediate: data at the rkey, the immediate in a receive,
     * solicited: the channel fires */
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM; wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
    wr.imm_data = htobe32(99);
    wr.wr.rdma.remote_addr = raddr(b, 3000); wr.wr.rdma.rkey = b.mr->rkey;
    ASSERT_EQ(0, ibv_post_send(a.qp, &wr, &bad));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    ASSERT_EQ(1, poll(&pfd, 1, 5000));
    ASSERT_EQ(1, ibv_poll_cq(cq, 1, &wc));
    EXPECT_EQ(IBV_WC_RECV_RDMA_WITH_IMM, wc.opcode);
    EXPECT_EQ(htobe32(99), wc.imm_data);
    EXPECT_EQ(10u, wc.byte_len);
    EXPECT_EQ(0, memcmp(b.buf.data() + 3000, "0123456789", 10));

    struct ibv_cq *ev_cq;
    void *ev_ctx;
    ASSERT_EQ(0, ibv_get_cq_event(ch, &ev_cq, &ev_ctx));
    ibv_ack_cq_events(ev_cq, 1);
    ibv_destroy_qp(b.qp);
    b.qp = nullptr;
    ibv_destroy_srq(srq);
    ibv_destroy_cq(cq);
    ibv_destroy_comp_channel(ch);
}

TEST_F(tnic, qp_error_fault_fatal_event_and_delay)
{
    struct ibv_async_event ev;
    struct ibv_wc wc;

    connect();
    ASSERT_EQ(0, fault_set("delay:us=20000"));
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 1, a.buf.data(), 8, a.mr->lkey,
                      raddr(b), b.mr->rkey));
    double start = now_s();
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_GE(now_s() - start, 0.015);
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);

    ASSERT_EQ(0, fault_set("none,qp_error:after=0"));
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 2, a.buf.data(), 8, a.mr->lkey,
                      raddr(b), b.mr->rkey, 0));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status);
    struct pollfd pfd = {a.ctx->async_fd, POLLIN, 0};
    ASSERT_EQ(1, poll(&pfd, 1, 1000)) << "no async event";
    ASSERT_EQ(0, ibv_get_async_event(a.ctx, &ev));
    EXPECT_EQ(IBV_EVENT_QP_FATAL, ev.event_type);
    EXPECT_EQ(a.qp, ev.element.qp);
    ibv_ack_async_event(&ev);
}

/* A request to a QP destroyed in a live process reaches no QP: the fabric
 * is silent, and the requester's transport timer ends it after retry_cnt
 * retries, as a NIC's does */
TEST_F(tnic, destroyed_remote_qp_retry_exceeded_within_bound)
{
    struct ibv_wc wc;

    ASSERT_EQ(0, to_rts(a.qp, b.qp->qp_num, b.lid, 7, 12, 2));
    ASSERT_EQ(0, to_rts(b.qp, a.qp->qp_num, a.lid, 7, 12, 2));
    ASSERT_EQ(0, ibv_destroy_qp(b.qp));
    b.qp = nullptr;
    double t0 = now_s();
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 9, a.buf.data(), 64, a.mr->lkey,
                      raddr(b), b.mr->rkey));
    ASSERT_TRUE(wait_wc(a, &wc, 10)) << "no completion: the request hangs";
    double took = now_s() - t0;
    EXPECT_EQ(IBV_WC_RETRY_EXC_ERR, wc.status);
    /* 3 tries of 4.096 us * 2^12 = 16.8 ms each */
    EXPECT_GT(took, 0.045);
    EXPECT_LT(took, 5.0);
}

} // namespace
