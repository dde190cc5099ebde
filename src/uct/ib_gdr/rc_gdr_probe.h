/*
 * rc_gdr probe: gathers the facts the gate judges, by asking the CUDA driver
 * and by trying real registrations of a small GPU buffer (doc/DESIGN.md section 1:
 * a mechanism is proven by a registration, not by a file that exists).
 * Used by the memory domain at open and by rc_gdr_info.
 */

#ifndef UCT_RC_GDR_PROBE_H_
#define UCT_RC_GDR_PROBE_H_

#include "rc_gdr_cuda.h"
#include "rc_gdr_gate.h"

#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif


typedef struct uct_rc_gdr_probe_gpu {
    int                        ordinal;
    uct_rc_gdr_cuda_dev_attr_t attr;
    char                       name[16];    /* "GPU0" */
    char                       error[128];  /* why attributes are unknown */
    uct_rc_gdr_gate_gpu_t      facts;       /* points into this struct */
} uct_rc_gdr_probe_gpu_t;


typedef struct uct_rc_gdr_probe_nic {
    char                       name[64];
    char                       port_state[64];
    char                       peermem_source[256];
    uct_rc_gdr_gate_nic_t      facts;       /* points into this struct */
} uct_rc_gdr_probe_nic_t;


/** The driver's attributes of GPU @a ordinal, as gate facts. */
ucs_status_t uct_rc_gdr_probe_gpu(int ordinal, uct_rc_gdr_probe_gpu_t *gpu);


/**
 * The NIC facts for one port and one GPU: port state, DMA-BUF support of the
 * provider (import with fd -1: EBADF means it got as far as the fd) followed
 * by a real DMA-BUF registration of a GPU buffer, a real registration of a
 * CUDA pointer (peermem), and the peermem module entries in sysfs (hints).
 *
 * @param gpu  NULL: no GPU to register; the registrations are not probed.
 */
void uct_rc_gdr_probe_nic(struct ibv_context *context, struct ibv_pd *pd,
                          uint8_t port_num, const uct_rc_gdr_probe_gpu_t *gpu,
                          const char *sysfs_root, uct_rc_gdr_probe_nic_t *nic);


/**
 * Whether the verbs library and device take IBV_ACCESS_RELAXED_ORDERING, by
 * one small host registration with it (as UCX's IB memory domain finds out
 * what a device takes).
 *
 * @return 0 when accepted, else the errno of the refusal.
 */
int uct_rc_gdr_probe_relaxed_order(struct ibv_pd *pd);


/** Topology and gate in one call, for one GPU and one probed port. */
ucs_status_t uct_rc_gdr_probe_evaluate(const uct_rc_gdr_probe_gpu_t *gpu,
                                       const uct_rc_gdr_probe_nic_t *nic,
                                       const char *sysfs_root,
                                       const uct_rc_gdr_gate_config_t *config,
                                       uct_rc_gdr_gate_result_t *result_p);

#ifdef __cplusplus
}
#endif

#endif
