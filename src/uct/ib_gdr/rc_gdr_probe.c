/*
 * rc_gdr probe: facts for the gate, proven by trying.
 */

#include "rc_gdr_probe.h"

#include <ucs/debug/log.h>
#include <ucs/sys/string.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* Large enough for one GPU page and a DMA-BUF of its own. */
#define UCT_RC_GDR_PROBE_SIZE  (64 * 1024)
#define UCT_RC_GDR_PROBE_ACCESS \
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)


ucs_status_t uct_rc_gdr_probe_gpu(int ordinal, uct_rc_gdr_probe_gpu_t *gpu)
{
    uct_rc_gdr_cuda_driver_info_t driver;
    ucs_status_t status;

    memset(gpu, 0, sizeof(*gpu));
    gpu->ordinal = ordinal;
    snprintf(gpu->name, sizeof(gpu->name), "GPU%d", ordinal);
    gpu->facts.name             = gpu->name;
    gpu->facts.gdr_supported    = -1;
    gpu->facts.dmabuf_supported = -1;

    status = uct_rc_gdr_cuda_device_attr_query(ordinal, &gpu->attr);
    if (status != UCS_OK) {
        snprintf(gpu->error, sizeof(gpu->error), "attribute query failed: %s",
                 ucs_status_string(status));
        gpu->facts.query_error = gpu->error;
        return status;
    }

    gpu->facts.pci_bdf = gpu->attr.pci_bus_id;
    if (gpu->attr.valid_mask & UCT_RC_GDR_CUDA_DEV_ATTR_GDR) {
        gpu->facts.gdr_supported = gpu->attr.gdr_supported;
    }
    if (gpu->attr.valid_mask & UCT_RC_GDR_CUDA_DEV_ATTR_DMABUF) {
        gpu->facts.dmabuf_supported = gpu->attr.dmabuf_supported;
    }
    if ((gpu->facts.gdr_supported < 0) || (gpu->facts.dmabuf_supported < 0)) {
        snprintf(gpu->error, sizeof(gpu->error), "attribute not readable");
        gpu->facts.query_error = gpu->error;
    }

    if (uct_rc_gdr_cuda_driver_info(&driver) == UCS_OK) {
        gpu->facts.emulated = driver.emulated;
        gpu->facts.placed   = driver.placed;
    }
    return UCS_OK;
}


static int uct_rc_gdr_probe_dmabuf_provider(struct ibv_pd *pd)
{
    struct ibv_mr *mr;
    int err;

    errno = 0;
    mr    = ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE);
    err   = (mr == NULL) ? errno : 0;
    if (mr != NULL) {
        ibv_dereg_mr(mr);
    }
    return err;
}


/* Runs @a reg on a fresh buffer of the GPU, in its primary context. */
static int uct_rc_gdr_probe_with_buffer(const uct_rc_gdr_probe_gpu_t *gpu,
                                        struct ibv_pd *pd,
                                        int (*reg)(struct ibv_pd*, void*))
{
    uct_rc_gdr_cuda_ctx_h ctx, prev = NULL;
    void *buffer;
    int err;

    if ((uct_rc_gdr_cuda_ctx_get_current(&prev) != UCS_OK) ||
        (uct_rc_gdr_cuda_ctx_retain(gpu->ordinal, &ctx) != UCS_OK)) {
        return ENODEV;
    }

    uct_rc_gdr_cuda_ctx_set_current(ctx);
    if (uct_rc_gdr_cuda_mem_alloc(UCT_RC_GDR_PROBE_SIZE, &buffer) != UCS_OK) {
        err = ENOMEM;
    } else {
        err = reg(pd, buffer);
        uct_rc_gdr_cuda_mem_free(buffer);
    }

    uct_rc_gdr_cuda_ctx_set_current(prev);
    uct_rc_gdr_cuda_ctx_release(gpu->ordinal);
    return err;
}


static int uct_rc_gdr_probe_reg_peermem(struct ibv_pd *pd, void *buffer)
{
    struct ibv_mr *mr;

    errno = 0;
    mr    = ibv_reg_mr(pd, buffer, UCT_RC_GDR_PROBE_SIZE,
                       UCT_RC_GDR_PROBE_ACCESS);
    if (mr == NULL) {
        return (errno != 0) ? errno : EIO;
    }
    ibv_dereg_mr(mr);
    return 0;
}


static int uct_rc_gdr_probe_reg_dmabuf(struct ibv_pd *pd, void *buffer)
{
    size_t aligned_len;
    void *aligned_base;
    size_t offset;
    struct ibv_mr *mr;
    int fd, err = 0;

    if (uct_rc_gdr_cuda_dmabuf_export(buffer, UCT_RC_GDR_PROBE_SIZE, 0, &fd,
                                      &offset, &aligned_base,
                                      &aligned_len) != UCS_OK) {
        return ENOTSUP;
    }

    errno = 0;
    mr    = ibv_reg_dmabuf_mr(pd, offset, UCT_RC_GDR_PROBE_SIZE,
                              (uintptr_t)buffer, fd, UCT_RC_GDR_PROBE_ACCESS);
    if (mr == NULL) {
        err = (errno != 0) ? errno : EIO;
    } else {
        ibv_dereg_mr(mr);
    }
    close(fd);
    return err;
}


/* Module entries are hints only: the chain wants a real registration. */
static void uct_rc_gdr_probe_peermem_hints(const char *root,
                                           uct_rc_gdr_probe_nic_t *nic)
{
    static const char *entries[] = {
        "module/nvidia_peermem", "module/nv_peer_mem",
        "kernel/mm/memory_peers/nv_mem"
    };
    char path[PATH_MAX];
    size_t i;

    nic->facts.peermem_modules = 0;
    snprintf(nic->peermem_source, sizeof(nic->peermem_source),
             "%s/{module/nvidia_peermem,module/nv_peer_mem,"
             "kernel/mm/memory_peers/nv_mem}", root);
    for (i = 0; i < ucs_static_array_size(entries); ++i) {
        snprintf(path, sizeof(path), "%s/%s", root, entries[i]);
        if (access(path, F_OK) == 0) {
            nic->facts.peermem_modules = 1;
            ucs_strncpy_safe(nic->peermem_source, path,
                             sizeof(nic->peermem_source));
            return;
        }
    }
}


void uct_rc_gdr_probe_nic(struct ibv_context *context, struct ibv_pd *pd,
                          uint8_t port_num, const uct_rc_gdr_probe_gpu_t *gpu,
                          const char *sysfs_root, uct_rc_gdr_probe_nic_t *nic)
{
    struct ibv_port_attr port_attr;
    int ret;

    memset(nic, 0, sizeof(*nic));
    ucs_strncpy_safe(nic->name, ibv_get_device_name(context->device),
                     sizeof(nic->name));
    nic->facts.name           = nic->name;
    nic->facts.port_num       = port_num;
    nic->facts.port_state     = nic->port_state;
    nic->facts.peermem_source = nic->peermem_source;
    nic->facts.port_active    = -1;
    nic->facts.dmabuf_errno   = UCT_RC_GDR_GATE_NOT_PROBED;
    nic->facts.peermem_errno  = UCT_RC_GDR_GATE_NOT_PROBED;
    uct_rc_gdr_probe_peermem_hints(sysfs_root, nic);

    ret = ibv_query_port(context, port_num, &port_attr);
    if (ret != 0) {
        snprintf(nic->port_state, sizeof(nic->port_state), "query failed: %s",
                 strerror(ret));
    } else {
        nic->facts.port_active = (port_attr.state == IBV_PORT_ACTIVE);
        ucs_strncpy_safe(nic->port_state, ibv_port_state_str(port_attr.state),
                         sizeof(nic->port_state));
    }

    nic->facts.dmabuf_errno = uct_rc_gdr_probe_dmabuf_provider(pd);
    if (gpu == NULL) {
        return;
    }

    /* The provider takes DMA-BUFs, and the GPU can export: prove it. */
    if (((nic->facts.dmabuf_errno == EBADF) ||
         (nic->facts.dmabuf_errno == 0)) &&
        (gpu->facts.dmabuf_supported == 1)) {
        nic->facts.dmabuf_errno = uct_rc_gdr_probe_with_buffer(
                gpu, pd, uct_rc_gdr_probe_reg_dmabuf);
    }

    nic->facts.peermem_errno = uct_rc_gdr_probe_with_buffer(
            gpu, pd, uct_rc_gdr_probe_reg_peermem);
}


int uct_rc_gdr_probe_relaxed_order(struct ibv_pd *pd)
{
    size_t size = sysconf(_SC_PAGESIZE);
    struct ibv_mr *mr;
    void *buffer;
    int err = 0;

    /* A page of its own: a registration may mark its pages not to be
     * inherited by a fork (ibv_fork_init), which must not catch others */
    if (posix_memalign(&buffer, size, size) != 0) {
        return ENOMEM;
    }

    mr = ibv_reg_mr(pd, buffer, size,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
    if (mr == NULL) {
        err = (errno != 0) ? errno : EINVAL;
    } else {
        ibv_dereg_mr(mr);
    }

    free(buffer);
    return err;
}


ucs_status_t uct_rc_gdr_probe_evaluate(const uct_rc_gdr_probe_gpu_t *gpu,
                                       const uct_rc_gdr_probe_nic_t *nic,
                                       const char *sysfs_root,
                                       const uct_rc_gdr_gate_config_t *config,
                                       uct_rc_gdr_gate_result_t *result_p)
{
    uct_rc_gdr_topo_t topo;
    ucs_status_t status;

    status = uct_rc_gdr_topo_classify(sysfs_root,
                                      (gpu->facts.pci_bdf != NULL) ?
                                      gpu->facts.pci_bdf : "", nic->name,
                                      &topo);
    return uct_rc_gdr_gate_evaluate(&gpu->facts, &nic->facts,
                                    (status == UCS_OK) ? &topo : NULL, config,
                                    result_p);
}
