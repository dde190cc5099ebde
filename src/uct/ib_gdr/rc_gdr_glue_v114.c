/*
 * rc_gdr glue for UCX 1.14 - 1.21: copies rc_gdr's capabilities and answers
 * into this generation's structs, and lays out its tables.
 *
 * Since 1.14: md attributes v2, mem_reg and mkey_pack take parameter
 * structs, the md ops gained mem_attach, the internal iface ops
 * connect_to_ep v2, ucs_mpool_init takes a parameter struct, the pool
 * knobs a chunk size and growth factor, system device names a priority.
 * Within the generation, each found by configure (RC_GDR_UCX_HAVE_*), not by
 * release number: is_reachable v2 as an internal op (1.15); mkey_pack given
 * the address and length, is_sockaddr_accessible gone from the md ops,
 * ep_is_connected, rkey_compare in the component (1.16); gva_mem_types and
 * the address lengths of is_reachable (1.18), the parameters of rkey_unpack
 * (1.19), iface_query_v2 with the device memory element ops (1.20, gone
 * again in 1.21), the md's mem_elem_pack and ep_invalidate with a parameter
 * struct (1.21).
 */

#if RC_GDR_UCX_HAVE_GVA_MEM_TYPES
#  define UCT_RC_GDR_GLUE_MD_QUERY_MORE(_md_attr, _caps) \
       (_md_attr)->gva_mem_types = (_caps)->gva_mem_types
#else
#  define UCT_RC_GDR_GLUE_MD_QUERY_MORE(_md_attr, _caps) (void)0
#endif
#if RC_GDR_UCX_HAVE_REACHABLE_ADDR_LENGTH
#  define UCT_RC_GDR_GLUE_ADDR_LENGTH_OK(_params, _why, _max) \
       uct_rc_gdr_glue_addr_length_ok(_params, _why, _max)
#else
#  define UCT_RC_GDR_GLUE_ADDR_LENGTH_OK(_params, _why, _max) 1
#endif

#include "rc_gdr_glue.h"

#if RC_GDR_UCX_HAVE_REACHABLE_ADDR_LENGTH
static int
uct_rc_gdr_glue_addr_length_ok(const uct_iface_is_reachable_params_t *params,
                               char *why, size_t max);
#endif

#include "rc_gdr_glue_v2.inl"
#include "rc_gdr_addr.h"
#include "rc_gdr_ep.h"


#if RC_GDR_UCX_HAVE_REACHABLE_ADDR_LENGTH
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
#endif


static ucs_status_t
uct_rc_gdr_glue_mem_query(uct_md_h md, const void *address, size_t length,
                          uct_md_mem_attr_t *mem_attr)
{
    uct_rc_gdr_mem_info_t info;
    ucs_status_t status;

    status = uct_rc_gdr_md_mem_info(md, address, length, &info);
    if (status != UCS_OK) {
        return status;
    }

    UCT_RC_GDR_GLUE_MEM_ATTR_COPY(mem_attr, &info);
    return UCS_OK;
}


#if RC_GDR_UCX_HAVE_RKEY_UNPACK_PARAMS
static ucs_status_t
uct_rc_gdr_glue_rkey_unpack(uct_component_t *component,
                            const void *rkey_buffer,
                            const uct_rkey_unpack_params_t *params,
                            uct_rkey_t *rkey_p, void **handle_p)
{
    return uct_rc_gdr_md_unpack(rkey_buffer, rkey_p, handle_p);
}
#else
static ucs_status_t
uct_rc_gdr_glue_rkey_unpack(uct_component_t *component,
                            const void *rkey_buffer, uct_rkey_t *rkey_p,
                            void **handle_p)
{
    return uct_rc_gdr_md_unpack(rkey_buffer, rkey_p, handle_p);
}
#endif


#if RC_GDR_UCX_HAVE_EP_INVALIDATE_PARAMS
static ucs_status_t
uct_rc_gdr_glue_ep_invalidate(uct_ep_h ep,
                              const uct_ep_invalidate_params_t *params)
{
    return uct_rc_gdr_ep_invalidate(ep, 0);
}
#else
static ucs_status_t uct_rc_gdr_glue_ep_invalidate(uct_ep_h ep, unsigned flags)
{
    return uct_rc_gdr_ep_invalidate(ep, flags);
}
#endif


#if RC_GDR_UCX_HAVE_IFACE_QUERY_V2
/* Before the plugin generation, iface_query_v2 asks only about device
 * memory elements (GPU-initiated transfers), which rc_gdr has none of; libuct
 * calls the op unchecked. */
static ucs_status_t
uct_rc_gdr_glue_iface_query_v2(uct_iface_h iface,
                               uct_iface_attr_v2_t *iface_attr)
{
#if RC_GDR_UCX_HAVE_DEVICE_MEM_ELEMENT_SIZE
    if (iface_attr->field_mask &
        UCT_IFACE_ATTR_FIELD_DEVICE_MEM_ELEMENT_SIZE) {
        iface_attr->device_mem_element_size = 0;
    }
#endif
    return UCS_OK;
}
#endif


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
#if RC_GDR_UCX_HAVE_MD_IS_SOCKADDR_ACCESSIBLE
    .is_sockaddr_accessible = (uct_md_is_sockaddr_accessible_func_t)
                                  ucs_empty_function_return_zero_int,
#endif
    .detect_memory_type = uct_rc_gdr_md_detect_memory_type,
#if RC_GDR_UCX_HAVE_MD_MEM_ELEM_PACK
    .mem_elem_pack      = (uct_md_mem_elem_pack_func_t)
                              ucs_empty_function_return_unsupported,
#endif
};


uct_iface_internal_ops_t uct_rc_gdr_iface_internal_ops = {
#if RC_GDR_UCX_HAVE_IFACE_QUERY_V2
    .iface_query_v2        = uct_rc_gdr_glue_iface_query_v2,
#endif
    .iface_estimate_perf   = uct_rc_gdr_iface_estimate_perf,
    .iface_vfs_refresh     = (uct_iface_vfs_refresh_func_t)ucs_empty_function,
    .ep_query              = (uct_ep_query_func_t)
                                 ucs_empty_function_return_unsupported,
    .ep_invalidate         = uct_rc_gdr_glue_ep_invalidate,
    .ep_connect_to_ep_v2   = uct_rc_gdr_glue_connect_to_ep_v2,
#if RC_GDR_UCX_HAVE_IFACE_IS_REACHABLE_V2
    .iface_is_reachable_v2 = uct_rc_gdr_glue_iface_is_reachable_v2,
#endif
#if RC_GDR_UCX_HAVE_EP_IS_CONNECTED
    .ep_is_connected       = uct_rc_gdr_glue_ep_is_connected,
#endif
#if RC_GDR_UCX_HAVE_IFACE_MEM_ELEMENT_PACK
    .iface_mem_element_pack = (uct_iface_mem_element_pack_func_t)
                                  ucs_empty_function_return_unsupported,
#endif
#if RC_GDR_UCX_HAVE_EP_GET_DEVICE_EP
    .ep_get_device_ep      = (uct_ep_get_device_ep_func_t)
                                 ucs_empty_function_return_unsupported,
#endif
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
#if RC_GDR_UCX_HAVE_RKEY_COMPARE
    .rkey_compare       = uct_rc_gdr_glue_rkey_compare,
#endif
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
