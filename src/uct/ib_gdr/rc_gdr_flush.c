/*
 * rc_gdr flush-by-RDMA-read: the policy. The mechanism (one signaled RDMA
 * READ per flush of a "dirty" endpoint) is in rc_gdr_ep.c, uct_rc_gdr_ep_flush.
 *
 * What UCP does with it (UCX 1.13; research/ucx_internals.md 4.3):
 * - Rendezvous PUT sends {put_zcopy..., uct_ep_fence, ATP active message}:
 *   no flush, so the receiver may see the ATP before a GPU sees the data.
 *   UCX_RNDV_PUT_FORCE_FLUSH=y makes UCP flush the lanes (uct_ep_flush,
 *   LOCAL) before the ATP instead: that flush is where this read happens.
 * - UCX 1.13 has no UCT_FLUSH_FLAG_REMOTE (from 1.14; used by UCP only for
 *   strong fences, UCX_FENCE_MODE=strong, and remote worker flush). Built
 *   against >= 1.14 (UCT_RC_GDR_HAVE_FLUSH_REMOTE) that flag issues the
 *   same read after any write, whatever the target and the knob.
 * - Settings that matter: UCX_RC_GDR_FLUSH (auto|always|never) and, under
 *   UCP rendezvous into GPU memory that needs it, UCX_RNDV_PUT_FORCE_FLUSH=y.
 */

#include "rc_gdr_flush.h"

#include <ucs/debug/log.h>

#include <strings.h>


const char *uct_rc_gdr_flush_mode_names[] = {
    [UCT_RC_GDR_FLUSH_AUTO]   = "auto",
    [UCT_RC_GDR_FLUSH_ALWAYS] = "always",
    [UCT_RC_GDR_FLUSH_NEVER]  = "never",
    [UCT_RC_GDR_FLUSH_LAST]   = NULL
};


static const char *uct_rc_gdr_flush_why_names[] = {
    [UCT_RC_GDR_FLUSH_WHY_KNOB_ALWAYS]         = UCT_RC_GDR_KNOB_FLUSH
                                                 "=always",
    [UCT_RC_GDR_FLUSH_WHY_KNOB_NEVER]          = UCT_RC_GDR_KNOB_FLUSH
                                                 "=never",
    [UCT_RC_GDR_FLUSH_WHY_HOST_MEMORY]         = "host memory",
    [UCT_RC_GDR_FLUSH_WHY_ORDERING_NONE]       = "writes ordering NONE",
    [UCT_RC_GDR_FLUSH_WHY_ORDERING_OWNER]      = "writes ordering OWNER",
    [UCT_RC_GDR_FLUSH_WHY_ORDERING_ALL_DEVICES] = "writes ordering "
                                                  "ALL_DEVICES",
    [UCT_RC_GDR_FLUSH_WHY_ORDERING_UNKNOWN]    = "unknown writes ordering "
                                                 "value",
    [UCT_RC_GDR_FLUSH_WHY_CC_BEFORE_9]         = "no writes ordering "
                                                 "attribute, compute "
                                                 "capability < 9",
    [UCT_RC_GDR_FLUSH_WHY_CC_9_OR_LATER]       = "no writes ordering "
                                                 "attribute, compute "
                                                 "capability >= 9",
    [UCT_RC_GDR_FLUSH_WHY_GPU_UNKNOWN]         = "neither writes ordering "
                                                 "nor compute capability "
                                                 "known"
};


/* A GPU in auto mode: the attribute decides; the compute capability only
 * when the attribute could not be read; a read when nothing is known. */
static int
uct_rc_gdr_flush_gpu_needs_read(const uct_rc_gdr_flush_target_t *target,
                                uct_rc_gdr_flush_why_t *why_p)
{
    if (target->writes_ordering_valid) {
        switch (target->writes_ordering) {
        case UCT_RC_GDR_CUDA_WRITES_ORDERING_NONE:
            *why_p = UCT_RC_GDR_FLUSH_WHY_ORDERING_NONE;
            return 1;
        case UCT_RC_GDR_CUDA_WRITES_ORDERING_OWNER:
            *why_p = UCT_RC_GDR_FLUSH_WHY_ORDERING_OWNER;
            return 0;
        case UCT_RC_GDR_CUDA_WRITES_ORDERING_ALL_DEVICES:
            *why_p = UCT_RC_GDR_FLUSH_WHY_ORDERING_ALL_DEVICES;
            return 0;
        default:
            /* A newer driver's value: reading costs little, missing data
             * costs a lot. */
            *why_p = UCT_RC_GDR_FLUSH_WHY_ORDERING_UNKNOWN;
            return 1;
        }
    }

    if (target->cc_valid) {
        if (target->cc_major < UCT_RC_GDR_FLUSH_ORDERED_CC) {
            *why_p = UCT_RC_GDR_FLUSH_WHY_CC_BEFORE_9;
            return 1;
        }
        *why_p = UCT_RC_GDR_FLUSH_WHY_CC_9_OR_LATER;
        return 0;
    }

    *why_p = UCT_RC_GDR_FLUSH_WHY_GPU_UNKNOWN;
    return 1;
}


int uct_rc_gdr_flush_read_needed(uct_rc_gdr_flush_mode_t mode,
                                 const uct_rc_gdr_flush_target_t *target,
                                 uct_rc_gdr_flush_why_t *why_p)
{
    uct_rc_gdr_flush_why_t why;
    int needed;

    switch (mode) {
    case UCT_RC_GDR_FLUSH_ALWAYS:
        why    = UCT_RC_GDR_FLUSH_WHY_KNOB_ALWAYS;
        needed = 1;
        break;
    case UCT_RC_GDR_FLUSH_NEVER:
        why    = UCT_RC_GDR_FLUSH_WHY_KNOB_NEVER;
        needed = 0;
        break;
    default:
        if (!target->is_gpu) {
            why    = UCT_RC_GDR_FLUSH_WHY_HOST_MEMORY;
            needed = 0;
        } else {
            needed = uct_rc_gdr_flush_gpu_needs_read(target, &why);
        }
        break;
    }

    if (why_p != NULL) {
        *why_p = why;
    }
    return needed;
}


const char *uct_rc_gdr_flush_why_str(uct_rc_gdr_flush_why_t why)
{
    return ((unsigned)why < UCT_RC_GDR_FLUSH_WHY_LAST) ?
           uct_rc_gdr_flush_why_names[why] : "?";
}


void uct_rc_gdr_flush_target_from_gpu(const uct_rc_gdr_cuda_dev_attr_t *attr,
                                      uct_rc_gdr_flush_target_t *target_p)
{
    target_p->is_gpu                = 1;
    target_p->writes_ordering_valid = !!(attr->valid_mask &
                                      UCT_RC_GDR_CUDA_DEV_ATTR_WRITES_ORDERING);
    target_p->writes_ordering       = attr->writes_ordering;
    target_p->cc_valid              = !!(attr->valid_mask &
                                         UCT_RC_GDR_CUDA_DEV_ATTR_CC);
    target_p->cc_major              = attr->cc_major;
}


ucs_status_t uct_rc_gdr_flush_mode_parse(const char *value,
                                         uct_rc_gdr_flush_mode_t *mode_p)
{
    int mode;

    for (mode = 0; mode < UCT_RC_GDR_FLUSH_LAST; ++mode) {
        if ((value != NULL) &&
            !strcasecmp(value, uct_rc_gdr_flush_mode_names[mode])) {
            *mode_p = (uct_rc_gdr_flush_mode_t)mode;
            return UCS_OK;
        }
    }

    ucs_error("rc_gdr: '%s' for " UCT_RC_GDR_KNOB_FLUSH ": allowed values "
              "are auto, always, never", (value != NULL) ? value : "(null)");
    return UCS_ERR_INVALID_PARAM;
}
