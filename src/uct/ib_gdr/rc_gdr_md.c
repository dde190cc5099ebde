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
#include "rc_gdr_cuda.h"
#include "rc_gdr_flush.h"
#include "rc_gdr_probe.h"

#include <ucm/rc_gdr_ucm.h>

#include <ucm/api/ucm.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>

#include <errno.h>
#include <string.h>
#include <unistd.h>


ucs_config_field_t uct_rc_gdr_md_config_table[] = {
    {"", "", NULL,
     ucs_offsetof(uct_rc_gdr_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {"MAX_DISTANCE", UCT_RC_GDR_GATE_DEFAULT_MAX_DISTANCE,
     "Farthest PCIe distance between GPU and NIC at which GPU memory is "
     "registered with the NIC: LOC, PIX, PXB, PHB, NODE or SYS (as in "
     "nvidia-smi topo). An unknown distance never qualifies.",
     ucs_offsetof(uct_rc_gdr_md_config_t, max_distance),
     UCS_CONFIG_TYPE_STRING},

    {"NIC_READS_GPU", UCT_RC_GDR_GATE_DEFAULT_POLICY,
     "Sending from GPU memory by NIC reads: auto (when every check holds, "
     "else the bounce lane), yes (when every check holds, else an error), "
     "no (always the bounce lane).",
     ucs_offsetof(uct_rc_gdr_md_config_t, nic_reads_gpu),
     UCS_CONFIG_TYPE_STRING},

    {"NIC_WRITES_GPU", UCT_RC_GDR_GATE_DEFAULT_POLICY,
     "Receiving into GPU memory by NIC writes: auto, yes or no (as above).",
     ucs_offsetof(uct_rc_gdr_md_config_t, nic_writes_gpu),
     UCS_CONFIG_TYPE_STRING},

    {"REG_METHODS", UCT_RC_GDR_GATE_DEFAULT_REG_METHODS,
     "Registration mechanisms for GPU memory, in order of preference: dmabuf "
     "(cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr), peermem "
     "(ibv_reg_mr on the CUDA pointer, nvidia-peermem). Each is proven by a "
     "test registration when the memory domain opens.",
     ucs_offsetof(uct_rc_gdr_md_config_t, reg_methods),
     UCS_CONFIG_TYPE_STRING},

    {"BOUNCE", UCT_RC_GDR_GATE_DEFAULT_BOUNCE,
     "Allow the bounce lane (pinned host staging) for GPU memory the NIC "
     "cannot reach directly.",
     ucs_offsetof(uct_rc_gdr_md_config_t, bounce), UCS_CONFIG_TYPE_STRING},

    {"REQUIRE", UCT_RC_GDR_GATE_DEFAULT_REQUIRE,
     "no: fall back as the checks decide; gdr: every direction not turned "
     "off must use GPUDirect RDMA, else opening the memory domain fails, "
     "naming the failing check.",
     ucs_offsetof(uct_rc_gdr_md_config_t, require), UCS_CONFIG_TYPE_STRING},

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


/* CUDA memory freed: its registrations go before the memory does, so no
 * NIC keeps a key to memory the GPU hands out again. */
static void uct_rc_gdr_md_cuda_freed(void *address, size_t length,
                                     rc_gdr_ucm_cuda_mem_kind_t kind,
                                     void *arg)
{
    uct_rc_gdr_md_t *md = arg;

    uct_rc_gdr_rcache_invalidate(md->rcache, address, length);
}


void uct_rc_gdr_md_close(uct_md_h tl_md)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(tl_md, uct_rc_gdr_md_t);

    if (md->num_gpus > 0) {
        rc_gdr_ucm_cuda_unset_free_handler(uct_rc_gdr_md_cuda_freed, md);
    }
    ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED, uct_rc_gdr_md_vm_unmapped,
                            md);
    uct_rc_gdr_rcache_destroy(md->rcache);
    ucs_free(md->gpus);
    ibv_dealloc_pd(md->pd);
    ibv_close_device(md->ibv_ctx);
    kh_destroy_inplace(uct_rc_gdr_token, &md->tokens);
    pthread_mutex_destroy(&md->token_lock);
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


/* What this md offers; the glue copies it into the release's attributes. */
void uct_rc_gdr_md_caps(uct_md_h tl_md, uct_rc_gdr_md_caps_t *caps)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(tl_md, uct_rc_gdr_md_t);

    memset(caps, 0, sizeof(*caps));
    caps->flags            = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_MEMH |
                             UCT_MD_FLAG_NEED_RKEY;
    caps->reg_mem_types    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    caps->access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    caps->detect_mem_types = 0;
    if (md->num_gpus > 0) {
        /* Registered with the NIC or, failing that, for the bounce lane;
         * detected so that UCP classifies GPU memory without cuda_copy. */
        caps->reg_mem_types    |= UCS_BIT(UCS_MEMORY_TYPE_CUDA) |
                                  UCS_BIT(UCS_MEMORY_TYPE_CUDA_MANAGED);
        caps->detect_mem_types  = UCS_BIT(UCS_MEMORY_TYPE_CUDA) |
                                  UCS_BIT(UCS_MEMORY_TYPE_CUDA_MANAGED);
    }
    /* A cache above (UCP's) may keep every registration: host memory
     * unmapped and CUDA memory freed invalidate rc_gdr's own regions, and a
     * reused address with a new buffer ID never hits a stale one. */
    caps->cache_mem_types  = caps->reg_mem_types;
    caps->alloc_mem_types  = 0;
    caps->gva_mem_types    = 0;
    caps->dmabuf_mem_types = 0; /* rc_gdr exports no DMA-BUF for others */
    /* No allocation of its own (no UCT_MD_FLAG_ALLOC), so no limit to
     * report: 0 would read as "nothing fits" to users that size transfers
     * by it (UCX's tests do). */
    caps->max_alloc        = SIZE_MAX;
    caps->max_reg          = md->dev_attr.max_mr_size;
    caps->rkey_packed_size = uct_rc_gdr_rkey_packed_size();
    /* Any address and length: the cache rounds to pages itself. */
    caps->reg_alignment    = 1;
    /* A cache hit costs a lookup; a miss an ibv_reg_mr (~us + per page). */
    caps->reg_cost         = ucs_linear_func_make(16.0e-6, 0.06e-9);
    caps->component_name   = UCT_RC_GDR_COMPONENT_NAME;
    /* The NIC's GUID names the device across processes. */
    caps->global_id        = (const char*)&md->dev_attr.node_guid;
    caps->global_id_length = sizeof(md->dev_attr.node_guid);
    uct_rc_gdr_md_local_cpus(&caps->local_cpus);
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


/* Access a GPU registration grants: only the directions the gate allows,
 * so the NIC itself enforces the policy. */
static int uct_rc_gdr_md_gpu_access(const uct_rc_gdr_md_gpu_t *gpu)
{
    int access = 0;

    if (UCT_RC_GDR_LANE_IS_GDR(gpu->lane[UCT_RC_GDR_DIR_NIC_WRITES_GPU])) {
        access |= IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                  IBV_ACCESS_REMOTE_ATOMIC;
    }
    /* Writes into a GPU that needs a read-flush are followed by a read of
     * a few bytes of this memory: the NIC must be able to make it even when
     * bulk reads bounce (the rkey's NO_READ flag keeps them off the NIC). */
    if (UCT_RC_GDR_LANE_IS_GDR(gpu->lane[UCT_RC_GDR_DIR_NIC_READS_GPU]) ||
        (gpu->flush_read &&
         UCT_RC_GDR_LANE_IS_GDR(gpu->lane[UCT_RC_GDR_DIR_NIC_WRITES_GPU]))) {
        access |= IBV_ACCESS_REMOTE_READ;
    }
    return access;
}


/* The mechanism both directions share: the gate picks it before it looks
 * at the direction policy. */
static uct_rc_gdr_lane_t
uct_rc_gdr_md_gpu_mechanism(const uct_rc_gdr_md_gpu_t *gpu,
                            uct_rc_gdr_cuda_mem_kind_t kind)
{
    uct_rc_gdr_lane_t lane = ucs_min(gpu->lane[UCT_RC_GDR_DIR_NIC_READS_GPU],
                                     gpu->lane[UCT_RC_GDR_DIR_NIC_WRITES_GPU]);

    if (!UCT_RC_GDR_LANE_IS_GDR(lane)) {
        return UCT_RC_GDR_LANE_BOUNCE;
    }

    /* Managed memory may migrate to the host under the NIC's feet, and a
     * stream-ordered pool cannot be exported as a DMA-BUF: such memory is
     * never registered as plain device memory. */
    if (kind == UCT_RC_GDR_CUDA_MEM_MANAGED) {
        return UCT_RC_GDR_LANE_BOUNCE;
    }
    if ((kind == UCT_RC_GDR_CUDA_MEM_POOL) &&
        (lane == UCT_RC_GDR_LANE_GDR_DMABUF)) {
        return UCT_RC_GDR_LANE_BOUNCE;
    }
    return lane;
}


static ucs_status_t uct_rc_gdr_md_reg_dmabuf(uct_rc_gdr_md_t *md,
                                             uct_rc_gdr_rcache_region_t *region,
                                             int access, struct ibv_mr **mr_p)
{
    size_t length = region->end - region->start;
    size_t offset, aligned_len;
    void *aligned_base;
    ucs_status_t status;
    struct ibv_mr *mr;
    int fd;

    /* The page-aligned range is exported; the offset locates the region in
     * it, so an interior address is not registered as its allocation's
     * start. The fd is closed at once: the MR keeps the attachment. */
    status = uct_rc_gdr_cuda_dmabuf_export((void*)region->start, length, 0,
                                           &fd, &offset, &aligned_base,
                                           &aligned_len);
    if (status != UCS_OK) {
        ucs_error("rc_gdr: %s: DMA-BUF export of %p..%p failed: %s", md->name,
                  (void*)region->start, (void*)region->end,
                  ucs_status_string(status));
        return status;
    }

    mr = ibv_reg_dmabuf_mr(md->pd, offset, length, region->start, fd, access);
    if (mr == NULL) {
        ucs_error("rc_gdr: %s: ibv_reg_dmabuf_mr(%p, %zu, offset %zu) "
                  "failed: %m", md->name, (void*)region->start, length,
                  offset);
        close(fd);
        return UCS_ERR_IO_ERROR;
    }

    close(fd);
    *mr_p = mr;
    return UCS_OK;
}


/*
 * Makes a region reachable by peers' bounce-lane messages. @a token 0: a
 * fresh one (a bounce registration has no NIC key to offer); otherwise the
 * region's NIC key, which its rkey already carries.
 */
static ucs_status_t uct_rc_gdr_md_token_add(uct_rc_gdr_md_t *md,
                                            uct_rc_gdr_rcache_region_t *region,
                                            uct_rc_gdr_mr_t *gdr_mr,
                                            uint32_t token)
{
    ucs_status_t status = UCS_OK;
    khiter_t iter;
    int ret;

    pthread_mutex_lock(&md->token_lock);
    if (token == 0) {
        do {
            token = ++md->next_token;
        } while ((token == 0) ||
                 (kh_get(uct_rc_gdr_token, &md->tokens, token) !=
                  kh_end(&md->tokens)));
    }

    iter = kh_put(uct_rc_gdr_token, &md->tokens, token, &ret);
    if (ret == -1) {
        status = UCS_ERR_NO_MEMORY;
    } else if (ret == 0) {
        ucs_error("rc_gdr: %s: NIC key 0x%x is already a bounce token",
                  md->name, token);
        status = UCS_ERR_ALREADY_EXISTS;
    } else {
        kh_value(&md->tokens, iter) = region;
        gdr_mr->token               = token;
    }
    pthread_mutex_unlock(&md->token_lock);
    return status;
}


ucs_status_t uct_rc_gdr_md_bounce_target(uct_rc_gdr_md_t *md, uint32_t token,
                                         uint64_t address, size_t length,
                                         int *gpu_p)
{
    uct_rc_gdr_rcache_region_t *region = NULL;
    ucs_status_t status                = UCS_ERR_INVALID_ADDR;
    khiter_t iter;

    pthread_mutex_lock(&md->token_lock);
    iter = kh_get(uct_rc_gdr_token, &md->tokens, token);
    if (iter != kh_end(&md->tokens)) {
        region = kh_value(&md->tokens, iter);
        if ((address >= region->start) && (address <= region->end) &&
            (length <= region->end - address)) {
            *gpu_p = ((uct_rc_gdr_mr_t*)
                      uct_rc_gdr_rcache_region_priv(region))->gpu;
            status = UCS_OK;
        }
    }
    pthread_mutex_unlock(&md->token_lock);

    if (status != UCS_OK) {
        ucs_error("rc_gdr: %s: a peer named %s bounce key 0x%x for "
                  "0x%" PRIx64 "+%zu: refused", md->name,
                  (region == NULL) ? "an unknown" : "a range outside its",
                  token, address, length);
    }
    return status;
}


static ucs_status_t
uct_rc_gdr_md_region_reg_gpu(uct_rc_gdr_md_t *md,
                             uct_rc_gdr_rcache_region_t *region,
                             uct_rc_gdr_mr_t *gdr_mr)
{
    uct_rc_gdr_cuda_mem_info_t info;
    const uct_rc_gdr_md_gpu_t *gpu;
    ucs_status_t status;
    struct ibv_mr *mr;
    int access;

    status = uct_rc_gdr_cuda_mem_query((void*)region->start,
                                       region->end - region->start, &info);
    if (status != UCS_OK) {
        return status;
    }

    if ((info.device_ordinal < 0) || (info.device_ordinal >= md->num_gpus)) {
        ucs_error("rc_gdr: %s: %p belongs to no known GPU (ordinal %d)",
                  md->name, (void*)region->start, info.device_ordinal);
        return UCS_ERR_INVALID_ADDR;
    }

    gpu             = &md->gpus[info.device_ordinal];
    gdr_mr->gpu     = info.device_ordinal;
    gdr_mr->lane    = uct_rc_gdr_md_gpu_mechanism(gpu, info.kind);
    gdr_mr->mr      = NULL;
    gdr_mr->token   = 0;
    gdr_mr->rkey_flags = UCT_RC_GDR_RKEY_FLAG_GPU |
                         (gpu->flush_read ? UCT_RC_GDR_RKEY_FLAG_FLUSH_READ :
                                            0);
    access          = uct_rc_gdr_md_gpu_access(gpu);

    /* A GPU buffer the NIC touches must see completed memory operations
     * in order with them (CU_POINTER_ATTRIBUTE_SYNC_MEMOPS). */
    uct_rc_gdr_cuda_set_sync_memops((void*)region->start);

    switch (gdr_mr->lane) {
    case UCT_RC_GDR_LANE_GDR_DMABUF:
        status = uct_rc_gdr_md_reg_dmabuf(md, region, access, &gdr_mr->mr);
        if (status != UCS_OK) {
            return status;
        }
        ++md->stats.dmabuf_regs;
        break;
    case UCT_RC_GDR_LANE_GDR_PEERMEM:
        mr = ibv_reg_mr(md->pd, (void*)region->start,
                        region->end - region->start, access);
        if (mr == NULL) {
            ucs_error("rc_gdr: %s: ibv_reg_mr of GPU memory %p..%p failed: "
                      "%m", md->name, (void*)region->start,
                      (void*)region->end);
            return UCS_ERR_IO_ERROR;
        }
        gdr_mr->mr = mr;
        ++md->stats.peermem_regs;
        break;
    default:
        /* A bounce registration succeeds without a NIC key, and says so in
         * its rkey: the bounce lane moves this memory. */
        status = uct_rc_gdr_md_token_add(md, region, gdr_mr, 0);
        if (status == UCS_OK) {
            ++md->stats.bounce_regs;
        }
        return status;
    }

    gdr_mr->rkey_flags |= UCT_RC_GDR_RKEY_FLAG_NIC;
    if (!UCT_RC_GDR_LANE_IS_GDR(gpu->lane[UCT_RC_GDR_DIR_NIC_READS_GPU])) {
        gdr_mr->rkey_flags |= UCT_RC_GDR_RKEY_FLAG_NO_READ;
    }
    if (!UCT_RC_GDR_LANE_IS_GDR(gpu->lane[UCT_RC_GDR_DIR_NIC_WRITES_GPU])) {
        gdr_mr->rkey_flags |= UCT_RC_GDR_RKEY_FLAG_NO_WRITE;
    }

    /* One direction only is the NIC's: peers bounce the other one, naming
     * the region by its NIC key. */
    if (gdr_mr->rkey_flags & (UCT_RC_GDR_RKEY_FLAG_NO_READ |
                              UCT_RC_GDR_RKEY_FLAG_NO_WRITE)) {
        status = uct_rc_gdr_md_token_add(md, region, gdr_mr,
                                         gdr_mr->mr->rkey);
        if (status != UCS_OK) {
            ibv_dereg_mr(gdr_mr->mr);
            gdr_mr->mr = NULL;
            return status;
        }
    }
    return UCS_OK;
}


static ucs_status_t
uct_rc_gdr_md_region_reg(void *arg, uct_rc_gdr_rcache_region_t *region)
{
    uct_rc_gdr_md_t *md     = arg;
    uct_rc_gdr_mr_t *gdr_mr = uct_rc_gdr_rcache_region_priv(region);
    ucs_status_t status;

    if (region->mem_type != UCS_MEMORY_TYPE_HOST) {
        return uct_rc_gdr_md_region_reg_gpu(md, region, gdr_mr);
    }

    status = uct_rc_gdr_md_reg_internal(md, (void*)region->start,
                                        region->end - region->start,
                                        &gdr_mr->mr);
    if (status != UCS_OK) {
        return status;
    }

    gdr_mr->rkey_flags = UCT_RC_GDR_RKEY_FLAG_NIC;
    gdr_mr->lane       = UCT_RC_GDR_LANE_GDR_PEERMEM; /* direct NIC access */
    gdr_mr->gpu        = -1;
    gdr_mr->token      = 0;
    ++md->stats.host_regs;
    return UCS_OK;
}


static void
uct_rc_gdr_md_region_dereg(void *arg, uct_rc_gdr_rcache_region_t *region)
{
    uct_rc_gdr_mr_t *gdr_mr = uct_rc_gdr_rcache_region_priv(region);
    uct_rc_gdr_md_t *md     = arg;
    khiter_t iter;
    int ret;

    if (gdr_mr->token != 0) {
        pthread_mutex_lock(&md->token_lock);
        iter = kh_get(uct_rc_gdr_token, &md->tokens, gdr_mr->token);
        if (iter != kh_end(&md->tokens)) {
            kh_del(uct_rc_gdr_token, &md->tokens, iter);
        }
        pthread_mutex_unlock(&md->token_lock);
        gdr_mr->token = 0;
    }

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


ucs_status_t uct_rc_gdr_md_reg(uct_md_h tl_md, void *address, size_t length,
                               uint64_t flags, uct_mem_h *memh_p)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(tl_md, uct_rc_gdr_md_t);
    uct_rc_gdr_cuda_mem_info_t info;
    uct_rc_gdr_rcache_region_t *region;
    ucs_status_t status;

    info.mem_type  = UCS_MEMORY_TYPE_HOST;
    info.buffer_id = 0;
    if (md->num_gpus > 0) {
        /* The buffer ID identifies the allocation: a reused address with a
         * new ID never hits the registration of a freed one. */
        status = uct_rc_gdr_cuda_mem_query(address, length, &info);
        if (status != UCS_OK) {
            return status;
        }
        if (info.kind == UCT_RC_GDR_CUDA_MEM_PINNED) {
            info.mem_type = UCS_MEMORY_TYPE_HOST;
        }
    }

    status = uct_rc_gdr_rcache_get(md->rcache, address, length,
                                   info.mem_type, info.buffer_id, &region);
    if (status != UCS_OK) {
        return status;
    }

    *memh_p = region;
    return UCS_OK;
}


ucs_status_t
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


ucs_status_t uct_rc_gdr_md_mem_info(uct_md_h tl_md, const void *address,
                                    size_t length,
                                    uct_rc_gdr_mem_info_t *mem_info)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(tl_md, uct_rc_gdr_md_t);
    uct_rc_gdr_cuda_mem_info_t info;
    ucs_status_t status;

    if (md->num_gpus == 0) {
        return UCS_ERR_UNSUPPORTED;
    }

    status = uct_rc_gdr_cuda_mem_query(address, length, &info);
    if (status != UCS_OK) {
        return status;
    }

    if (info.mem_type == UCS_MEMORY_TYPE_HOST) {
        /* Not ours to describe: UCP asks the next detecting md. */
        return UCS_ERR_INVALID_ADDR;
    }

    mem_info->mem_type     = info.mem_type;
    mem_info->sys_dev      = UCS_SYS_DEVICE_ID_UNKNOWN;
    mem_info->base_address = (info.base_address != NULL) ?
                             info.base_address : (void*)address;
    mem_info->alloc_length = (info.alloc_length != 0) ?
                             info.alloc_length : length;
    return UCS_OK;
}


ucs_status_t
uct_rc_gdr_md_detect_memory_type(uct_md_h tl_md, const void *address,
                                 size_t length, ucs_memory_type_t *mem_type_p)
{
    uct_rc_gdr_mem_info_t mem_info;
    ucs_status_t status;

    status = uct_rc_gdr_md_mem_info(tl_md, address, length, &mem_info);
    if (status != UCS_OK) {
        return status;
    }

    *mem_type_p = mem_info.mem_type;
    return UCS_OK;
}


ucs_status_t uct_rc_gdr_md_stats_query(uct_md_h tl_md,
                                       uct_rc_gdr_md_stats_t *stats)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(tl_md, uct_rc_gdr_md_t);
    uct_rc_gdr_rcache_stats_t rcache;

    if (stats->size != sizeof(*stats)) {
        return UCS_ERR_INVALID_PARAM; /* a caller built for another layout */
    }

    uct_rc_gdr_rcache_stats(md->rcache, &rcache);
    *stats               = md->stats;
    stats->size          = sizeof(*stats);
    stats->cache_hits    = rcache.hits;
    stats->cache_entries = rcache.entries;
    stats->invalidations = rcache.invalidations;
    stats->num_gpus      = md->num_gpus;
    stats->emulated_gpu  = md->emulated_gpu;
    return UCS_OK;
}


ucs_status_t uct_rc_gdr_md_pack(uct_md_h tl_md, uct_mem_h memh,
                                void *rkey_buffer)
{
    uct_rc_gdr_mr_t *gdr_mr = uct_rc_gdr_memh_mr(memh);
    uct_rc_gdr_rkey_t rkey;

    rkey.rkey  = (gdr_mr->mr == NULL) ? gdr_mr->token : gdr_mr->mr->rkey;
    rkey.flags = gdr_mr->rkey_flags;
    uct_rc_gdr_rkey_pack(&rkey, rkey_buffer);
    return UCS_OK;
}


ucs_status_t uct_rc_gdr_md_unpack(const void *rkey_buffer, uct_rkey_t *rkey_p,
                                  void **handle_p)
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


/* A remote key is its uct_rkey_t value (rc_gdr_addr.h): equal values are the
 * same key, flags included. */
int uct_rc_gdr_md_rkey_cmp(uct_rkey_t rkey1, uct_rkey_t rkey2)
{
    return (rkey1 > rkey2) ? 1 : (rkey1 < rkey2) ? -1 : 0;
}


static ucs_status_t
uct_rc_gdr_md_gate_config(const uct_rc_gdr_md_config_t *config,
                          uct_rc_gdr_gate_config_t *gate_config)
{
    const struct {
        const char *name;
        const char *value;
    } knobs[] = {
        {"MAX_DISTANCE",   config->max_distance},
        {"NIC_READS_GPU",  config->nic_reads_gpu},
        {"NIC_WRITES_GPU", config->nic_writes_gpu},
        {"REG_METHODS",    config->reg_methods},
        {"BOUNCE",         config->bounce},
        {"REQUIRE",        config->require}
    };
    ucs_status_t status;
    size_t i;

    uct_rc_gdr_gate_config_init(gate_config);
    for (i = 0; i < ucs_static_array_size(knobs); ++i) {
        status = uct_rc_gdr_gate_config_set(gate_config, knobs[i].name,
                                            knobs[i].value);
        if (status != UCS_OK) {
            return status; /* the parser named the value */
        }
    }
    return UCS_OK;
}


/*
 * Runs the capability chain for every GPU against this NIC: the lanes are
 * decided once, with evidence, and one line per GPU says which and why.
 */
static ucs_status_t
uct_rc_gdr_md_open_gpus(uct_rc_gdr_md_t *md,
                        const uct_rc_gdr_md_config_t *config)
{
    uct_rc_gdr_gate_config_t gate_config;
    uct_rc_gdr_flush_target_t flush_target;
    uct_rc_gdr_flush_why_t flush_why;
    uct_rc_gdr_gate_result_t *result;
    uct_rc_gdr_probe_gpu_t gpu;
    uct_rc_gdr_probe_nic_t nic;
    ucs_status_t status;
    int ordinal, count;
    uct_rc_gdr_dir_t dir;

    status = uct_rc_gdr_md_gate_config(config, &gate_config);
    if (status != UCS_OK) {
        return status;
    }

    if ((uct_rc_gdr_cuda_init() != UCS_OK) ||
        (uct_rc_gdr_cuda_device_count(&count) != UCS_OK) || (count == 0)) {
        ucs_debug("rc_gdr: %s: no CUDA driver or GPU: host memory only",
                  md->name);
        return UCS_OK;
    }

    md->gpus   = ucs_calloc(count, sizeof(*md->gpus), "rc_gdr_md_gpus");
    result     = ucs_malloc(sizeof(*result), "rc_gdr_gate_result");
    if ((md->gpus == NULL) || (result == NULL)) {
        status = UCS_ERR_NO_MEMORY;
        goto out;
    }

    for (ordinal = 0; ordinal < count; ++ordinal) {
        uct_rc_gdr_probe_gpu(ordinal, &gpu);
        /* Port 1 stands for the device: the mechanism is a property of the
         * device and its PCI function, not of one port. */
        uct_rc_gdr_probe_nic(md->ibv_ctx, md->pd, 1, &gpu, "/sys", &nic);
        status = uct_rc_gdr_probe_evaluate(&gpu, &nic, "/sys", &gate_config,
                                           result);
        uct_rc_gdr_gate_log(result);
        if (status != UCS_OK) {
            goto out; /* GDR required and refused: the log names the check */
        }

        for (dir = 0; dir < UCT_RC_GDR_DIR_LAST; ++dir) {
            md->gpus[ordinal].lane[dir] = result->lane[dir];
        }
        md->emulated_gpu |= gpu.facts.emulated;

        /* Whether writes into this GPU need a read before they are visible
         * travels to the writers in the rkey; UCX_RC_GDR_FLUSH (iface)
         * decides what they do with it. */
        uct_rc_gdr_flush_target_from_gpu(&gpu.attr, &flush_target);
        md->gpus[ordinal].flush_read =
                uct_rc_gdr_flush_read_needed(UCT_RC_GDR_FLUSH_AUTO,
                                             &flush_target, &flush_why);
        ucs_debug("rc_gdr: %s: writes into %s %s a read-flush (%s)", md->name,
                  gpu.name, md->gpus[ordinal].flush_read ? "need" :
                  "do not need", uct_rc_gdr_flush_why_str(flush_why));
    }

    md->num_gpus = count;
    status       = UCS_OK;

out:
    ucs_free(result);
    if (status != UCS_OK) {
        ucs_free(md->gpus);
        md->gpus = NULL;
    }
    return status;
}


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
    md->stats.size      = sizeof(md->stats);
    md->next_token      = (uint32_t)ucs_generate_uuid((uintptr_t)md);
    pthread_mutex_init(&md->token_lock, NULL);
    kh_init_inplace(uct_rc_gdr_token, &md->tokens);
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

    status = uct_rc_gdr_md_open_gpus(md,
                                     ucs_derived_of(config,
                                                    uct_rc_gdr_md_config_t));
    if (status != UCS_OK) {
        goto err_dealloc_pd;
    }

    rcache_params.page_size = ucs_get_page_size();
    rcache_params.priv_size = sizeof(uct_rc_gdr_mr_t);
    rcache_params.ops       = &uct_rc_gdr_md_rcache_ops;
    rcache_params.arg       = md;
    rcache_params.name      = md->name;
    status = uct_rc_gdr_rcache_create(&rcache_params, &md->rcache);
    if (status != UCS_OK) {
        goto err_free_gpus;
    }

    status = ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, 1000,
                                   uct_rc_gdr_md_vm_unmapped, md);
    if (status != UCS_OK) {
        ucs_error("rc_gdr: cannot subscribe to memory unmap events: %s",
                  ucs_status_string(status));
        goto err_destroy_rcache;
    }

    if (md->num_gpus > 0) {
        /* Without hooks, the buffer-ID check on every registration still
         * keeps a reused address off a stale MR; the hooks release the MR
         * of freed memory at once instead of at its last deregistration. */
        status = rc_gdr_ucm_cuda_install();
        if (status == UCS_OK) {
            status = rc_gdr_ucm_cuda_set_free_handler(uct_rc_gdr_md_cuda_freed,
                                                      md);
        }
        if (status != UCS_OK) {
            ucs_diag("rc_gdr: %s: no CUDA free events (%s): registrations of "
                     "freed GPU memory are released at deregistration",
                     md->name, ucs_status_string(status));
        }
    }

    ibv_free_device_list(devices);
    *md_p = &md->super;
    return UCS_OK;

err_destroy_rcache:
    uct_rc_gdr_rcache_destroy(md->rcache);
err_free_gpus:
    ucs_free(md->gpus);
err_dealloc_pd:
    ibv_dealloc_pd(md->pd);
err_close_device:
    ibv_close_device(md->ibv_ctx);
err_free_list:
    ibv_free_device_list(devices);
err_free_md:
    kh_destroy_inplace(uct_rc_gdr_token, &md->tokens);
    pthread_mutex_destroy(&md->token_lock);
    ucs_free(md);
    return status;
}
