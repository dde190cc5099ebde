/*
 * rc_gdr glue for UCX 1.22: copies rc_gdr's capabilities and answers into
 * this release's structs, and lays out its tables.
 *
 * Beyond the 1.14 generation (rc_gdr_glue_v2.inl): iface_query_v2 heads
 * the internal ops, which also gained ep_get_device_ep and ep_put_sgl_zcopy;
 * mem_query takes uct_md_mem_attr_v2_t (memory flags), ep_invalidate a
 * parameter struct, the md ops mem_elem_pack; md attributes report
 * gva_mem_types and required_mem_flags; rkey_unpack takes parameters.
 */

#define UCT_RC_GDR_GLUE_MD_QUERY_MORE(_md_attr, _caps) \
    do { \
        (_md_attr)->gva_mem_types      = (_caps)->gva_mem_types; \
        (_md_attr)->required_mem_flags = 0; \
    } while (0)
#define UCT_RC_GDR_GLUE_ADDR_LENGTH_OK(_params, _why, _max) \
    uct_rc_gdr_glue_addr_length_ok(_params, _why, _max)

#include "rc_gdr_glue.h"

static int
uct_rc_gdr_glue_addr_length_ok(const uct_iface_is_reachable_params_t *params,
                               char *why, size_t max);

#include "rc_gdr_glue_v2.inl"
#include "rc_gdr_addr.h"
#include "rc_gdr_ep.h"


/* A device address of another length is another transport's. */
static int
uct_rc_gdr_glue_addr_length_ok(const uct_iface_is_reachable_params_t *params,
                               char *why, size_t max)
{
    if ((params->field_mask &
         UCT_IFACE_IS_REACHABLE_FIELD_DEVICE_ADDR_LENGTH) &&
        (params->device_addr_length != uct_rc_gdr_dev_addr_size())) {
        ucs_snprintf_zero(why, max, "device address length %zu, not %zu",
                          params->device_addr_length,
                          uct_rc_gdr_dev_addr_size());
        return 0;
    }
    return 1;
}


static ucs_status_t
uct_rc_gdr_glue_mem_query(uct_md_h md, const void *address, size_t length,
                          uct_md_mem_attr_v2_t *mem_attr)
{
    uct_rc_gdr_mem_info_t info;
    ucs_status_t status;

    status = uct_rc_gdr_md_mem_info(md, address, length, &info);
    if (status != UCS_OK) {
        return status;
    }

    UCT_RC_GDR_GLUE_MEM_ATTR_COPY(mem_attr, &info);
    if (mem_attr->field_mask & UCT_MD_MEM_ATTR_V2_FIELD_MEM_FLAGS) {
        /* Whatever this md reports it also registers (bounce lane
         * included). */
        mem_attr->mem_flags = UCS_MEM_FLAG_REGISTRABLE;
    }
    return UCS_OK;
}


static ucs_status_t
uct_rc_gdr_glue_rkey_unpack(uct_component_t *component,
                            const void *rkey_buffer,
                            const uct_rkey_unpack_params_t *params,
                            uct_rkey_t *rkey_p, void **handle_p)
{
    return uct_rc_gdr_md_unpack(rkey_buffer, rkey_p, handle_p);
}


static ucs_status_t
uct_rc_gdr_glue_ep_invalidate(uct_ep_h ep,
                              const uct_ep_invalidate_params_t *params)
{
    return uct_rc_gdr_ep_invalidate(ep, 0);
}


static ucs_status_t
uct_rc_gdr_glue_iface_query_v2(uct_iface_h iface,
                               uct_iface_attr_v2_t *iface_attr)
{
    uint64_t tokens = iface_attr->field_mask &
                      (UCT_IFACE_ATTR_FIELD_TX_TOKEN |
                       UCT_IFACE_ATTR_FIELD_RX_TOKEN);

    if (tokens != 0) {
        /* rc_gdr has no tokens to derive (UCT_IFACE_FLAG_V2_QUERY_TOKEN is
         * not set); the pair must come together all the same. */
        if (tokens != (UCT_IFACE_ATTR_FIELD_TX_TOKEN |
                       UCT_IFACE_ATTR_FIELD_RX_TOKEN)) {
            return UCS_ERR_INVALID_PARAM;
        }
        return UCS_ERR_UNSUPPORTED;
    }

    if (iface_attr->field_mask & UCT_IFACE_ATTR_FIELD_CAP_FLAGS) {
        iface_attr->cap.flags = 0; /* no SGL put, no token query */
    }
    if (iface_attr->field_mask &
        UCT_IFACE_ATTR_FIELD_MAX_PUT_SGL_ZCOPY_COUNT) {
        iface_attr->max_put_sgl_zcopy_count = 0;
    }
    if (iface_attr->field_mask & UCT_IFACE_ATTR_FIELD_TX_TOKEN_LENGTH) {
        iface_attr->tx_token_length = 0;
    }
    if (iface_attr->field_mask & UCT_IFACE_ATTR_FIELD_RX_TOKEN_LENGTH) {
        iface_attr->rx_token_length = 0;
    }
    return UCS_OK;
}


uct_md_ops_t uct_rc_gdr_md_ops = {
    .close              = uct_rc_gdr_md_close,
    .query              = uct_rc_gdr_glue_md_query,
    .mem_alloc          = (uct_md_mem_alloc_func_t)
                              ucs_empty_function_return_unsupported,
    .mem_free           = (uct_md_mem_free_func_t)
                              ucs_empty_function_return_unsupported,
    .mem_advise         = uct_rc_gdr_md_mem_advise,
    .mem_reg            = uct_rc_gdr_glue_mem_reg,
    .mem_dereg          = uct_rc_gdr_md_mem_dereg,
    .mem_query          = uct_rc_gdr_glue_mem_query,
    .mkey_pack          = uct_rc_gdr_glue_mkey_pack,
    .mem_attach         = (uct_md_mem_attach_func_t)
                              ucs_empty_function_return_unsupported,
    .detect_memory_type = uct_rc_gdr_md_detect_memory_type,
    .mem_elem_pack      = (uct_md_mem_elem_pack_func_t)
                              ucs_empty_function_return_unsupported
};


uct_iface_internal_ops_t uct_rc_gdr_iface_internal_ops = {
    .iface_query_v2        = uct_rc_gdr_glue_iface_query_v2,
    .iface_estimate_perf   = uct_rc_gdr_iface_estimate_perf,
    .iface_vfs_refresh     = (uct_iface_vfs_refresh_func_t)ucs_empty_function,
    .ep_query              = (uct_ep_query_func_t)
                                 ucs_empty_function_return_unsupported,
    .ep_invalidate         = uct_rc_gdr_glue_ep_invalidate,
    .ep_connect_to_ep_v2   = uct_rc_gdr_glue_connect_to_ep_v2,
    .iface_is_reachable_v2 = uct_rc_gdr_glue_iface_is_reachable_v2,
    .ep_is_connected       = uct_rc_gdr_glue_ep_is_connected,
    .ep_get_device_ep      = (uct_ep_get_device_ep_func_t)
                                 ucs_empty_function_return_unsupported,
    .ep_put_sgl_zcopy      = (uct_ep_put_sgl_zcopy_func_t)
                                 ucs_empty_function_return_unsupported
};


uct_component_t uct_rc_gdr_component = {
    .name               = UCT_RC_GDR_COMPONENT_NAME,
    .query_md_resources = uct_rc_gdr_md_query_resources,
    .md_open            = uct_rc_gdr_md_open,
    .cm_open            = (uct_component_cm_open_func_t)
                              ucs_empty_function_return_unsupported,
    .rkey_unpack        = uct_rc_gdr_glue_rkey_unpack,
    .rkey_ptr           = (uct_component_rkey_ptr_func_t)
                              ucs_empty_function_return_unsupported,
    .rkey_release       = (uct_component_rkey_release_func_t)
                              ucs_empty_function_return_success,
    .rkey_compare       = uct_rc_gdr_glue_rkey_compare,
    .md_config          = {
        .name           = "rc_gdr memory domain",
        .prefix         = UCT_RC_GDR_CONFIG_PREFIX,
        .table          = uct_rc_gdr_md_config_table,
        .size           = sizeof(uct_rc_gdr_md_config_t)
    },
    .cm_config          = UCS_CONFIG_EMPTY_GLOBAL_LIST_ENTRY,
    .tl_list            = UCT_COMPONENT_TL_LIST_INITIALIZER(
                                  &uct_rc_gdr_component),
    .flags              = 0,
    .md_vfs_init        = (uct_component_md_vfs_init_func_t)
                              ucs_empty_function
};
