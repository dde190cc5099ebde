/*
 * Two UCP workers of one process connected to each other, for the suites
 * that check what UCP does over rc_gdr: memory mapped in the context, remote
 * keys unpacked at worker 0's endpoint, and waits bounded by
 * uct_test_timeout_s. Everything set up is released in reverse by close()
 * (or the destructor), before the memory it mapped may go.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_RC_GDR_UCP_PAIR_H_
#define UCT_RC_GDR_UCP_PAIR_H_

#include <ucp/api/ucp.h>

#include <vector>


class uct_rc_gdr_ucp_pair {
public:
    ~uct_rc_gdr_ucp_pair();

    /* A context with features (UCX_TLS and the rest from the environment),
     * two workers of thread_mode, an endpoint each way with err_mode (an
     * endpoint's failure is recorded in ep_error[]); *what_p names a step
     * that failed */
    ucs_status_t open(uint64_t features, const char **what_p,
                      ucs_thread_mode_t thread_mode = UCS_THREAD_MODE_SINGLE,
                      ucp_err_handling_mode_t err_mode =
                              UCP_ERR_HANDLING_MODE_NONE);

    /* Maps [buf, +length) in the context */
    ucs_status_t mem_map(void *buf, size_t length, ucp_mem_h *memh_p);

    /* memh's key, unpacked at eps[0]: worker 0 reaches worker 1's memory */
    ucs_status_t rkey_unpack(ucp_mem_h memh, ucp_rkey_h *rkey_p);

    /* The status of request, both workers (or only workers[worker])
     * progressed until it completes */
    ucs_status_t wait(void *request, int worker = -1);

    void close();

    ucp_context_h context    = nullptr;
    ucp_worker_h  workers[2] = {nullptr, nullptr};
    ucp_ep_h      eps[2]     = {nullptr, nullptr};
    /* UCS_OK, or the status eps[i]'s error handler was called with */
    volatile ucs_status_t ep_error[2] = {UCS_OK, UCS_OK};

private:
    ucp_err_handling_mode_t m_err_mode = UCP_ERR_HANDLING_MODE_NONE;
    ucp_address_t           *m_addr[2] = {nullptr, nullptr};
    std::vector<ucp_mem_h>  m_mems;
    std::vector<ucp_rkey_h> m_rkeys;
};

#endif
