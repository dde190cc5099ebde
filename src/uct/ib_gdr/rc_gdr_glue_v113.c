/*
 * rc_gdr glue for UCX 1.13: copies rc_gdr's capabilities and answers into
 * this release's structs, and lays out its tables.
 *
 * 1.13: md query takes uct_md_attr_t, mem_reg plain flags, mkey_pack no
 * address; the md ops still have is_sockaddr_accessible; four internal iface
 * ops; no rkey_compare; ucs_mpool_init takes its parameters one by one.
 */

#include "rc_gdr_md.h"
#include "rc_gdr_ep.h"

#include <ucs/sys/string.h>

#include <string.h>


static ucs_status_t uct_rc_gdr_glue_md_query(uct_md_h md,
                                             uct_md_attr_t *md_attr)
{
    uct_rc_gdr_md_caps_t caps;

    uct_rc_gdr_md_caps(md, &caps);
    memset(md_attr, 0, sizeof(*md_attr));
    md_attr->cap.max_alloc        = caps.max_alloc;
    md_attr->cap.max_reg          = caps.max_reg;
    md_attr->cap.flags            = caps.flags;
    md_attr->cap.reg_mem_types    = caps.reg_mem_types;
    md_attr->cap.detect_mem_types = caps.detect_mem_types;
    md_attr->cap.alloc_mem_types  = caps.alloc_mem_types;
    md_attr->cap.access_mem_types = caps.access_mem_types;
    md_attr->reg_cost             = caps.reg_cost;
    md_attr->rkey_packed_size     = caps.rkey_packed_size;
    md_attr->local_cpus           = caps.local_cpus;
    ucs_strncpy_zero(md_attr->component_name, caps.component_name,
                     sizeof(md_attr->component_name));
    return UCS_OK;
}


static ucs_status_t uct_rc_gdr_glue_mem_reg(uct_md_h md, void *address,
                                            size_t length, unsigned flags,
                                            uct_mem_h *memh_p)
{
    return uct_rc_gdr_md_reg(md, address, length, flags, memh_p);
}


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

    if (mem_attr->field_mask & UCT_MD_MEM_ATTR_FIELD_MEM_TYPE) {
        mem_attr->mem_type = info.mem_type;
    }
    if (mem_attr->field_mask & UCT_MD_MEM_ATTR_FIELD_SYS_DEV) {
        mem_attr->sys_dev = info.sys_dev;
    }
    if (mem_attr->field_mask & UCT_MD_MEM_ATTR_FIELD_BASE_ADDRESS) {
        mem_attr->base_address = info.base_address;
    }
    if (mem_attr->field_mask & UCT_MD_MEM_ATTR_FIELD_ALLOC_LENGTH) {
        mem_attr->alloc_length = info.alloc_length;
    }
    return UCS_OK;
}


static ucs_status_t
uct_rc_gdr_glue_mkey_pack(uct_md_h md, uct_mem_h memh,
                          const uct_md_mkey_pack_params_t *params,
                          void *rkey_buffer)
{
    return uct_rc_gdr_md_pack(md, memh, rkey_buffer);
}


static ucs_status_t
uct_rc_gdr_glue_rkey_unpack(uct_component_t *component,
                            const void *rkey_buffer, uct_rkey_t *rkey_p,
                            void **handle_p)
{
    return uct_rc_gdr_md_unpack(rkey_buffer, rkey_p, handle_p);
}


uct_md_ops_t uct_rc_gdr_md_ops = {
    .close                  = uct_rc_gdr_md_close,
    .query                  = uct_rc_gdr_glue_md_query,
    .mem_alloc              = (uct_md_mem_alloc_func_t)
                                  ucs_empty_function_return_unsupported,
    .mem_free               = (uct_md_mem_free_func_t)
                                  ucs_empty_function_return_unsupported,
    .mem_advise             = uct_rc_gdr_md_mem_advise,
    .mem_reg                = uct_rc_gdr_glue_mem_reg,
    .mem_dereg              = uct_rc_gdr_md_mem_dereg,
    .mem_query              = uct_rc_gdr_glue_mem_query,
    .mkey_pack              = uct_rc_gdr_glue_mkey_pack,
    .is_sockaddr_accessible = (uct_md_is_sockaddr_accessible_func_t)
                                  ucs_empty_function_return_zero_int,
    .detect_memory_type     = uct_rc_gdr_md_detect_memory_type
};


uct_iface_internal_ops_t uct_rc_gdr_iface_internal_ops = {
    .iface_estimate_perf = uct_rc_gdr_iface_estimate_perf,
    .iface_vfs_refresh   = (uct_iface_vfs_refresh_func_t)ucs_empty_function,
    .ep_query            = (uct_ep_query_func_t)
                               ucs_empty_function_return_unsupported,
    .ep_invalidate       = uct_rc_gdr_ep_invalidate
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


ucs_status_t uct_rc_gdr_glue_mpool_init(ucs_mpool_t *mp, size_t elem_size,
                                        size_t alignment,
                                        unsigned elems_per_chunk,
                                        unsigned max_elems,
                                        ucs_mpool_ops_t *ops,
                                        const char *name)
{
    return ucs_mpool_init(mp, 0, elem_size, 0, alignment, elems_per_chunk,
                          max_elems, ops, name);
}


/* 1.13: a name set later replaces the earlier one (UCX's IB device names
 * its NIC the same way) */
void uct_rc_gdr_glue_sys_dev_set_name(ucs_sys_device_t sys_dev,
                                      const char *name, int nic)
{
    ucs_status_t status;

    status = ucs_topo_sys_device_set_name(sys_dev, name);
    if (status != UCS_OK) {
        ucs_debug("rc_gdr: naming system device %d '%s' failed: %s", sys_dev,
                  name, ucs_status_string(status));
    }
}
