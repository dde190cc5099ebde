/*
 * rc_gdr resource limits: what bounds the number and size of NIC
 * registrations of one process (the NIC's MR count, the locked-memory limit,
 * a GPU's BAR1 aperture for GPU memory). Recorded as evidence by rc_gdr_info
 * and named by the md when a registration fails at one of them.
 */

#ifndef UCT_RC_GDR_LIMITS_H_
#define UCT_RC_GDR_LIMITS_H_

#include <ucs/type/status.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A limit nobody knows, or none (RLIM_INFINITY) */
#define UCT_RC_GDR_LIMIT_UNKNOWN   UINT64_MAX
#define UCT_RC_GDR_LIMIT_UNLIMITED (UINT64_MAX - 1)


typedef struct uct_rc_gdr_limit {
    uint64_t value;       /* bytes or count; UCT_RC_GDR_LIMIT_xx */
    uint64_t free;        /* what is left of it, or UCT_RC_GDR_LIMIT_UNKNOWN */
    char     source[96];  /* where the value came from, or why unknown */
} uct_rc_gdr_limit_t;


/* RLIMIT_MEMLOCK (soft): the bytes this process may pin, host memory the
 * NIC registers counting against it unless it runs with CAP_IPC_LOCK. */
void uct_rc_gdr_limits_memlock(uct_rc_gdr_limit_t *limit);


/*
 * The BAR1 aperture of the GPU at PCI address @a bdf, through which the NIC
 * reaches GPU memory (peermem and DMA-BUF registrations map it there): from
 * NVML (libnvidia-ml.so.1, total and free) when it answers, else the size of
 * PCI BAR 1 in sysfs (no free count), else unknown, with the reason.
 */
void uct_rc_gdr_limits_bar1(const char *sysfs_root, const char *bdf,
                            uct_rc_gdr_limit_t *limit);


/* "16 GiB", "65536", "unlimited", "unknown", as a byte count or a count */
const char *uct_rc_gdr_limits_str(uint64_t value, int bytes, char *buf,
                                  size_t max);

#ifdef __cplusplus
}
#endif

#endif
