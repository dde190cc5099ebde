/*
 * A UCP rendezvous repeated on the same buffers registers them with the NIC
 * once: UCP registers a rendezvous buffer, transfers, and deregisters, and
 * the registration cache keeps what nobody holds any more for the next
 * message instead of paying an ibv_reg_mr per message.
 *
 * The NIC registrations are counted where they happen: this program exports
 * ibv_reg_mr and ibv_reg_mr_iova2 (uct_ibv_reg.dynlist), so the module,
 * loaded after it, binds to these, which count and hand on to libibverbs'.
 *
 * See file LICENSE for terms.
 */

#include "uct_rc_gdr_test.h"
#include "ucp_pair.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <infiniband/verbs.h>
#include <string.h>

#include <map>
#include <memory>
#include <string>
#include <vector>


/* Registrations made in this process, by any library: device and range */
struct ibv_reg_record {
    std::string device;
    uintptr_t   start, end;
};
static std::vector<ibv_reg_record> ibv_regs;

static void ibv_reg_note(struct ibv_pd *pd, void *addr, size_t length)
{
    ibv_regs.push_back({ibv_get_device_name(pd->context->device),
                        (uintptr_t)addr, (uintptr_t)addr + length});
}

/* Registrations since the first 'from' that cover part of [buf, +length),
 * per device */
static std::map<std::string, int>
ibv_regs_of(size_t from, const void *buf, size_t length)
{
    std::map<std::string, int> count;
    uintptr_t start = (uintptr_t)buf, end = start + length;

    for (size_t i = from; i < ibv_regs.size(); ++i) {
        if ((ibv_regs[i].start < end) && (start < ibv_regs[i].end)) {
            ++count[ibv_regs[i].device];
        }
    }
    return count;
}

static std::string ibv_regs_str(const std::map<std::string, int> &count)
{
    std::string s;

    for (const auto &dev : count) {
        s += (s.empty() ? "" : ", ") + dev.first + " " +
             std::to_string(dev.second);
    }
    return s.empty() ? "none" : s;
}

template <typename F> static F ibv_next(const char *name)
{
    void *func = dlsym(RTLD_NEXT, name);

    if (func == NULL) {
        uct_test_die(name, UCS_ERR_NO_ELEM);
    }
    return (F)func;
}

/* verbs.h makes ibv_reg_mr a macro: the parentheses name the function */
extern "C" struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr,
                                       size_t length, int access)
{
    typedef struct ibv_mr *(*func_t)(struct ibv_pd*, void*, size_t, int);
    static func_t next = ibv_next<func_t>("ibv_reg_mr");

    ibv_reg_note(pd, addr, length);
    return next(pd, addr, length, access);
}

extern "C" struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr,
                                           size_t length, uint64_t iova,
                                           unsigned int access)
{
    typedef struct ibv_mr *(*func_t)(struct ibv_pd*, void*, size_t, uint64_t,
                                     unsigned);
    static func_t next = ibv_next<func_t>("ibv_reg_mr_iova2");

    ibv_reg_note(pd, addr, length);
    return next(pd, addr, length, iova, access);
}


class ucp_rndv : public uct_rc_gdr_test {
protected:
    static const size_t LENGTH = 256 * 1024; /* over RNDV_THRESH below;
                                                whole pages */

    void SetUp() override;
    void TearDown() override;

    uct_rc_gdr_ucp_pair m_ucp;
};

void ucp_rndv::SetUp()
{
    uct_rc_gdr_test::SetUp();
    if (IsSkipped()) {
        return;
    }

    /* the data on rc_gdr, wire-up through ud_verbs; every message of
     * LENGTH a rendezvous */
    env_set("UCX_TLS", "rc_gdr,ud_verbs:aux,self");
    env_set("UCX_RNDV_THRESH", "16k");
}

void ucp_rndv::TearDown()
{
    m_ucp.close();
    uct_rc_gdr_test::TearDown();
}

/* N tag messages of LENGTH from the same send buffer into the same receive
 * buffer: two NIC registrations in all (one per buffer), not two per
 * message; and every message arrives whole */
TEST_F(ucp_rndv, repeated_on_same_buffers_registers_once)
{
    static const int N = 10;
    /* Page-aligned, so that each buffer's registration (whole pages)
     * covers no byte of the other */
    std::unique_ptr<unsigned char, decltype(&free)>
            src((unsigned char*)aligned_alloc(4096, LENGTH), free),
            dst((unsigned char*)aligned_alloc(4096, LENGTH), free);
    ucp_request_param_t sparam, rparam;
    ucs_status_t status = UCS_OK, rstatus = UCS_OK;
    std::map<std::string, int> src_regs, dst_regs;
    bool once = true;
    size_t before;
    const char *what    = "";
    int i, intact = 0;
    void *rreq;

    /* no callbacks: m_ucp.wait() polls the requests */
    sparam.op_attr_mask = 0;
    rparam.op_attr_mask = 0;

    ASSERT_TRUE((src != nullptr) && (dst != nullptr));
    status = m_ucp.open(UCP_FEATURE_TAG, &what);
    ASSERT_EQ(UCS_OK, status) << what << ": " << ucs_status_string(status);

    before = ibv_regs.size();
    for (i = 0; (i < N) && (status == UCS_OK) && (rstatus == UCS_OK); ++i) {
        uct_test_fill(src.get(), LENGTH, i + 1);
        memset(dst.get(), 0, LENGTH);
        rreq    = ucp_tag_recv_nbx(m_ucp.workers[1], dst.get(), LENGTH, i,
                                   (ucp_tag_t)-1, &rparam);
        status  = m_ucp.wait(ucp_tag_send_nbx(m_ucp.eps[0], src.get(),
                                              LENGTH, i, &sparam));
        rstatus = m_ucp.wait(rreq);
        intact += (status == UCS_OK) && (rstatus == UCS_OK) &&
                  !memcmp(src.get(), dst.get(), LENGTH);
    }
    /* UCP registers each buffer on every device it may use */
    src_regs = ibv_regs_of(before, src.get(), LENGTH);
    dst_regs = ibv_regs_of(before, dst.get(), LENGTH);
    for (const auto &dev : src_regs) {
        once = once && (dev.second == 1);
    }
    for (const auto &dev : dst_regs) {
        once = once && (dev.second == 1);
    }

    UCT_TEST_EXPECT((status == UCS_OK) && (rstatus == UCS_OK) &&
                    (intact == N) && once && !src_regs.empty() &&
                    !dst_regs.empty(),
                    "%d rendezvous of %zu bytes on the same buffers: %d "
                    "intact; NIC registrations of the send buffer: %s, of "
                    "the receive buffer: %s (once per device expected); "
                    "send %s, receive %s", N, LENGTH, intact,
                    ibv_regs_str(src_regs).c_str(),
                    ibv_regs_str(dst_regs).c_str(),
                    ucs_status_string(status), ucs_status_string(rstatus));
}
