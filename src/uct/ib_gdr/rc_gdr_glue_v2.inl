/*
 * rc_gdr glue: the adapters every release from 1.14 on shares (md attributes
 * v2, parameter structs, the v2 connection and reachability ops, remote key
 * comparison, memory pool parameters). Included by rc_gdr_glue_v114.c and
 * rc_gdr_glue_v122.c only; what differs between them is there. What came
 * later than 1.14 into these adapters is tested for (RC_GDR_UCX_HAVE_*):
 * reg_nonblock_mem_types and is_reachable v2 (1.15), reg_alignment, the
 * address of mkey_pack, rkey_compare and ep_is_connected (1.16).
 */

#include "rc_gdr_md.h"
#include "rc_gdr_ep.h"

#include <ucs/sys/string.h>

#include <string.h>


static ucs_status_t uct_rc_gdr_glue_md_query(uct_md_h md,
                                             uct_md_attr_v2_t *md_attr)
{
    uct_rc_gdr_md_caps_t caps;

    uct_rc_gdr_md_caps(md, &caps);
    /* Every field, whatever field_mask asks: libuct's v1 query converts
     * from this struct, and UCP reads fields it did not ask for. */
    md_attr->max_alloc                 = caps.max_alloc;
    md_attr->max_reg                   = caps.max_reg;
    md_attr->flags                     = caps.flags;
    md_attr->reg_mem_types             = caps.reg_mem_types;
    md_attr->cache_mem_types           = caps.cache_mem_types;
    md_attr->detect_mem_types          = caps.detect_mem_types;
    md_attr->alloc_mem_types           = caps.alloc_mem_types;
    md_attr->access_mem_types          = caps.access_mem_types;
    md_attr->dmabuf_mem_types          = caps.dmabuf_mem_types;
    md_attr->reg_cost                  = caps.reg_cost;
    md_attr->rkey_packed_size          = caps.rkey_packed_size;
    md_attr->local_cpus                = caps.local_cpus;
    md_attr->exported_mkey_packed_size = caps.exported_mkey_packed_size;
#if RC_GDR_UCX_HAVE_REG_NONBLOCK_MEM_TYPES
    md_attr->reg_nonblock_mem_types    = caps.reg_nonblock_mem_types;
#endif
#if RC_GDR_UCX_HAVE_REG_ALIGNMENT
    md_attr->reg_alignment             = caps.reg_alignment;
#endif
    ucs_strncpy_zero(md_attr->component_name, caps.component_name,
                     sizeof(md_attr->component_name));
    memset(md_attr->global_id, 0, sizeof(md_attr->global_id));
    memcpy(md_attr->global_id, caps.global_id,
           ucs_min(caps.global_id_length, sizeof(md_attr->global_id)));
    UCT_RC_GDR_GLUE_MD_QUERY_MORE(md_attr, &caps);
    return UCS_OK;
}


static ucs_status_t
uct_rc_gdr_glue_mem_reg(uct_md_h md, void *address, size_t length,
                        const uct_md_mem_reg_params_t *params,
                        uct_mem_h *memh_p)
{
    uint64_t flags = UCT_MD_MEM_REG_FIELD_VALUE(params, flags, FIELD_FLAGS,
                                                0);

    /* No UCT_MD_FLAG_REG_DMABUF: a DMA-BUF from another md is not used,
     * rc_gdr exports its own when the gate chose that mechanism. */
    return uct_rc_gdr_md_reg(md, address, length, flags, memh_p);
}


#if RC_GDR_UCX_HAVE_MKEY_PACK_ADDRESS
static ucs_status_t
uct_rc_gdr_glue_mkey_pack(uct_md_h md, uct_mem_h memh, void *address,
                          size_t length,
                          const uct_md_mkey_pack_params_t *params,
                          void *buffer)
#else
static ucs_status_t
uct_rc_gdr_glue_mkey_pack(uct_md_h md, uct_mem_h memh,
                          const uct_md_mkey_pack_params_t *params,
                          void *buffer)
#endif
{
    unsigned flags = UCS_PARAM_VALUE(UCT_MD_MKEY_PACK_FIELD, params, flags,
                                     FLAGS, 0);

    if (flags & UCT_MD_MKEY_PACK_FLAG_EXPORT) {
        return UCS_ERR_UNSUPPORTED; /* exported_mkey_packed_size is 0 */
    }
    return uct_rc_gdr_md_pack(md, memh, buffer);
}


#if RC_GDR_UCX_HAVE_RKEY_COMPARE
static ucs_status_t
uct_rc_gdr_glue_rkey_compare(uct_component_t *component, uct_rkey_t rkey1,
                             uct_rkey_t rkey2,
                             const uct_rkey_compare_params_t *params,
                             int *result)
{
    if ((params->field_mask != 0) || (result == NULL)) {
        return UCS_ERR_INVALID_PARAM;
    }

    *result = uct_rc_gdr_md_rkey_cmp(rkey1, rkey2);
    return UCS_OK;
}
#endif


/* Copies info's fields that the caller asked for; the DMA-BUF fields say
 * "none": rc_gdr does not give its exports away. */
#define UCT_RC_GDR_GLUE_MEM_ATTR_COPY(_mem_attr, _info) \
    do { \
        if ((_mem_attr)->field_mask & UCT_MD_MEM_ATTR_FIELD_MEM_TYPE) { \
            (_mem_attr)->mem_type = (_info)->mem_type; \
        } \
        if ((_mem_attr)->field_mask & UCT_MD_MEM_ATTR_FIELD_SYS_DEV) { \
            (_mem_attr)->sys_dev = (_info)->sys_dev; \
        } \
        if ((_mem_attr)->field_mask & UCT_MD_MEM_ATTR_FIELD_BASE_ADDRESS) { \
            (_mem_attr)->base_address = (_info)->base_address; \
        } \
        if ((_mem_attr)->field_mask & UCT_MD_MEM_ATTR_FIELD_ALLOC_LENGTH) { \
            (_mem_attr)->alloc_length = (_info)->alloc_length; \
        } \
        if ((_mem_attr)->field_mask & UCT_MD_MEM_ATTR_FIELD_DMABUF_FD) { \
            (_mem_attr)->dmabuf_fd = UCT_DMABUF_FD_INVALID; \
        } \
        if ((_mem_attr)->field_mask & UCT_MD_MEM_ATTR_FIELD_DMABUF_OFFSET) { \
            (_mem_attr)->dmabuf_offset = 0; \
        } \
    } while (0)


static ucs_status_t
uct_rc_gdr_glue_connect_to_ep_v2(uct_ep_h ep,
                                 const uct_device_addr_t *device_addr,
                                 const uct_ep_addr_t *ep_addr,
                                 const uct_ep_connect_to_ep_params_t *params)
{
    size_t dev_addr_length = uct_rc_gdr_dev_addr_size();
    size_t ep_addr_length  = uct_rc_gdr_ep_addr_size();

    /* The lengths UCX gives: a truncated address is refused by its length,
     * never read past its end. Not given: the sizes this transport packs. */
    if (params->field_mask &
        UCT_EP_CONNECT_TO_EP_PARAM_FIELD_DEVICE_ADDR_LENGTH) {
        dev_addr_length = params->device_addr_length;
    }
    if (params->field_mask & UCT_EP_CONNECT_TO_EP_PARAM_FIELD_EP_ADDR_LENGTH) {
        ep_addr_length = params->ep_addr_length;
    }
    return uct_rc_gdr_ep_connect_to_ep_len(ep, device_addr, dev_addr_length,
                                           ep_addr, ep_addr_length);
}


#if RC_GDR_UCX_HAVE_EP_IS_CONNECTED
static int
uct_rc_gdr_glue_ep_is_connected(uct_ep_h ep,
                                const uct_ep_is_connected_params_t *params)
{
    const uct_device_addr_t *dev_addr = NULL;
    const uct_ep_addr_t *ep_addr      = NULL;

    if (params->field_mask & UCT_EP_IS_CONNECTED_FIELD_DEVICE_ADDR) {
        dev_addr = params->device_addr;
    }
    if (params->field_mask & UCT_EP_IS_CONNECTED_FIELD_EP_ADDR) {
        ep_addr = params->ep_addr;
    }
    if ((dev_addr == NULL) && (ep_addr == NULL)) {
        return 0; /* nothing names a peer */
    }
    return uct_rc_gdr_ep_is_connected_to(ep, dev_addr, ep_addr);
}
#endif


#if RC_GDR_UCX_HAVE_IFACE_IS_REACHABLE_V2
static int
uct_rc_gdr_glue_iface_is_reachable_v2(
        const uct_iface_h iface, const uct_iface_is_reachable_params_t *params)
{
    const uct_device_addr_t *dev_addr = NULL;
    char why[128]                     = "";
    size_t max;
    int reachable;

    if (params->field_mask & UCT_IFACE_IS_REACHABLE_FIELD_DEVICE_ADDR) {
        dev_addr = params->device_addr;
    }

    reachable = UCT_RC_GDR_GLUE_ADDR_LENGTH_OK(params, why, sizeof(why)) &&
                uct_rc_gdr_iface_reachable(iface, dev_addr, why,
                                           sizeof(why));
    if (reachable &&
        (params->field_mask & UCT_IFACE_IS_REACHABLE_FIELD_SCOPE) &&
        (params->scope == UCT_IFACE_REACHABILITY_SCOPE_DEVICE) &&
        !uct_rc_gdr_iface_same_device(iface, dev_addr)) {
        ucs_snprintf_zero(why, sizeof(why), "device address is different");
        reachable = 0;
    }

    if (!reachable &&
        (params->field_mask & UCT_IFACE_IS_REACHABLE_FIELD_INFO_STRING) &&
        (params->info_string != NULL)) {
        max = (params->field_mask &
               UCT_IFACE_IS_REACHABLE_FIELD_INFO_STRING_LENGTH) ?
              params->info_string_length : 0;
        if (max > 0) {
            ucs_strncpy_zero(params->info_string, why, max);
        }
    }
    return reachable;
}
#endif


ucs_status_t uct_rc_gdr_glue_mpool_init(ucs_mpool_t *mp, size_t elem_size,
                                        size_t alignment,
                                        unsigned elems_per_chunk,
                                        unsigned max_elems,
                                        ucs_mpool_ops_t *ops,
                                        const char *name)
{
    ucs_mpool_params_t params;

    ucs_mpool_params_reset(&params);
    params.elem_size       = elem_size;
    params.alignment       = alignment;
    params.elems_per_chunk = elems_per_chunk;
    params.max_elems       = max_elems;
    params.ops             = ops;
    params.name            = name;
    return ucs_mpool_init(&params, mp);
}


/* 1.14 and later: names carry a priority; the IB device names its NIC at 20,
 * the CUDA md its GPUs at 10, and the higher one stays */
void uct_rc_gdr_glue_sys_dev_set_name(ucs_sys_device_t sys_dev,
                                      const char *name, int nic)
{
    ucs_status_t status;

    status = ucs_topo_sys_device_set_name(sys_dev, name, nic ? 20 : 10);
    if (status != UCS_OK) {
        ucs_debug("rc_gdr: naming system device %d '%s' failed: %s", sys_dev,
                  name, ucs_status_string(status));
    }
}
