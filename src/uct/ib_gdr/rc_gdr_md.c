/*
 * rc_gdr memory domain.
 *
 * mem_reg goes through the registration cache (rc_gdr_rcache.c): the memh a
 * user gets back is a cache handle of its own, on a region that every
 * registration it contains shares. Where the md learns when memory goes away
 * (unmap events for host memory; buffer IDs, and free hooks when they could
 * be installed, for CUDA memory), a region nobody holds stays cached for the
 * next registration, within UCX_RC_GDR_RCACHE_MAX_SIZE/_MAX_REGIONS; where
 * it does not, each registration is private and released at its
 * deregistration. The tokens by which peers name registered bytes are in
 * rc_gdr_md_token.c.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "rc_gdr_md.h"
#include "rc_gdr_addr.h"
#include "rc_gdr_cuda.h"
#include "rc_gdr_flush.h"
#include "rc_gdr_limits.h"
#include "rc_gdr_log.h"
#include "rc_gdr_probe.h"
#include "rc_gdr_topo.h"

#include <ucm/rc_gdr_ucm.h>

#include <ucm/api/ucm.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>


/* Unmap events reach the md after UCP's cache (500), like UCX's mds */
#define UCT_RC_GDR_MD_EVENT_PRIORITY 1000


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

    {"FORK_INIT", "try",
     "Make registered memory fork-safe with ibv_fork_init() (registered "
     "pages are not shared with a child, so the parent's copy-on-write "
     "cannot move them away from the NIC): try: a failure is logged at "
     "debug level (after other registrations it fails; kernels that pin "
     "fork-safely need none); yes: opening fails then; no: not called. "
     "Either way a forked child leaves the parent's registrations alone; an "
     "md the child opens itself gets the child's own memory events.",
     ucs_offsetof(uct_rc_gdr_md_config_t, fork_init),
     UCS_CONFIG_TYPE_TERNARY},

    {"RCACHE", "try",
     "Registration cache: keep registrations nobody holds for reuse, where "
     "the memory domain learns when memory goes away (unmap events for host "
     "memory, buffer IDs and free hooks for CUDA memory). try: host memory "
     "uncached when memory events are missing (UCX_MEM_EVENTS=no, valgrind); "
     "yes: opening fails then; no: every registration is its own.",
     ucs_offsetof(uct_rc_gdr_md_config_t, rcache), UCS_CONFIG_TYPE_TERNARY},

    {"RCACHE_MAX_SIZE", "16G",
     "Registration cache: total size of cached regions beyond which those "
     "nobody holds are released, least recently used first.",
     ucs_offsetof(uct_rc_gdr_md_config_t, rcache_max_size),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"RCACHE_MAX_REGIONS", "65536",
     "Registration cache: number of cached regions beyond which those nobody "
     "holds are released, least recently used first.",
     ucs_offsetof(uct_rc_gdr_md_config_t, rcache_max_regions),
     UCS_CONFIG_TYPE_ULUNITS},

    {"PCI_RELAXED_ORDERING", "auto",
     "PCIe relaxed ordering for the NIC's accesses to registered host and GPU "
     "memory (IBV_ACCESS_RELAXED_ORDERING): auto: where the verbs library and "
     "device take it, found by a test registration when the memory domain "
     "opens; yes: opening fails where they do not; no: never asked for.",
     ucs_offsetof(uct_rc_gdr_md_config_t, relaxed_order),
     UCS_CONFIG_TYPE_ON_OFF_AUTO},

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


/*
 * Counts the forks this process descends from, in the child of each. An md
 * opened before the last fork is the parent's: its registrations, cache and
 * lock. The child's own unmaps and frees must neither wait for a lock held
 * by a parent thread that does not exist in the child (a deadlock) nor
 * deregister the parent's MRs through the verbs context the child shares
 * with it. An md the child opens itself is the child's: its events are its
 * own, so its cache learns of the child's unmaps and frees like any other
 * (a cache left without them would hand out registrations pinned on pages
 * unmapped since).
 */
static unsigned uct_rc_gdr_md_fork_generation = 0;

static void uct_rc_gdr_md_atfork_child(void)
{
    ++uct_rc_gdr_md_fork_generation;
}

/* The md belongs to a process this one was forked from */
static UCS_F_ALWAYS_INLINE int
uct_rc_gdr_md_is_parents(const uct_rc_gdr_md_t *md)
{
    return md->fork_generation != uct_rc_gdr_md_fork_generation;
}

static void uct_rc_gdr_md_atfork_register(void)
{
    int ret = pthread_atfork(NULL, NULL, uct_rc_gdr_md_atfork_child);

    if (ret != 0) {
        ucs_warn("rc_gdr: pthread_atfork() failed: %s: a forked child may "
                 "block in a memory free hook", strerror(ret));
    }
}


/* Host memory unmapped: its registrations must not serve a later mapping. */
static void uct_rc_gdr_md_vm_unmapped(ucm_event_type_t event_type,
                                      ucm_event_t *event, void *arg)
{
    uct_rc_gdr_md_t *md = arg;

    if (ucs_unlikely(uct_rc_gdr_md_is_parents(md))) {
        return;
    }
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

    if (ucs_unlikely(uct_rc_gdr_md_is_parents(md))) {
        return;
    }
    uct_rc_gdr_rcache_invalidate(md->rcache, address, length);
}


/*
 * Fork safety before the first registration, as UCX's IB md: ibv_fork_init()
 * keeps registered pages out of children, and a child's hooks stay off the
 * parent's registrations (uct_rc_gdr_md_fork_generation).
 */
static ucs_status_t
uct_rc_gdr_md_open_fork(uct_rc_gdr_md_t *md,
                        const uct_rc_gdr_md_config_t *md_config)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    int ret;

    pthread_once(&once, uct_rc_gdr_md_atfork_register);
    md->fork_generation = uct_rc_gdr_md_fork_generation;
    if (md_config->fork_init == UCS_NO) {
        return UCS_OK;
    }

    ret = ibv_fork_init();
    if (ret == 0) {
        return UCS_OK;
    }

    if (md_config->fork_init == UCS_YES) {
        ucs_error("rc_gdr: %s: ibv_fork_init() failed: %s (UCX_RC_GDR_"
                  "FORK_INIT=yes; it fails once memory was registered before"
                  " it): set UCX_RC_GDR_FORK_INIT=try to continue", md->name,
                  strerror(ret));
        return UCS_ERR_IO_ERROR;
    }

    ucs_debug("rc_gdr: %s: ibv_fork_init() failed: %s; continuing, fork may "
              "be unsafe for registered memory", md->name, strerror(ret));
    return UCS_OK;
}


void uct_rc_gdr_md_close(uct_md_h tl_md)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(tl_md, uct_rc_gdr_md_t);
    const uint64_t *fallbacks = md->stats.fallbacks;

    /* What the run's registrations met, in one line: the per-cause
     * warnings said only the first of each */
    if ((fallbacks[UCT_RC_GDR_MD_REG_CAUSE_LIMIT] +
         fallbacks[UCT_RC_GDR_MD_REG_CAUSE_REFUSED] +
         fallbacks[UCT_RC_GDR_MD_REG_CAUSE_EXPORT] +
         md->stats.limit_retries) > 0) {
        ucs_diag("rc_gdr: %s: GPU registrations the NIC refused, carried by "
                 "the bounce lane: %" PRIu64 " at a resource limit, %" PRIu64
                 " refused by the mechanism, %" PRIu64 " DMA-BUF export "
                 "refused; %" PRIu64 " registrations retried after "
                 "releasing kept ones", md->name,
                 fallbacks[UCT_RC_GDR_MD_REG_CAUSE_LIMIT],
                 fallbacks[UCT_RC_GDR_MD_REG_CAUSE_REFUSED],
                 fallbacks[UCT_RC_GDR_MD_REG_CAUSE_EXPORT],
                 md->stats.limit_retries);
    }

    if (md->cuda_events) {
        rc_gdr_ucm_cuda_unset_free_handler(uct_rc_gdr_md_cuda_freed, md);
    }
    if (md->mem_events) {
        ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED,
                                uct_rc_gdr_md_vm_unmapped, md);
    }
    uct_rc_gdr_rcache_destroy(md->rcache);
    ucs_free(md->gpus);
    ibv_dealloc_pd(md->pd);
    ibv_close_device(md->ibv_ctx);
    uct_rc_gdr_md_token_cleanup(md);
    ucs_free(md);
}


/* Whether memory hooks may be installed: UCX_MEM_EVENTS=no (what a run
 * under valgrind sets) turns off ours as well as UCX's */
static int uct_rc_gdr_md_hooks_allowed(void)
{
    return ucm_global_opts.enable_events;
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
                             UCT_MD_FLAG_NEED_RKEY | UCT_MD_FLAG_ADVISE;
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
    /* A cache above (UCP's) may keep a registration it never deregisters
     * only where its memory going away is seen: host memory by the unmap
     * events that cache subscribes to itself, CUDA memory by the free events
     * that release rc_gdr's registration (and with it the NIC key and the
     * bounce token). The buffer-ID check serves only a registration made
     * later: without free events, a kept registration of freed GPU memory
     * would stay reachable by peers. */
    caps->cache_mem_types  = 0;
    if (uct_rc_gdr_md_hooks_allowed()) {
        caps->cache_mem_types |= UCS_BIT(UCS_MEMORY_TYPE_HOST);
    }
    if (md->cuda_events) {
        caps->cache_mem_types |= caps->reg_mem_types &
                                 (UCS_BIT(UCS_MEMORY_TYPE_CUDA) |
                                  UCS_BIT(UCS_MEMORY_TYPE_CUDA_MANAGED));
    }
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

    /* Sources of sends and writes need no access flag; destinations of
     * reads need local write. No peer ever names these buffers. */
    mr = ibv_reg_mr(md->pd, address, length,
                    IBV_ACCESS_LOCAL_WRITE | md->reg_access);
    if (mr == NULL) {
        ucs_error("rc_gdr: %s: ibv_reg_mr(%p, %zu) failed: %m", md->name,
                  address, length);
        return (errno == ENOMEM) ? UCS_ERR_NO_MEMORY : UCS_ERR_IO_ERROR;
    }

    *mr_p = mr;
    return UCS_OK;
}


/*
 * Access a GPU registration grants: only the directions the gate allows, so
 * the NIC itself enforces the policy. An atomic reads as well as writes.
 * (Writes into a GPU that needs a read-flush are never GDR without reads:
 * uct_rc_gdr_md_open_gpus() bounces them, so the flush read has its access.)
 */
static int uct_rc_gdr_md_gpu_access(const uct_rc_gdr_md_gpu_t *gpu)
{
    int writes = UCT_RC_GDR_LANE_IS_GDR(
            gpu->lane[UCT_RC_GDR_DIR_NIC_WRITES_GPU]);
    int reads  = UCT_RC_GDR_LANE_IS_GDR(
            gpu->lane[UCT_RC_GDR_DIR_NIC_READS_GPU]);
    int access = 0;

    if (writes) {
        access |= IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    }
    if (reads) {
        access |= IBV_ACCESS_REMOTE_READ;
    }
    if (reads && writes) {
        access |= IBV_ACCESS_REMOTE_ATOMIC;
    }
    return access;
}


/*
 * Verbs access of host memory: all of it, whatever the registration asked
 * for, as UCX's own IB md gives. UCP's memory cache in 1.13 to 1.16 hands a
 * registration made for one use (an eager send's local read) to any later
 * use of the same pages (a rendezvous peer's remote read) without asking the
 * md again; a narrower key then fails the peer, not the caller. Remote
 * writes and atomics need local write.
 */
#define UCT_RC_GDR_MD_HOST_ACCESS \
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)


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


/* What one failed registration attempt says: the cause and its detail */
typedef struct uct_rc_gdr_md_reg_error {
    uct_rc_gdr_md_reg_cause_t cause;
    char                      what[128];  /* "ibv_reg_mr: Cannot ..." */
} uct_rc_gdr_md_reg_error_t;


static const char *uct_rc_gdr_md_reg_cause_names[] = {
    [UCT_RC_GDR_MD_REG_CAUSE_LIMIT]   = "at a resource limit",
    [UCT_RC_GDR_MD_REG_CAUSE_REFUSED] = "refused by the mechanism",
    [UCT_RC_GDR_MD_REG_CAUSE_EXPORT]  = "DMA-BUF export refused"
};


static void uct_rc_gdr_md_reg_error_set(uct_rc_gdr_md_reg_error_t *error,
                                        const char *call, int err)
{
    error->cause = ((err == ENOMEM) || (err == EAGAIN)) ?
                   UCT_RC_GDR_MD_REG_CAUSE_LIMIT :
                   UCT_RC_GDR_MD_REG_CAUSE_REFUSED;
    ucs_snprintf_zero(error->what, sizeof(error->what), "%s: %s", call,
                      strerror(err));
}


/* One attempt: a DMA-BUF of the GPU range, or ibv_reg_mr on the address
 * (host memory, or GPU memory through peermem) */
static struct ibv_mr *
uct_rc_gdr_md_reg_attempt(uct_rc_gdr_md_t *md,
                          uct_rc_gdr_rcache_region_t *region,
                          uct_rc_gdr_lane_t lane, int access,
                          uct_rc_gdr_md_reg_error_t *error)
{
    size_t length = region->end - region->start;
    size_t offset, aligned_len;
    void *aligned_base;
    ucs_status_t status;
    struct ibv_mr *mr;
    int fd, err;

    access |= md->reg_access;
    if (lane != UCT_RC_GDR_LANE_GDR_DMABUF) {
        mr = ibv_reg_mr(md->pd, (void*)region->start, length, access);
        if (mr == NULL) {
            uct_rc_gdr_md_reg_error_set(error, "ibv_reg_mr", errno);
        }
        return mr;
    }

    /* The page-aligned range is exported; the offset locates the region in
     * it, so an interior address is not registered as its allocation's
     * start. The fd is closed at once: the MR keeps the attachment. */
    status = uct_rc_gdr_cuda_dmabuf_export((void*)region->start, length, 0,
                                           &fd, &offset, &aligned_base,
                                           &aligned_len);
    if (status != UCS_OK) {
        error->cause = UCT_RC_GDR_MD_REG_CAUSE_EXPORT;
        ucs_snprintf_zero(error->what, sizeof(error->what),
                          "DMA-BUF export: %s", ucs_status_string(status));
        return NULL;
    }

    mr  = ibv_reg_dmabuf_mr(md->pd, offset, length, region->start, fd,
                            access);
    err = errno;
    close(fd);
    if (mr == NULL) {
        uct_rc_gdr_md_reg_error_set(error, "ibv_reg_dmabuf_mr", err);
    }
    return mr;
}


/*
 * A NIC registration of the region. At a resource limit (the NIC's MR count,
 * the locked-memory limit, BAR1 space) the registrations nobody holds are
 * released first and it is tried once more: kept registrations are only an
 * optimisation, a registration that fails is not.
 */
static struct ibv_mr *
uct_rc_gdr_md_reg_nic(uct_rc_gdr_md_t *md, uct_rc_gdr_rcache_region_t *region,
                      uct_rc_gdr_lane_t lane, int access,
                      uct_rc_gdr_md_reg_error_t *error)
{
    struct ibv_mr *mr;

    mr = uct_rc_gdr_md_reg_attempt(md, region, lane, access, error);
    if ((mr != NULL) || (error->cause != UCT_RC_GDR_MD_REG_CAUSE_LIMIT) ||
        (uct_rc_gdr_rcache_evict_kept(md->rcache) == 0)) {
        return mr;
    }

    ++md->stats.limit_retries;
    ucs_debug("rc_gdr: %s: %s for %p..%p: released the kept registrations, "
              "trying again", md->name, error->what, (void*)region->start,
              (void*)region->end);
    return uct_rc_gdr_md_reg_attempt(md, region, lane, access, error);
}


/* The limits a registration that ran out of resources may have hit */
static void uct_rc_gdr_md_limits_str(uct_rc_gdr_md_t *md, int gpu, char *buf,
                                     size_t max)
{
    uct_rc_gdr_limit_t memlock;
    char memlock_str[32];

    uct_rc_gdr_limits_memlock(&memlock);
    ucs_snprintf_zero(buf, max, "the NIC's MR count (max_mr %d), "
                      "RLIMIT_MEMLOCK (%s)%s", md->dev_attr.max_mr,
                      uct_rc_gdr_limits_str(memlock.value, 1, memlock_str,
                                            sizeof(memlock_str)),
                      gpu ? " or the GPU's BAR1 space (rc_gdr_info shows "
                            "these)" : "");
}


/*
 * The NIC refused a GPU registration the gate allowed: the bounce lane
 * carries the memory where it may (gdr_mr left without a NIC key, and not
 * kept past its last handle: the next registration asks the NIC again),
 * else the registration fails, naming the cause. One line per cause says
 * so; later ones are counted (md stats), not logged.
 */
static ucs_status_t
uct_rc_gdr_md_reg_gpu_failed(uct_rc_gdr_md_t *md,
                             uct_rc_gdr_rcache_region_t *region,
                             uct_rc_gdr_mr_t *gdr_mr,
                             const uct_rc_gdr_md_reg_error_t *error)
{
    const char *cause = uct_rc_gdr_md_reg_cause_names[error->cause];
    char limits[192]  = "";

    if (error->cause == UCT_RC_GDR_MD_REG_CAUSE_LIMIT) {
        uct_rc_gdr_md_limits_str(md, 1, limits, sizeof(limits));
    }

    if (!md->bounce_fallback) {
        ucs_error("rc_gdr: %s: %s registration of GPU%d memory %p..%p "
                  "failed, %s (%s%s%s); the bounce lane is not allowed "
                  "(%s, %s)", md->name,
                  uct_rc_gdr_gate_lane_name(gdr_mr->lane), gdr_mr->gpu,
                  (void*)region->start, (void*)region->end, cause,
                  error->what, (limits[0] != '\0') ? ": " : "", limits,
                  UCT_RC_GDR_KNOB_BOUNCE, UCT_RC_GDR_KNOB_REQUIRE);
        return (error->cause == UCT_RC_GDR_MD_REG_CAUSE_LIMIT) ?
               UCS_ERR_NO_MEMORY : UCS_ERR_IO_ERROR;
    }

    ++md->stats.fallbacks[error->cause];
    if (!(md->causes_logged & UCS_BIT(error->cause))) {
        md->causes_logged |= UCS_BIT(error->cause);
        ucs_warn("rc_gdr: %s: %s registration of GPU%d memory %p..%p "
                 "failed, %s (%s%s%s): the bounce lane carries it; further "
                 "registrations failing so are counted, not logged", md->name,
                 uct_rc_gdr_gate_lane_name(gdr_mr->lane), gdr_mr->gpu,
                 (void*)region->start, (void*)region->end, cause,
                 error->what, (limits[0] != '\0') ? ": " : "", limits);
    } else {
        ucs_debug("rc_gdr: %s: GPU%d memory %p..%p: %s (%s), bounce lane",
                  md->name, gdr_mr->gpu, (void*)region->start,
                  (void*)region->end, cause, error->what);
    }
    uct_rc_gdr_rcache_region_no_keep(region);
    gdr_mr->mr = NULL;
    return UCS_OK;
}


static ucs_status_t
uct_rc_gdr_md_region_reg_gpu(uct_rc_gdr_md_t *md,
                             uct_rc_gdr_rcache_region_t *region,
                             uct_rc_gdr_mr_t *gdr_mr)
{
    uct_rc_gdr_md_reg_error_t error;
    uct_rc_gdr_cuda_mem_info_t info;
    const uct_rc_gdr_md_gpu_t *gpu;
    ucs_status_t status;
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
    gdr_mr->lkey    = 0;
    gdr_mr->token   = 0;
    gdr_mr->rkey_flags = UCT_RC_GDR_RKEY_FLAG_GPU |
                         (gpu->flush_read ? UCT_RC_GDR_RKEY_FLAG_FLUSH_READ :
                                            0);
    access          = uct_rc_gdr_md_gpu_access(gpu);

    /* A GPU buffer the NIC touches must see completed memory operations
     * in order with them (CU_POINTER_ATTRIBUTE_SYNC_MEMOPS). */
    uct_rc_gdr_cuda_set_sync_memops((void*)region->start);

    if (UCT_RC_GDR_LANE_IS_GDR(gdr_mr->lane)) {
        gdr_mr->mr = uct_rc_gdr_md_reg_nic(md, region, gdr_mr->lane, access,
                                           &error);
        if (gdr_mr->mr == NULL) {
            status = uct_rc_gdr_md_reg_gpu_failed(md, region, gdr_mr,
                                                  &error);
            if (status != UCS_OK) {
                return status;
            }
        } else if (gdr_mr->lane == UCT_RC_GDR_LANE_GDR_DMABUF) {
            ++md->stats.dmabuf_regs;
        } else {
            ++md->stats.peermem_regs;
        }
    }

    if (gdr_mr->mr == NULL) {
        /* A bounce registration succeeds without a NIC key, and says so in
         * its rkey: the bounce lane moves this memory. Each registration of
         * it gets a token of its own (uct_rc_gdr_md_mem_reg). */
        gdr_mr->lane       = UCT_RC_GDR_LANE_BOUNCE;
        gdr_mr->registered = 1;
        ++md->stats.bounce_regs;
        return UCS_OK;
    }

    gdr_mr->lkey = gdr_mr->mr->lkey;
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
        uct_rc_gdr_rcache_region_track(region);
        status = uct_rc_gdr_md_token_add(md, gdr_mr->mr->rkey, 0, region,
                                         &gdr_mr->token);
        if (status != UCS_OK) {
            ibv_dereg_mr(gdr_mr->mr);
            gdr_mr->mr = NULL;
            return status;
        }
    }

    gdr_mr->registered = 1;
    return UCS_OK;
}


static ucs_status_t
uct_rc_gdr_md_region_reg(void *arg, uct_rc_gdr_rcache_region_t *region)
{
    uct_rc_gdr_md_t *md     = arg;
    uct_rc_gdr_mr_t *gdr_mr = uct_rc_gdr_rcache_region_priv(region);
    char limits[192]        = "";
    uct_rc_gdr_md_reg_error_t error;

    if (region->mem_type != UCS_MEMORY_TYPE_HOST) {
        return uct_rc_gdr_md_region_reg_gpu(md, region, gdr_mr);
    }

    /* All access (UCT_RC_GDR_MD_HOST_ACCESS): one key serves every use */
    gdr_mr->mr = uct_rc_gdr_md_reg_nic(md, region,
                                       UCT_RC_GDR_LANE_GDR_PEERMEM,
                                       region->access, &error);
    if (gdr_mr->mr == NULL) {
        if (error.cause == UCT_RC_GDR_MD_REG_CAUSE_LIMIT) {
            uct_rc_gdr_md_limits_str(md, 0, limits, sizeof(limits));
        }
        ucs_error("rc_gdr: %s: registration of %p..%p (access 0x%x) failed, "
                  "%s (%s%s%s)", md->name, (void*)region->start,
                  (void*)region->end, region->access,
                  uct_rc_gdr_md_reg_cause_names[error.cause], error.what,
                  (limits[0] != '\0') ? ": " : "", limits);
        return (error.cause == UCT_RC_GDR_MD_REG_CAUSE_LIMIT) ?
               UCS_ERR_NO_MEMORY : UCS_ERR_IO_ERROR;
    }

    gdr_mr->rkey_flags = UCT_RC_GDR_RKEY_FLAG_NIC;
    gdr_mr->lkey       = gdr_mr->mr->lkey;
    gdr_mr->lane       = UCT_RC_GDR_LANE_GDR_PEERMEM; /* direct NIC access */
    gdr_mr->gpu        = -1;
    gdr_mr->token      = 0;
    gdr_mr->registered = 1;
    ++md->stats.host_regs;
    return UCS_OK;
}


static void
uct_rc_gdr_md_region_dereg(void *arg, uct_rc_gdr_rcache_region_t *region)
{
    uct_rc_gdr_mr_t *gdr_mr = uct_rc_gdr_rcache_region_priv(region);
    uct_rc_gdr_md_t *md     = arg;
    int ret;

    /* Under the cache lock: no peer request passes the token check after
     * this, and the per-registration tokens of a bounce registration see
     * it released */
    gdr_mr->registered = 0;
    ++md->stats.deregs;
    if (gdr_mr->token != 0) {
        uct_rc_gdr_md_token_del(md, gdr_mr->token);
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


/*
 * A GPU registration covers its CUDA allocation or less: the NIC (peermem)
 * or the bounce lane, which falls back when the NIC refuses, would
 * otherwise let peers reach the neighbouring allocation through its key.
 */
static ucs_status_t
uct_rc_gdr_md_gpu_range_check(uct_rc_gdr_md_t *md, void *address,
                              size_t length,
                              const uct_rc_gdr_cuda_mem_info_t *info)
{
    ucs_status_t status;
    uintptr_t end;

    status = uct_rc_gdr_cuda_mem_range_check(address, length, info, &end);
    if (status == UCS_ERR_UNSUPPORTED) {
        ucs_error("rc_gdr: %s: registration of %p+%zu refused: the CUDA "
                  "driver does not tell the allocation's range "
                  "(cuMemGetAddressRange), so it cannot be checked",
                  md->name, address, length);
        return UCS_ERR_INVALID_ADDR;
    } else if (status != UCS_OK) {
        ucs_error("rc_gdr: %s: registration of %p+%zu refused: it leaves "
                  "the GPU%d %s allocation %p..%p (mapped memory ends at "
                  "%p)", md->name, address, length, info->device_ordinal,
                  uct_rc_gdr_cuda_mem_kind_str(info->kind),
                  info->base_address,
                  UCS_PTR_BYTE_OFFSET(info->base_address, info->alloc_length),
                  (void*)end);
        return UCS_ERR_INVALID_ADDR;
    }

    return UCS_OK;
}


ucs_status_t uct_rc_gdr_md_reg(uct_md_h tl_md, void *address, size_t length,
                               uint64_t flags, uct_mem_h *memh_p)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(tl_md, uct_rc_gdr_md_t);
    uct_rc_gdr_rcache_handle_t handle;
    uct_rc_gdr_cuda_mem_info_t info;
    uct_rc_gdr_rcache_key_t key;
    uct_rc_gdr_rcache_ref_t *ref;
    uct_rc_gdr_mr_t *gdr_mr;
    ucs_status_t status;
    uint64_t token;

    if (length > md->dev_attr.max_mr_size) {
        ucs_error("rc_gdr: %s: registration of %zu bytes at %p exceeds "
                  "max_reg, the device's largest registration (max_mr_size "
                  "%" PRIu64 "): register it in parts", md->name, length,
                  address, (uint64_t)md->dev_attr.max_mr_size);
        return UCS_ERR_EXCEEDS_LIMIT;
    }

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
        } else if (info.mem_type != UCS_MEMORY_TYPE_HOST) {
            status = uct_rc_gdr_md_gpu_range_check(md, address, length,
                                                   &info);
            if (status != UCS_OK) {
                return status;
            }
        }
    }

    /* Host memory gets the access asked for; GPU memory what the direction
     * policy allows, the same for every registration of it */
    key.buffer_id = info.buffer_id;
    key.mem_type  = info.mem_type;
    if (info.mem_type == UCS_MEMORY_TYPE_HOST) {
        key.access = UCT_RC_GDR_MD_HOST_ACCESS;
        key.flags  = md->rcache_host_flags;
    } else {
        key.access = 0;
        key.flags  = md->rcache_gpu_flags;
    }

    status = uct_rc_gdr_rcache_get(md->rcache, address, length, key,
                                   &handle);
    if (status != UCS_OK) {
        return status;
    }

    /* A bounce registration: a token for these bytes alone, which its
     * rkey carries instead of a NIC key (the lane is set once, at the
     * region's registration) */
    ref    = uct_rc_gdr_rcache_handle_ref(handle);
    gdr_mr = uct_rc_gdr_rcache_region_priv(ref->region);
    if (gdr_mr->lane == UCT_RC_GDR_LANE_BOUNCE) {
        uct_rc_gdr_rcache_lock(md->rcache);
        status = uct_rc_gdr_md_token_add(md, 0, handle, NULL, &token);
        if (status == UCS_OK) {
            ref->priv = token;
        }
        uct_rc_gdr_rcache_unlock(md->rcache);
        if (status != UCS_OK) {
            uct_rc_gdr_rcache_put(md->rcache, handle);
            return status;
        }
    }

    *memh_p = (uct_mem_h)(uintptr_t)handle;
    return UCS_OK;
}


ucs_status_t
uct_rc_gdr_md_mem_dereg(uct_md_h tl_md, const uct_md_mem_dereg_params_t *params)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(tl_md, uct_rc_gdr_md_t);
    uct_rc_gdr_rcache_handle_t handle;
    uct_rc_gdr_rcache_ref_t *ref;
    ucs_status_t status;

    if (!(params->field_mask & UCT_MD_MEM_DEREG_FIELD_MEMH) ||
        (params->memh == UCT_MEM_HANDLE_NULL)) {
        ucs_error("rc_gdr: mem_dereg without a memory handle");
        return UCS_ERR_INVALID_PARAM;
    }

    if ((params->field_mask & UCT_MD_MEM_DEREG_FIELD_FLAGS) &&
        (params->flags & UCT_MD_MEM_DEREG_FLAG_INVALIDATE)) {
        return UCS_ERR_UNSUPPORTED;
    }

    /* The handle's generation tells a live registration from a stale or
     * repeated one; the cache refuses the latter and touches nothing */
    handle = (uintptr_t)params->memh;
    uct_rc_gdr_rcache_lock(md->rcache);
    ref = uct_rc_gdr_rcache_handle_check(md->rcache, handle);
    if ((ref != NULL) && (ref->priv != 0)) {
        uct_rc_gdr_md_token_del(md, ref->priv);
    }
    status = uct_rc_gdr_rcache_put(md->rcache, handle);
    uct_rc_gdr_rcache_unlock(md->rcache);
    return status;
}


/*
 * Advice on a registration. Its pages stay pinned while it lives, so
 * WILLNEED (the only advice UCT has) holds already: as UCX's ib md answers
 * for memory without on-demand paging. The handle and the range are checked
 * as for a deregistration.
 */
ucs_status_t uct_rc_gdr_md_mem_advise(uct_md_h tl_md, uct_mem_h memh,
                                      void *address, size_t length,
                                      unsigned advice)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(tl_md, uct_rc_gdr_md_t);
    uct_rc_gdr_rcache_ref_t *ref;
    uintptr_t start     = (uintptr_t)address;
    int inside;

    uct_rc_gdr_rcache_lock(md->rcache);
    ref    = uct_rc_gdr_rcache_handle_check(md->rcache, (uintptr_t)memh);
    inside = (ref != NULL) && (start >= ref->address) &&
             (start - ref->address <= ref->length) &&
             (length <= ref->length - (start - ref->address));
    uct_rc_gdr_rcache_unlock(md->rcache);

    if (ref == NULL) {
        ucs_error("rc_gdr: mem_advise: memory handle %p is not registered",
                  memh);
        return UCS_ERR_INVALID_PARAM;
    }

    if (!inside) {
        ucs_error("rc_gdr: mem_advise: %p..%p is outside the registration",
                  address, UCS_PTR_BYTE_OFFSET(address, length));
        return UCS_ERR_INVALID_PARAM;
    }

    return (advice == UCT_MADV_WILLNEED) ? UCS_OK : UCS_ERR_UNSUPPORTED;
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
    /* Device memory lives on one GPU; managed memory may migrate, so it is
     * nowhere in particular (as UCX's cuda_copy says without a preferred
     * location) */
    mem_info->sys_dev      = ((info.mem_type == UCS_MEMORY_TYPE_CUDA) &&
                              (info.device_ordinal >= 0) &&
                              (info.device_ordinal < md->num_gpus)) ?
                             md->gpus[info.device_ordinal].sys_dev :
                             UCS_SYS_DEVICE_ID_UNKNOWN;
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
    size_t size         = stats->size;
    uct_rc_gdr_rcache_stats_t rcache;
    uct_rc_gdr_md_stats_t all;

    /* A caller built before fields were appended gets the ones it knows */
    if ((size > sizeof(*stats)) || (size < sizeof(uint64_t)) ||
        (size % sizeof(uint64_t))) {
        return UCS_ERR_INVALID_PARAM; /* a caller built for another layout */
    }

    uct_rc_gdr_rcache_stats(md->rcache, &rcache);
    uct_rc_gdr_rcache_lock(md->rcache);
    all                 = md->stats;
    uct_rc_gdr_rcache_unlock(md->rcache);
    all.size            = size;
    all.cache_hits      = rcache.hits;
    all.cache_entries   = rcache.entries;
    all.invalidations   = rcache.invalidations;
    all.num_gpus        = md->num_gpus;
    all.emulated_gpu    = md->emulated_gpu;
    all.cache_misses    = rcache.misses;
    all.cache_kept      = rcache.cached;
    all.cache_evictions = rcache.evictions;
    all.host_cache      = md->rcache_host_flags;
    all.gpu_cache       = md->rcache_gpu_flags;
    memcpy(stats, &all, size);
    return UCS_OK;
}


ucs_status_t uct_rc_gdr_md_pack(uct_md_h tl_md, uct_mem_h memh,
                                void *rkey_buffer)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(tl_md, uct_rc_gdr_md_t);
    uct_rc_gdr_rcache_ref_t *ref;
    uct_rc_gdr_mr_t *gdr_mr;
    uct_rc_gdr_rkey_t rkey;

    uct_rc_gdr_rcache_lock(md->rcache);
    ref = uct_rc_gdr_rcache_handle_check(md->rcache, (uintptr_t)memh);
    if (ref == NULL) {
        uct_rc_gdr_rcache_unlock(md->rcache);
        ucs_error("rc_gdr: %s: mkey_pack of memory handle %p which is not a"
                  " live registration", md->name, memh);
        return UCS_ERR_INVALID_PARAM;
    }

    /* A bounce registration's key is its own token: the bytes registered;
     * a one-direction region's token is its NIC key below random bits */
    gdr_mr = uct_rc_gdr_rcache_region_priv(ref->region);
    if (gdr_mr->mr == NULL) {
        rkey.rkey     = (uint32_t)ref->priv;
        rkey.token_hi = (uint32_t)(ref->priv >> 32);
    } else {
        rkey.rkey     = gdr_mr->mr->rkey;
        rkey.token_hi = (uint32_t)(gdr_mr->token >> 32);
    }
    rkey.flags = gdr_mr->rkey_flags;
    uct_rc_gdr_rcache_unlock(md->rcache);
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
 * NIC writes into a GPU that needs a read-flush are visible only after the
 * NIC reads it; where the direction policy forbids NIC reads, its
 * registrations carry no remote read (least access), so such writes take the
 * bounce lane too, said in one line. UCX_RC_GDR_REQUIRE=gdr refuses instead.
 */
static ucs_status_t
uct_rc_gdr_md_gpu_flush_lane(uct_rc_gdr_md_t *md, uct_rc_gdr_md_gpu_t *gpu,
                             const char *gpu_name,
                             const uct_rc_gdr_gate_config_t *gate_config)
{
    if (!gpu->flush_read ||
        !UCT_RC_GDR_LANE_IS_GDR(gpu->lane[UCT_RC_GDR_DIR_NIC_WRITES_GPU]) ||
        UCT_RC_GDR_LANE_IS_GDR(gpu->lane[UCT_RC_GDR_DIR_NIC_READS_GPU])) {
        return UCS_OK;
    }

    if (gate_config->require == UCT_RC_GDR_REQUIRE_GDR) {
        ucs_error("rc_gdr: %s <-> %s NIC-writes-GPU refused: writes into %s "
                  "need a read-flush and %s keeps the NIC from reading it; "
                  "HINT: %s=no does not combine with %s=gdr on this GPU",
                  gpu_name, md->name, gpu_name, UCT_RC_GDR_KNOB_NIC_READS_GPU,
                  UCT_RC_GDR_KNOB_NIC_READS_GPU, UCT_RC_GDR_KNOB_REQUIRE);
        return UCS_ERR_UNSUPPORTED;
    }

    if (gpu->lane[UCT_RC_GDR_DIR_NIC_READS_GPU] == UCT_RC_GDR_LANE_REFUSED) {
        gpu->lane[UCT_RC_GDR_DIR_NIC_WRITES_GPU] = UCT_RC_GDR_LANE_REFUSED;
    } else {
        gpu->lane[UCT_RC_GDR_DIR_NIC_WRITES_GPU] = UCT_RC_GDR_LANE_BOUNCE;
    }
    ucs_diag("rc_gdr: %s <-> %s NIC-writes-GPU uses the %s lane: writes into "
             "%s need a read-flush and %s=no keeps the NIC from reading it",
             gpu_name, md->name,
             (gpu->lane[UCT_RC_GDR_DIR_NIC_WRITES_GPU] ==
              UCT_RC_GDR_LANE_BOUNCE) ? "bounce" : "no",
             gpu_name, UCT_RC_GDR_KNOB_NIC_READS_GPU);
    return UCS_OK;
}


/*
 * PCIe relaxed ordering lets the NIC's writes to memory pass each other on
 * the way (the completion, written without it, still comes after them): a
 * faster path into host memory and GPUs on many root complexes. Asked for
 * where it is taken, proven once by a registration; yes where it is not is
 * an error, not a silent no.
 */
static ucs_status_t
uct_rc_gdr_md_open_relaxed_order(uct_rc_gdr_md_t *md,
                                 const uct_rc_gdr_md_config_t *md_config)
{
    int err;

    md->reg_access = 0;
    if (md_config->relaxed_order == UCS_CONFIG_OFF) {
        ucs_debug("rc_gdr: %s: relaxed ordering off "
                  "(UCX_RC_GDR_PCI_RELAXED_ORDERING=no)", md->name);
        return UCS_OK;
    }

    err = uct_rc_gdr_probe_relaxed_order(md->pd);
    if (err == 0) {
        md->reg_access = IBV_ACCESS_RELAXED_ORDERING;
        ucs_debug("rc_gdr: %s: registrations use relaxed ordering", md->name);
        return UCS_OK;
    }

    if (md_config->relaxed_order == UCS_CONFIG_ON) {
        ucs_error("rc_gdr: %s: UCX_RC_GDR_PCI_RELAXED_ORDERING=yes, but the "
                  "device refuses IBV_ACCESS_RELAXED_ORDERING (ibv_reg_mr: "
                  "%s); HINT: set it to auto or no", md->name, strerror(err));
        return UCS_ERR_UNSUPPORTED;
    }

    ucs_debug("rc_gdr: %s: relaxed ordering off: the device refuses it "
              "(ibv_reg_mr: %s)", md->name, strerror(err));
    return UCS_OK;
}


/*
 * Where a PCI function is in UCX's topology, named as UCX's own transports
 * name it: UCP's lane ranking reads the distance between the memory's and
 * the lane's system devices (ucs_topo_get_distance), so a GPU's traffic
 * goes to the NIC nearest it without rc_gdr choosing anything itself.
 */
static ucs_sys_device_t uct_rc_gdr_md_sys_dev(const char *what,
                                              const char *bdf,
                                              const char *name, int nic)
{
    ucs_sys_bus_id_t bus_id;
    ucs_sys_device_t sys_dev;
    ucs_status_t status;

    status = uct_rc_gdr_topo_bus_id_parse(bdf, &bus_id);
    if (status == UCS_OK) {
        status = ucs_topo_find_device_by_bus_id(&bus_id, &sys_dev);
    }
    if (status != UCS_OK) {
        ucs_debug("rc_gdr: %s %s at %s: no system device (%s)", what, name,
                  bdf, ucs_status_string(status));
        return UCS_SYS_DEVICE_ID_UNKNOWN;
    }

    uct_rc_gdr_glue_sys_dev_set_name(sys_dev, name, nic);
    ucs_debug("rc_gdr: %s %s at %s is system device %d", what, name, bdf,
              sys_dev);
    return sys_dev;
}

/* The GPU by the driver's PCI domain, bus and device numbers, as UCX's CUDA
 * transports place theirs */
static ucs_sys_device_t
uct_rc_gdr_md_gpu_sys_dev(const uct_rc_gdr_cuda_dev_attr_t *attr)
{
    char bdf[UCT_RC_GDR_BDF_MAX];
    char name[16];

    if (!(attr->valid_mask & UCT_RC_GDR_CUDA_DEV_ATTR_PCI_LOCATION)) {
        ucs_debug("rc_gdr: GPU%d: the driver gives no PCI location",
                  attr->ordinal);
        return UCS_SYS_DEVICE_ID_UNKNOWN;
    }

    ucs_snprintf_zero(bdf, sizeof(bdf), "%04x:%02x:%02x.0", attr->pci_domain,
                      attr->pci_bus, attr->pci_device);
    ucs_snprintf_zero(name, sizeof(name), "GPU%d", attr->ordinal);
    return uct_rc_gdr_md_sys_dev("GPU", bdf, name, 0);
}

/* The NIC by the PCI function behind its verbs device in sysfs; rxe and siw
 * have none, and stay unknown as they do for UCX's IB transports */
static void uct_rc_gdr_md_open_sys_dev(uct_rc_gdr_md_t *md,
                                       struct ibv_device *device)
{
    char bdf[UCT_RC_GDR_BDF_MAX];
    ucs_status_t status;

    status = uct_rc_gdr_topo_ibdev_bdf(device->ibdev_path, bdf, sizeof(bdf));
    if (status != UCS_OK) {
        ucs_debug("rc_gdr: %s: no PCI function behind %s/device (%s): system"
                  " device unknown", md->name, device->ibdev_path,
                  ucs_status_string(status));
        md->sys_dev = UCS_SYS_DEVICE_ID_UNKNOWN;
        return;
    }

    md->sys_dev = uct_rc_gdr_md_sys_dev("NIC", bdf, md->name, 1);
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
        md->gpus[ordinal].sys_dev = uct_rc_gdr_md_gpu_sys_dev(&gpu.attr);

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

        status = uct_rc_gdr_md_gpu_flush_lane(md, &md->gpus[ordinal],
                                              gpu.name, &gate_config);
        if (status != UCS_OK) {
            goto out;
        }
    }

    md->num_gpus        = count;
    md->bounce_fallback = gate_config.bounce &&
                          (gate_config.require != UCT_RC_GDR_REQUIRE_GDR);
    status              = UCS_OK;

out:
    ucs_free(result);
    if (status != UCS_OK) {
        ucs_free(md->gpus);
        md->gpus = NULL;
    }
    return status;
}


/*
 * How far the registration cache may go, from what tells the md that memory
 * went away (doc/DESIGN.md section 2): host memory is shared and kept only with
 * unmap events, GPU memory on its buffer IDs (checked at every
 * registration), the CUDA free hooks releasing freed memory at once when
 * they can be installed. One line says what came of it.
 */
static ucs_status_t
uct_rc_gdr_md_open_events(uct_rc_gdr_md_t *md,
                          const uct_rc_gdr_md_config_t *md_config)
{
    const unsigned cached = UCT_RC_GDR_RCACHE_GET_FLAG_SHARE |
                            UCT_RC_GDR_RCACHE_GET_FLAG_RETAIN;
    ucs_status_t status, cuda_status = UCS_ERR_UNSUPPORTED;
    ucs_log_level_t level = UCS_LOG_LEVEL_DEBUG;
    char host[128], gpu[128];

    if (md_config->rcache == UCS_NO) {
        ucs_debug("rc_gdr: %s: registration cache off (UCX_RC_GDR_RCACHE=no):"
                  " every registration is its own", md->name);
        return UCS_OK;
    }

    status = ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED,
                                   UCT_RC_GDR_MD_EVENT_PRIORITY,
                                   uct_rc_gdr_md_vm_unmapped, md);
    if (status == UCS_OK) {
        md->mem_events        = 1;
        md->rcache_host_flags = cached;
        ucs_snprintf_zero(host, sizeof(host), "cached (unmap events)");
    } else if (md_config->rcache == UCS_YES) {
        ucs_error("rc_gdr: %s: UCX_RC_GDR_RCACHE=yes, but memory unmap events"
                  " are not available (%s; UCX_MEM_EVENTS=%s): set "
                  "UCX_RC_GDR_RCACHE=try to run without caching host memory",
                  md->name, ucs_status_string(status),
                  ucm_global_opts.enable_events ? "yes" : "no");
        return status;
    } else {
        level = UCS_LOG_LEVEL_DIAG;
        ucs_snprintf_zero(host, sizeof(host),
                          "uncached: no memory unmap events (%s%s)",
                          ucs_status_string(status),
                          ucm_global_opts.enable_events ? "" :
                          ", UCX_MEM_EVENTS=no");
    }

    if (md->num_gpus > 0) {
        /* The buffer-ID check on every registration keeps a reused address
         * off a stale MR; the hooks release the MR of freed memory at once
         * instead of when the cache evicts it. */
        md->rcache_gpu_flags = cached;
        if (uct_rc_gdr_md_hooks_allowed()) {
            cuda_status = rc_gdr_ucm_cuda_install();
            if (cuda_status == UCS_OK) {
                cuda_status = rc_gdr_ucm_cuda_set_free_handler(
                        uct_rc_gdr_md_cuda_freed, md);
            }
        }
        md->cuda_events = (cuda_status == UCS_OK);
        ucs_snprintf_zero(gpu, sizeof(gpu), "cached by buffer ID%s%s%s",
                          md->cuda_events ? " and free hooks" :
                          ", no free hooks (",
                          md->cuda_events ? "" :
                          ucs_status_string(cuda_status),
                          md->cuda_events ? "" : ")");
    } else {
        ucs_snprintf_zero(gpu, sizeof(gpu), "none");
    }

    ucs_log(level, "rc_gdr: %s: registration cache: host memory %s, GPU "
            "memory %s; up to %lu regions, %zu bytes kept", md->name, host,
            gpu, md_config->rcache_max_regions, md_config->rcache_max_size);
    return UCS_OK;
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
    const uct_rc_gdr_md_config_t *md_config =
            ucs_derived_of(config, uct_rc_gdr_md_config_t);
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
    md->stats.size      = sizeof(md->stats);
    uct_rc_gdr_md_token_init(md);
    ucs_strncpy_zero(md->name, md_name, sizeof(md->name));

    status = uct_rc_gdr_md_open_fork(md, md_config);
    if (status != UCS_OK) {
        goto err_free_md;
    }

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

    uct_rc_gdr_md_open_sys_dev(md, device);

    status = uct_rc_gdr_md_open_relaxed_order(md, md_config);
    if (status != UCS_OK) {
        goto err_dealloc_pd;
    }

    status = uct_rc_gdr_md_open_gpus(md, md_config);
    if (status != UCS_OK) {
        goto err_dealloc_pd;
    }

    rcache_params.page_size   = ucs_get_page_size();
    rcache_params.priv_size   = sizeof(uct_rc_gdr_mr_t);
    rcache_params.ops         = &uct_rc_gdr_md_rcache_ops;
    rcache_params.arg         = md;
    rcache_params.name        = md->name;
    rcache_params.max_regions = md_config->rcache_max_regions;
    rcache_params.max_size    = md_config->rcache_max_size;
    status = uct_rc_gdr_rcache_create(&rcache_params, &md->rcache);
    if (status != UCS_OK) {
        goto err_free_gpus;
    }

    status = uct_rc_gdr_md_open_events(md, md_config);
    if (status != UCS_OK) {
        goto err_destroy_rcache;
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
    uct_rc_gdr_md_token_cleanup(md);
    ucs_free(md);
    return status;
}
