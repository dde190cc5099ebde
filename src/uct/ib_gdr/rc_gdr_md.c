/*
 * rc_gdr memory domain.
 *
 * mem_reg goes through the registration cache (rc_gdr_rcache.c): the memh a
 * user gets back is a cache region, shared by every registration that it
 * contains, and released when the last reference goes or the memory is
 * unmapped, whichever comes first.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "rc_gdr_md.h"
#include "rc_gdr_addr.h"

#include <ucm/api/ucm.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>

#include <errno.h>
#include <string.h>


ucs_config_field_t uct_rc_gdr_md_config_table[] = {
    {"", "", NULL,
     ucs_offsetof(uct_rc_gdr_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {NULL}
};


ucs_status_t uct_rc_gdr_md_query_resources(uct_component_t *component,
                                           uct_md_resource_desc_t **resources_p,
                                           unsigned *num_resources_p)
{
    uct_md_resource_desc_t *resources;
    struct ibv_device **devices;
    int i, num_devices;

    devices = ibv_get_device_list(&num_devices);
    if ((devices == NULL) || (num_devices == 0)) {
        ucs_debug("rc_gdr: no verbs devices found");
        if (devices != NULL) {
            ibv_free_device_list(devices);
        }
        return uct_md_query_empty_md_resource(resources_p, num_resources_p);
    }

    resources = ucs_calloc(num_devices, sizeof(*resources), "rc_gdr_md_rsc");
    if (resources == NULL) {
        ibv_free_device_list(devices);
        return UCS_ERR_NO_MEMORY;
    }

    for (i = 0; i < num_devices; ++i) {
        ucs_strncpy_zero(resources[i].md_name,
                         ibv_get_device_name(devices[i]),
                         sizeof(resources[i].md_name));
    }

    ibv_free_device_list(devices);
    *resources_p     = resources;
    *num_resources_p = num_devices;
    return UCS_OK;
}


/* Host memory unmapped: its registrations must not serve a later mapping. */
static void uct_rc_gdr_md_vm_unmapped(ucm_event_type_t event_type,
                                      ucm_event_t *event, void *arg)
{
    uct_rc_gdr_md_t *md = arg;

    uct_rc_gdr_rcache_invalidate(md->rcache, event->vm_unmapped.address,
                                 event->vm_unmapped.size);
}


static void uct_rc_gdr_md_close(uct_md_h tl_md)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(tl_md, uct_rc_gdr_md_t);

    ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED, uct_rc_gdr_md_vm_unmapped,
                            md);
    uct_rc_gdr_rcache_destroy(md->rcache);
    ibv_dealloc_pd(md->pd);
    ibv_close_device(md->ibv_ctx);
    ucs_free(md);
}


/* UCP weighs devices by CPU locality; rc_gdr does not restrict it. */
static void uct_rc_gdr_md_local_cpus(ucs_cpu_set_t *cpus)
{
    int cpu;

    UCS_CPU_ZERO(cpus);
    for (cpu = 0; cpu < UCS_CPU_SETSIZE; ++cpu) {
        UCS_CPU_SET(cpu, cpus);
    }
}


static ucs_status_t uct_rc_gdr_md_query(uct_md_h tl_md,
                                        uct_rc_gdr_md_attr_t *md_attr)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(tl_md, uct_rc_gdr_md_t);

    memset(md_attr, 0, sizeof(*md_attr));
    md_attr->cap.flags            = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_MEMH |
                                    UCT_MD_FLAG_NEED_RKEY;
    md_attr->cap.reg_mem_types    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    md_attr->cap.access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    md_attr->cap.detect_mem_types = 0;
    md_attr->cap.alloc_mem_types  = 0;
    md_attr->cap.max_alloc        = 0;
    md_attr->cap.max_reg          = md->dev_attr.max_mr_size;
    md_attr->rkey_packed_size     = uct_rc_gdr_rkey_packed_size();
    /* A cache hit costs a lookup; a miss an ibv_reg_mr (~us + per page). */
    md_attr->reg_cost             = ucs_linear_func_make(16.0e-6, 0.06e-9);
    ucs_strncpy_zero(md_attr->component_name, UCT_RC_GDR_COMPONENT_NAME,
                     sizeof(md_attr->component_name));
    uct_rc_gdr_md_local_cpus(&md_attr->local_cpus);
    return UCS_OK;
}


ucs_status_t uct_rc_gdr_md_reg_internal(uct_rc_gdr_md_t *md, void *address,
                                        size_t length, struct ibv_mr **mr_p)
{
    struct ibv_mr *mr;

    mr = ibv_reg_mr(md->pd, address, length, md->mr_access);
    if (mr == NULL) {
        ucs_error("rc_gdr: %s: ibv_reg_mr(%p, %zu) failed: %m", md->name,
                  address, length);
        return (errno == ENOMEM) ? UCS_ERR_NO_MEMORY : UCS_ERR_IO_ERROR;
    }

    *mr_p = mr;
    return UCS_OK;
}


static ucs_status_t
uct_rc_gdr_md_region_reg(void *arg, uct_rc_gdr_rcache_region_t *region)
{
    uct_rc_gdr_md_t *md     = arg;
    uct_rc_gdr_mr_t *gdr_mr = uct_rc_gdr_rcache_region_priv(region);
    ucs_status_t status;

    status = uct_rc_gdr_md_reg_internal(md, (void*)region->start,
                                        region->end - region->start,
                                        &gdr_mr->mr);
    if (status != UCS_OK) {
        return status;
    }

    gdr_mr->rkey_flags = UCT_RC_GDR_RKEY_FLAG_NIC;
    return UCS_OK;
}


static void
uct_rc_gdr_md_region_dereg(void *arg, uct_rc_gdr_rcache_region_t *region)
{
    uct_rc_gdr_mr_t *gdr_mr = uct_rc_gdr_rcache_region_priv(region);
    int ret;

    if (gdr_mr->mr == NULL) {
        return;
    }

    ret = ibv_dereg_mr(gdr_mr->mr);
    if (ret != 0) {
        ucs_warn("rc_gdr: ibv_dereg_mr(%p) failed: %s", gdr_mr->mr,
                 strerror(ret));
    }
    gdr_mr->mr = NULL;
}


static const uct_rc_gdr_rcache_ops_t uct_rc_gdr_md_rcache_ops = {
    .mem_reg   = uct_rc_gdr_md_region_reg,
    .mem_dereg = uct_rc_gdr_md_region_dereg
};


static ucs_status_t uct_rc_gdr_md_mem_reg(UCT_RC_GDR_MEM_REG_ARGS)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(tl_md, uct_rc_gdr_md_t);
    uct_rc_gdr_rcache_region_t *region;
    ucs_status_t status;

    status = uct_rc_gdr_rcache_get(md->rcache, address, length,
                                   UCS_MEMORY_TYPE_HOST, 0, &region);
    if (status != UCS_OK) {
        return status;
    }

    *memh_p = region;
    return UCS_OK;
}


static ucs_status_t
uct_rc_gdr_md_mem_dereg(uct_md_h tl_md, const uct_md_mem_dereg_params_t *params)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(tl_md, uct_rc_gdr_md_t);

    if (!(params->field_mask & UCT_MD_MEM_DEREG_FIELD_MEMH) ||
        (params->memh == UCT_MEM_HANDLE_NULL)) {
        ucs_error("rc_gdr: mem_dereg without a memory handle");
        return UCS_ERR_INVALID_PARAM;
    }

    if ((params->field_mask & UCT_MD_MEM_DEREG_FIELD_FLAGS) &&
        (params->flags & UCT_MD_MEM_DEREG_FLAG_INVALIDATE)) {
        return UCS_ERR_UNSUPPORTED;
    }

    return uct_rc_gdr_rcache_put(md->rcache, params->memh);
}


static ucs_status_t uct_rc_gdr_md_mem_query(uct_md_h tl_md, const void *address,
                                            size_t length,
                                            uct_md_mem_attr_t *mem_attr)
{
    /* Host memory only until the CUDA shim detects device pointers. */
    return UCS_ERR_UNSUPPORTED;
}


static ucs_status_t
uct_rc_gdr_md_detect_memory_type(uct_md_h tl_md, const void *address,
                                 size_t length, ucs_memory_type_t *mem_type_p)
{
    return UCS_ERR_UNSUPPORTED;
}


static ucs_status_t uct_rc_gdr_md_mkey_pack(UCT_RC_GDR_MKEY_PACK_ARGS)
{
    uct_rc_gdr_mr_t *gdr_mr = uct_rc_gdr_memh_mr(memh);
    uct_rc_gdr_rkey_t rkey;

    rkey.rkey  = (gdr_mr->mr == NULL) ? 0 : gdr_mr->mr->rkey;
    rkey.flags = gdr_mr->rkey_flags;
    uct_rc_gdr_rkey_pack(&rkey, rkey_buffer);
    return UCS_OK;
}


ucs_status_t uct_rc_gdr_md_rkey_unpack(UCT_RC_GDR_RKEY_UNPACK_ARGS)
{
    uct_rc_gdr_rkey_t rkey;
    ucs_status_t status;

    /* UCT does not pass the blob's length: the packed size is what our own
     * mkey_pack wrote, and the checksum catches a shorter copy. */
    status = uct_rc_gdr_rkey_unpack_buffer(rkey_buffer,
                                           uct_rc_gdr_rkey_packed_size(),
                                           &rkey);
    if (status != UCS_OK) {
        return status;
    }

    *rkey_p   = uct_rc_gdr_rkey_to_uct(&rkey);
    *handle_p = NULL;
    return UCS_OK;
}


static uct_md_ops_t uct_rc_gdr_md_ops =
    UCT_RC_GDR_MD_OPS_INITIALIZER(uct_rc_gdr_md);


static struct ibv_device *uct_rc_gdr_md_find_device(struct ibv_device **devices,
                                                    int num_devices,
                                                    const char *name)
{
    int i;

    for (i = 0; i < num_devices; ++i) {
        if (!strcmp(ibv_get_device_name(devices[i]), name)) {
            return devices[i];
        }
    }
    return NULL;
}


ucs_status_t uct_rc_gdr_md_open(uct_component_t *component,
                                const char *md_name,
                                const uct_md_config_t *config,
                                uct_md_h *md_p)
{
    uct_rc_gdr_rcache_params_t rcache_params;
    struct ibv_device **devices, *device;
    uct_rc_gdr_md_t *md;
    ucs_status_t status;
    int num_devices;

    md = ucs_calloc(1, sizeof(*md), "rc_gdr_md");
    if (md == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    md->super.ops       = &uct_rc_gdr_md_ops;
    md->super.component = &uct_rc_gdr_component;
    md->mr_access       = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    ucs_strncpy_zero(md->name, md_name, sizeof(md->name));

    devices = ibv_get_device_list(&num_devices);
    if (devices == NULL) {
        ucs_error("rc_gdr: ibv_get_device_list() failed: %m");
        status = UCS_ERR_NO_DEVICE;
        goto err_free_md;
    }

    device = uct_rc_gdr_md_find_device(devices, num_devices, md_name);
    if (device == NULL) {
        ucs_error("rc_gdr: verbs device '%s' not found", md_name);
        status = UCS_ERR_NO_DEVICE;
        goto err_free_list;
    }

    md->ibv_ctx = ibv_open_device(device);
    if (md->ibv_ctx == NULL) {
        ucs_error("rc_gdr: ibv_open_device(%s) failed: %m", md_name);
        status = UCS_ERR_IO_ERROR;
        goto err_free_list;
    }

    if (ibv_query_device(md->ibv_ctx, &md->dev_attr) != 0) {
        ucs_error("rc_gdr: ibv_query_device(%s) failed: %m", md_name);
        status = UCS_ERR_IO_ERROR;
        goto err_close_device;
    }

    md->pd = ibv_alloc_pd(md->ibv_ctx);
    if (md->pd == NULL) {
        ucs_error("rc_gdr: ibv_alloc_pd(%s) failed: %m", md_name);
        status = UCS_ERR_IO_ERROR;
        goto err_close_device;
    }

    rcache_params.page_size = ucs_get_page_size();
    rcache_params.priv_size = sizeof(uct_rc_gdr_mr_t);
    rcache_params.ops       = &uct_rc_gdr_md_rcache_ops;
    rcache_params.arg       = md;
    rcache_params.name      = md->name;
    status = uct_rc_gdr_rcache_create(&rcache_params, &md->rcache);
    if (status != UCS_OK) {
        goto err_dealloc_pd;
    }

    status = ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, 1000,
                                   uct_rc_gdr_md_vm_unmapped, md);
    if (status != UCS_OK) {
        ucs_error("rc_gdr: cannot subscribe to memory unmap events: %s",
                  ucs_status_string(status));
        goto err_destroy_rcache;
    }

    ibv_free_device_list(devices);
    *md_p = &md->super;
    return UCS_OK;

err_destroy_rcache:
    uct_rc_gdr_rcache_destroy(md->rcache);
err_dealloc_pd:
    ibv_dealloc_pd(md->pd);
err_close_device:
    ibv_close_device(md->ibv_ctx);
err_free_list:
    ibv_free_device_list(devices);
err_free_md:
    ucs_free(md);
    return status;
}
