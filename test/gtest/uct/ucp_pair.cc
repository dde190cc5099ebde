/*
 * Two connected UCP workers of one process (ucp_pair.h).
 *
 * See file LICENSE for terms.
 */

#include "ucp_pair.h"
#include "uct_test_util.h"

#include <string.h>


static void uct_rc_gdr_ucp_pair_ep_error(void *arg, ucp_ep_h ep,
                                        ucs_status_t status)
{
    *(volatile ucs_status_t*)arg = status;
}

uct_rc_gdr_ucp_pair::~uct_rc_gdr_ucp_pair()
{
    close();
}

ucs_status_t uct_rc_gdr_ucp_pair::open(uint64_t features, const char **what_p,
                                       ucs_thread_mode_t thread_mode,
                                       ucp_err_handling_mode_t err_mode)
{
    ucp_worker_params_t wparams;
    ucp_ep_params_t ep_params;
    ucp_params_t params;
    ucp_config_t *config;
    ucs_status_t status;
    size_t addr_len;
    int i;

    m_err_mode = err_mode;
    status     = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK) {
        *what_p = "ucp_config_read";
        return status;
    }

    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = features;
    status            = ucp_init(&params, config, &context);
    ucp_config_release(config);
    if (status != UCS_OK) {
        *what_p = "ucp_init";
        return status;
    }

    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = thread_mode;
    for (i = 0; i < 2; ++i) {
        status = ucp_worker_create(context, &wparams, &workers[i]);
        if (status != UCS_OK) {
            *what_p = "ucp_worker_create";
            return status;
        }

        status = ucp_worker_get_address(workers[i], &m_addr[i], &addr_len);
        if (status != UCS_OK) {
            *what_p = "ucp_worker_get_address";
            return status;
        }
    }

    for (i = 0; i < 2; ++i) {
        memset(&ep_params, 0, sizeof(ep_params));
        ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep_params.address    = m_addr[1 - i];
        if (err_mode != UCP_ERR_HANDLING_MODE_NONE) {
            ep_params.field_mask     |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
            ep_params.err_mode        = err_mode;
            ep_params.err_handler.cb  = uct_rc_gdr_ucp_pair_ep_error;
            ep_params.err_handler.arg = (void*)&ep_error[i];
        }
        ep_error[i]          = UCS_OK;
        status               = ucp_ep_create(workers[i], &ep_params, &eps[i]);
        if (status != UCS_OK) {
            *what_p = "ucp_ep_create";
            return status;
        }
    }

    return UCS_OK;
}

ucs_status_t uct_rc_gdr_ucp_pair::mem_map(void *buf, size_t length,
                                          ucp_mem_h *memh_p)
{
    ucp_mem_map_params_t mparams;
    ucs_status_t status;

    memset(&mparams, 0, sizeof(mparams));
    mparams.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                         UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mparams.address    = buf;
    mparams.length     = length;
    status             = ucp_mem_map(context, &mparams, memh_p);
    if (status == UCS_OK) {
        m_mems.push_back(*memh_p);
    }
    return status;
}

ucs_status_t uct_rc_gdr_ucp_pair::rkey_unpack(ucp_mem_h memh,
                                              ucp_rkey_h *rkey_p)
{
    ucs_status_t status;
    size_t rkey_size;
    void *rkey_buf;

    status = ucp_rkey_pack(context, memh, &rkey_buf, &rkey_size);
    if (status != UCS_OK) {
        return status;
    }

    status = ucp_ep_rkey_unpack(eps[0], rkey_buf, rkey_p);
    ucp_rkey_buffer_release(rkey_buf);
    if (status == UCS_OK) {
        m_rkeys.push_back(*rkey_p);
    }
    return status;
}

ucs_status_t uct_rc_gdr_ucp_pair::wait(void *request, int worker)
{
    double deadline = uct_test_now() + uct_test_timeout_s;
    ucs_status_t status;

    if (request == NULL) {
        return UCS_OK;
    }

    if (UCS_PTR_IS_ERR(request)) {
        return UCS_PTR_STATUS(request);
    }

    while (((status = ucp_request_check_status(request)) == UCS_INPROGRESS) &&
           (uct_test_now() < deadline)) {
        for (int i = 0; i < 2; ++i) {
            if ((worker < 0) || (worker == i)) {
                ucp_worker_progress(workers[i]);
            }
        }
    }
    ucp_request_free(request);
    return (status == UCS_INPROGRESS) ? UCS_ERR_TIMED_OUT : status;
}

void uct_rc_gdr_ucp_pair::close()
{
    ucp_request_param_t rparam;
    int i;

    memset(&rparam, 0, sizeof(rparam));
    if (m_err_mode != UCP_ERR_HANDLING_MODE_NONE) {
        /* an endpoint may have failed, or its peer: nothing to flush to */
        rparam.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        rparam.flags        = UCP_EP_CLOSE_FLAG_FORCE;
    }
    for (ucp_rkey_h rkey : m_rkeys) {
        ucp_rkey_destroy(rkey);
    }
    m_rkeys.clear();

    for (i = 0; i < 2; ++i) {
        if (eps[i] != nullptr) {
            wait(ucp_ep_close_nbx(eps[i], &rparam));
            eps[i] = nullptr;
        }
    }

    for (ucp_mem_h memh : m_mems) {
        ucp_mem_unmap(context, memh);
    }
    m_mems.clear();

    for (i = 0; i < 2; ++i) {
        if (m_addr[i] != nullptr) {
            ucp_worker_release_address(workers[i], m_addr[i]);
            m_addr[i] = nullptr;
        }
        if (workers[i] != nullptr) {
            ucp_worker_destroy(workers[i]);
            workers[i] = nullptr;
        }
    }

    if (context != nullptr) {
        ucp_cleanup(context);
        context = nullptr;
    }
}
