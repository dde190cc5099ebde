/*
 * The stand-in NIC's test fixture: two devices of the stand-in in one
 * process, each with a PD, a CQ, an RC QP and a registered host buffer;
 * skips (and says why) when another libibverbs is loaded.
 *
 * See file LICENSE for terms.
 */

#ifndef TNIC_FIXTURE_H_
#define TNIC_FIXTURE_H_

#include "tnic_test.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <vector>


template <typename F> inline F tnic_sym(const char *name)
{
    return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

inline double now_s()
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const size_t BUF = 64 * 1024;

struct node {
    struct ibv_context *ctx = nullptr;
    struct ibv_pd      *pd  = nullptr;
    struct ibv_cq      *cq  = nullptr;
    struct ibv_qp      *qp  = nullptr;
    struct ibv_mr      *mr  = nullptr;
    std::vector<uint8_t> buf;
    uint16_t           lid  = 0;
};

class tnic : public testing::Test {
protected:
    void SetUp() override
    {
        if (tnic_sym<int (*)()>("tnic_test_present") == nullptr) {
            GTEST_SKIP() << "the stand-in NIC is not loaded (run with "
                            "LD_LIBRARY_PATH=<build>/test/tnic/lib)";
        }
        printf("STAND-IN NIC: %s\n",
               tnic_sym<const char *(*)()>("tnic_test_marker")());
        fault_set   = tnic_sym<int (*)(const char*)>("tnic_test_fault_set");
        fault_clear = tnic_sym<void (*)()>("tnic_test_fault_clear");
        counters    = tnic_sym<void (*)(tnic_test_counters_t*)>(
                          "tnic_test_counters");
        fault_clear();
        int num = 0;
        devs    = ibv_get_device_list(&num);
        ASSERT_GE(num, 2);
        open_node(a, devs[0]);
        open_node(b, devs[1]);
    }

    void TearDown() override
    {
        if (devs == nullptr) {
            return;
        }
        close_node(a);
        close_node(b);
        ibv_free_device_list(devs);
        fault_clear();
    }

    void open_node(node &n, struct ibv_device *dev, int cqe = 256,
                   int access = IBV_ACCESS_LOCAL_WRITE |
                                IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ |
                                IBV_ACCESS_REMOTE_ATOMIC)
    {
        struct ibv_port_attr pattr;

        n.ctx = ibv_open_device(dev);
        ASSERT_NE(nullptr, n.ctx);
        ASSERT_EQ(0, ibv_query_port(n.ctx, 1, &pattr));
        n.lid = pattr.lid;
        n.pd  = ibv_alloc_pd(n.ctx);
        ASSERT_NE(nullptr, n.pd);
        n.cq  = ibv_create_cq(n.ctx, cqe, nullptr, nullptr, 0);
        ASSERT_NE(nullptr, n.cq);
        n.buf.assign(BUF, 0);
        n.mr = ibv_reg_mr(n.pd, n.buf.data(), BUF, access);
        ASSERT_NE(nullptr, n.mr);
        n.qp = create_qp(n, 16);
    }

    struct ibv_qp *create_qp(node &n, unsigned wr)
    {
        struct ibv_qp_init_attr init = {};

        init.send_cq          = n.cq;
        init.recv_cq          = n.cq;
        init.qp_type          = IBV_QPT_RC;
        init.cap.max_send_wr  = wr;
        init.cap.max_recv_wr  = wr;
        init.cap.max_send_sge = 4;
        init.cap.max_recv_sge = 4;
        init.cap.max_inline_data = 64;
        struct ibv_qp *qp = ibv_create_qp(n.pd, &init);
        EXPECT_NE(nullptr, qp);
        return qp;
    }

    /* In a forked child: a device of its own (the parent's are not the
     * child's), so it joins the fabric with a slot of its own */
    void open_child_node(node &c)
    {
        int ndev;
        struct ibv_device **list = ibv_get_device_list(&ndev);

        open_node(c, list[1]);
    }

    void close_node(node &n)
    {
        if (n.qp)  ibv_destroy_qp(n.qp);
        if (n.mr)  ibv_dereg_mr(n.mr);
        if (n.cq)  ibv_destroy_cq(n.cq);
        if (n.pd)  ibv_dealloc_pd(n.pd);
        if (n.ctx) ibv_close_device(n.ctx);
        n = node();
    }

    static int to_rts(struct ibv_qp *qp, uint32_t dest_qpn, uint16_t dlid,
                      int rnr_retry = 7, int timeout = 14, int retry_cnt = 7)
    {
        struct ibv_qp_attr attr = {};
        int ret;

        attr.qp_state        = IBV_QPS_INIT;
        attr.port_num        = 1;
        attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
                               IBV_ACCESS_REMOTE_READ |
                               IBV_ACCESS_REMOTE_ATOMIC;
        ret = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                            IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        if (ret) return ret;
        memset(&attr, 0, sizeof(attr));
        attr.qp_state           = IBV_QPS_RTR;
        attr.path_mtu           = IBV_MTU_4096;
        attr.dest_qp_num        = dest_qpn;
        attr.max_dest_rd_atomic = 4;
        attr.min_rnr_timer      = 1;
        attr.ah_attr.dlid       = dlid;
        attr.ah_attr.port_num   = 1;
        ret = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV |
                            IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                            IBV_QP_MIN_RNR_TIMER);
        if (ret) return ret;
        memset(&attr, 0, sizeof(attr));
        attr.qp_state      = IBV_QPS_RTS;
        attr.timeout       = timeout;
        attr.retry_cnt     = retry_cnt;
        attr.rnr_retry     = rnr_retry;
        attr.max_rd_atomic = 4;
        return ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN |
                             IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                             IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
    }

    void connect(int rnr_retry = 7)
    {
        ASSERT_EQ(0, to_rts(a.qp, b.qp->qp_num, b.lid, rnr_retry));
        ASSERT_EQ(0, to_rts(b.qp, a.qp->qp_num, a.lid, rnr_retry));
    }

    int post(node &n, enum ibv_wr_opcode op, uint64_t wr_id, void *laddr,
             size_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
             int flags = IBV_SEND_SIGNALED, uint64_t cmp_add = 0,
             uint64_t swap = 0)
    {
        struct ibv_sge sge = {(uintptr_t)laddr, (uint32_t)len, lkey};
        struct ibv_send_wr wr = {}, *bad;

        wr.wr_id      = wr_id;
        wr.sg_list    = &sge;
        wr.num_sge    = 1;
        wr.opcode     = op;
        wr.send_flags = flags;
        if ((op == IBV_WR_ATOMIC_FETCH_AND_ADD) ||
            (op == IBV_WR_ATOMIC_CMP_AND_SWP)) {
            wr.wr.atomic.remote_addr = raddr;
            wr.wr.atomic.rkey        = rkey;
            wr.wr.atomic.compare_add = cmp_add;
            wr.wr.atomic.swap        = swap;
        } else {
            wr.wr.rdma.remote_addr = raddr;
            wr.wr.rdma.rkey        = rkey;
        }
        return ibv_post_send(n.qp, &wr, &bad);
    }

    int post_recv(node &n, uint64_t wr_id, void *addr, size_t len)
    {
        struct ibv_sge sge = {(uintptr_t)addr, (uint32_t)len, n.mr->lkey};
        struct ibv_recv_wr wr = {}, *bad;

        wr.wr_id   = wr_id;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        return ibv_post_recv(n.qp, &wr, &bad);
    }

    /* the next completion of a CQ, polling both nodes' CQs meanwhile */
    bool wait_wc(node &n, struct ibv_wc *wc, double timeout_s = 10)
    {
        double deadline = now_s() + timeout_s;
        struct ibv_wc dummy;

        while (now_s() < deadline) {
            if (ibv_poll_cq(n.cq, 1, wc) == 1) {
                return true;
            }
            (void)dummy;
        }
        return false;
    }

    uint64_t raddr(node &n, size_t off = 0)
    {
        return (uintptr_t)n.buf.data() + off;
    }

    struct ibv_device **devs = nullptr;
    node a, b;
    int (*fault_set)(const char*)              = nullptr;
    void (*fault_clear)()                      = nullptr;
    void (*counters)(tnic_test_counters_t*)    = nullptr;
};

#endif
