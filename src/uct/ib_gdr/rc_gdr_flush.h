/*
 * rc_gdr flush-by-RDMA-read: which targets need a read before a flush may
 * complete, and the knob that overrides it (doc/DESIGN.md section 3).
 *
 * An RDMA WRITE into GPU memory is acknowledged by the NIC when it has been
 * placed on PCIe, not when the GPU can see it. On GPUs whose GPUDirect RDMA
 * writes ordering is NONE, a later read of that GPU's memory through the
 * same path is what makes the writes visible; so a flush that follows writes
 * into such memory posts one small RDMA READ and completes only after the
 * read returns.
 *
 * Everything here is plain data in, decision out: the unit tests drive it
 * with synthetic GPUs. The endpoint (rc_gdr_ep.c) carries out the decision.
 *
 *   UCX_RC_GDR_FLUSH=auto    auto|always|never (interface configuration)
 */

#ifndef UCT_RC_GDR_FLUSH_H_
#define UCT_RC_GDR_FLUSH_H_

#include "rc_gdr_addr.h"
#include "rc_gdr_cuda.h"

#include <ucs/config/parser.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>

BEGIN_C_DECLS

#define UCT_RC_GDR_KNOB_FLUSH          "UCX_RC_GDR_FLUSH"
#define UCT_RC_GDR_FLUSH_DEFAULT       "auto"

/* Bytes a flush reads from the last written target: at least 1, because a
 * 0-byte RDMA READ touches no memory and so orders nothing on PCIe. */
#define UCT_RC_GDR_FLUSH_READ_MAX      8

/* First compute capability whose writes ordering makes the read unneeded;
 * consulted only when the ordering attribute cannot be read. */
#define UCT_RC_GDR_FLUSH_ORDERED_CC    9


typedef enum {
    UCT_RC_GDR_FLUSH_AUTO,     /* by the target GPU's writes ordering */
    UCT_RC_GDR_FLUSH_ALWAYS,   /* every target, host memory included */
    UCT_RC_GDR_FLUSH_NEVER,    /* never: unsafe on GPUs with ordering NONE */
    UCT_RC_GDR_FLUSH_LAST
} uct_rc_gdr_flush_mode_t;


/* Names of uct_rc_gdr_flush_mode_t, NULL-terminated (UCS_CONFIG_TYPE_ENUM) */
extern const char *uct_rc_gdr_flush_mode_names[];


/* The interface configuration field of the knob ("FLUSH" under the
 * "RC_GDR_" table prefix); the unit tests parse with the same field. */
#define UCT_RC_GDR_FLUSH_CONFIG_FIELD(_offset) \
    {"FLUSH", UCT_RC_GDR_FLUSH_DEFAULT, \
     "Make RDMA writes into GPU memory visible before a flush completes, by\n" \
     "one RDMA READ (8 bytes or less) of the last written target, posted by\n" \
     "the flush after the writes (once per flush, not per write):\n" \
     " auto   - when the target GPU needs it: its GPUDirect RDMA writes\n" \
     "          ordering is NONE (compute capability < 9 when the attribute\n" \
     "          cannot be read). Host memory: no read.\n" \
     " always - for every target, host memory included.\n" \
     " never  - no reads. UNSAFE on GPUs whose writes ordering is NONE: the\n" \
     "          data may not be visible to the GPU when the flush completes.", \
     (_offset), UCS_CONFIG_TYPE_ENUM(uct_rc_gdr_flush_mode_names)}


/* What is known about the memory a write lands in */
typedef struct uct_rc_gdr_flush_target {
    int is_gpu;                 /* 0: host memory */
    int writes_ordering_valid;  /* the attribute could be read */
    int writes_ordering;        /* uct_rc_gdr_cuda_writes_ordering_t */
    int cc_valid;               /* the compute capability could be read */
    int cc_major;
} uct_rc_gdr_flush_target_t;


/* Why a decision was taken: for logs and tests */
typedef enum {
    UCT_RC_GDR_FLUSH_WHY_KNOB_ALWAYS,
    UCT_RC_GDR_FLUSH_WHY_KNOB_NEVER,
    UCT_RC_GDR_FLUSH_WHY_HOST_MEMORY,
    UCT_RC_GDR_FLUSH_WHY_ORDERING_NONE,
    UCT_RC_GDR_FLUSH_WHY_ORDERING_OWNER,
    UCT_RC_GDR_FLUSH_WHY_ORDERING_ALL_DEVICES,
    UCT_RC_GDR_FLUSH_WHY_ORDERING_UNKNOWN, /* a value not known here: read */
    UCT_RC_GDR_FLUSH_WHY_CC_BEFORE_9,
    UCT_RC_GDR_FLUSH_WHY_CC_9_OR_LATER,
    UCT_RC_GDR_FLUSH_WHY_GPU_UNKNOWN,      /* neither attribute nor cc: read */
    UCT_RC_GDR_FLUSH_WHY_LAST
} uct_rc_gdr_flush_why_t;


/**
 * Whether writes into @a target need a flush read under @a mode.
 * It does not depend on how the memory was registered (DMA-BUF or peermem).
 *
 * @param [in]  mode     The knob.
 * @param [in]  target   The target memory's device.
 * @param [out] why_p    The reason, may be NULL.
 *
 * @return 1 if a read is needed, 0 if not.
 */
int uct_rc_gdr_flush_read_needed(uct_rc_gdr_flush_mode_t mode,
                                 const uct_rc_gdr_flush_target_t *target,
                                 uct_rc_gdr_flush_why_t *why_p);

const char *uct_rc_gdr_flush_why_str(uct_rc_gdr_flush_why_t why);

/* The flush facts of a GPU, from the attributes the CUDA shim read. */
void uct_rc_gdr_flush_target_from_gpu(const uct_rc_gdr_cuda_dev_attr_t *attr,
                                      uct_rc_gdr_flush_target_t *target_p);

/**
 * Parse a value of UCX_RC_GDR_FLUSH (case-insensitive), for callers outside
 * the configuration table. An unknown value is logged with the allowed ones
 * and answered with UCS_ERR_INVALID_PARAM; @a mode_p is then unchanged.
 */
ucs_status_t uct_rc_gdr_flush_mode_parse(const char *value,
                                         uct_rc_gdr_flush_mode_t *mode_p);


/**
 * Data path: whether a write through a remote key with @a rkey_flags
 * (UCT_RC_GDR_RKEY_FLAG_xx) makes the endpoint owe a read at its next flush.
 * In auto mode the memory domain that packed the key decided, and said so
 * with UCT_RC_GDR_RKEY_FLAG_FLUSH_READ.
 */
static UCS_F_ALWAYS_INLINE int
uct_rc_gdr_flush_rkey_needs_read(uct_rc_gdr_flush_mode_t mode,
                                 uint8_t rkey_flags)
{
    return (mode == UCT_RC_GDR_FLUSH_ALWAYS) ||
           ((mode == UCT_RC_GDR_FLUSH_AUTO) &&
            (rkey_flags & UCT_RC_GDR_RKEY_FLAG_FLUSH_READ));
}

END_C_DECLS

#endif
