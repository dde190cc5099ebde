/**
 * rc_gdr: the gate that decides, per GPU x NIC x direction, whether GPU
 * memory is reached by GPUDirect RDMA or through the host bounce lane, and
 * records why (doc/DESIGN.md section 1).
 *
 * The gate does no I/O: the caller probes the GPU, the NIC and the topology
 * and passes the facts in, so every decision can be replayed in a unit test.
 *
 * Configuration may only narrow the chain: a distance level of SYS or a
 * direction policy of "yes" never turns a failed check into GDR; "yes" and
 * UCX_RC_GDR_REQUIRE=gdr turn it into an error instead of the bounce lane.
 */

#ifndef UCT_RC_GDR_GATE_H_
#define UCT_RC_GDR_GATE_H_

#include "rc_gdr_topo.h"

#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>

#include <stdint.h>
#include <stdio.h>

BEGIN_C_DECLS

/*
 * The knobs that govern the chain. The md's configuration table uses the
 * names without the "UCX_" prefix, under the "RC_GDR_" table prefix.
 *   UCX_RC_GDR_MAX_DISTANCE=PXB      farthest GPU<->NIC distance for GDR
 *   UCX_RC_GDR_NIC_READS_GPU=auto    GDR when sending from GPU memory
 *   UCX_RC_GDR_NIC_WRITES_GPU=auto   GDR when receiving into GPU memory
 *   UCX_RC_GDR_REG_METHODS=dmabuf,peermem  mechanisms, in order of preference
 *   UCX_RC_GDR_BOUNCE=yes            allow the host bounce lane
 *   UCX_RC_GDR_REQUIRE=no            "gdr": fail instead of bouncing
 */
#define UCT_RC_GDR_KNOB_MAX_DISTANCE    "UCX_RC_GDR_MAX_DISTANCE"
#define UCT_RC_GDR_KNOB_NIC_READS_GPU   "UCX_RC_GDR_NIC_READS_GPU"
#define UCT_RC_GDR_KNOB_NIC_WRITES_GPU  "UCX_RC_GDR_NIC_WRITES_GPU"
#define UCT_RC_GDR_KNOB_REG_METHODS     "UCX_RC_GDR_REG_METHODS"
#define UCT_RC_GDR_KNOB_BOUNCE          "UCX_RC_GDR_BOUNCE"
#define UCT_RC_GDR_KNOB_REQUIRE         "UCX_RC_GDR_REQUIRE"

#define UCT_RC_GDR_GATE_DEFAULT_MAX_DISTANCE  "PXB"
#define UCT_RC_GDR_GATE_DEFAULT_POLICY        "auto"
#define UCT_RC_GDR_GATE_DEFAULT_REG_METHODS   "dmabuf,peermem"
#define UCT_RC_GDR_GATE_DEFAULT_BOUNCE        "yes"
#define UCT_RC_GDR_GATE_DEFAULT_REQUIRE       "no"

/* Value of an errno fact that was never probed */
#define UCT_RC_GDR_GATE_NOT_PROBED      (-1)

#define UCT_RC_GDR_GATE_MAX_EVIDENCE    64
#define UCT_RC_GDR_GATE_VALUE_MAX       288
#define UCT_RC_GDR_GATE_SOURCE_MAX      256
#define UCT_RC_GDR_GATE_WHY_MAX         512


typedef enum {
    UCT_RC_GDR_DIR_NIC_READS_GPU,   /* sending from GPU memory */
    UCT_RC_GDR_DIR_NIC_WRITES_GPU,  /* receiving into GPU memory */
    UCT_RC_GDR_DIR_LAST
} uct_rc_gdr_dir_t;


typedef enum {
    UCT_RC_GDR_LANE_GDR_DMABUF,     /* NIC MR from a DMA-BUF fd */
    UCT_RC_GDR_LANE_GDR_PEERMEM,    /* NIC MR from the CUDA pointer */
    UCT_RC_GDR_LANE_BOUNCE,         /* staged through pinned host memory */
    UCT_RC_GDR_LANE_REFUSED,        /* GPU memory not served this way */
    UCT_RC_GDR_LANE_LAST
} uct_rc_gdr_lane_t;

/* The lanes on which the NIC reaches the GPU memory itself */
#define UCT_RC_GDR_LANE_IS_GDR(_lane) ((_lane) <= UCT_RC_GDR_LANE_GDR_PEERMEM)


typedef enum {
    UCT_RC_GDR_POLICY_AUTO,         /* GDR when the chain holds, else bounce */
    UCT_RC_GDR_POLICY_YES,          /* GDR when the chain holds, else error */
    UCT_RC_GDR_POLICY_NO            /* never GDR in this direction */
} uct_rc_gdr_policy_t;


typedef enum {
    UCT_RC_GDR_REG_DMABUF,
    UCT_RC_GDR_REG_PEERMEM,
    UCT_RC_GDR_REG_LAST
} uct_rc_gdr_reg_method_t;


typedef enum {
    UCT_RC_GDR_REQUIRE_NO,          /* a failed check falls back to bounce */
    /* Every direction whose policy is not "no" must be GDR, else
     * evaluation fails (a direction turned off by its policy is exempt) */
    UCT_RC_GDR_REQUIRE_GDR
} uct_rc_gdr_require_t;


typedef enum {
    UCT_RC_GDR_VERDICT_PASS,
    UCT_RC_GDR_VERDICT_FAIL,
    UCT_RC_GDR_VERDICT_WARN,
    UCT_RC_GDR_VERDICT_INFO
} uct_rc_gdr_verdict_t;


/* What the CUDA driver says about one GPU (filled by the CUDA shim) */
typedef struct uct_rc_gdr_gate_gpu {
    const char                *name;        /* "GPU0", for messages */
    const char                *pci_bdf;     /* "0000:17:00.0" */
    /* CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: 1, 0, -1 not read */
    int                       gdr_supported;
    /* CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: 1, 0, -1 not read */
    int                       dmabuf_supported;
    const char                *query_error; /* why an attribute is -1 */
    /* 1: the stand-in CUDA driver: "GPU" memory is host memory, which any
     * NIC, virtual ones included, reaches without PCIe peer-to-peer */
    int                       emulated;
    /* 1: an emulated GPU standing at the PCI function it reports (a
     * guest's, RC_GDR_FAKE_CUDA_PLACED): its place is judged as a real
     * GPU's, so that the topology checks run on a real kernel's sysfs */
    int                       placed;
} uct_rc_gdr_gate_gpu_t;


/* What probing one verbs port showed */
typedef struct uct_rc_gdr_gate_nic {
    const char                *name;        /* "mlx5_0" */
    uint8_t                   port_num;
    int                       port_active;  /* 1 ACTIVE, 0 not, -1 unknown */
    const char                *port_state;  /* words, e.g. "PORT_DOWN" */
    /* ibv_reg_dmabuf_mr probe: 0 or EBADF supported, EOPNOTSUPP not */
    int                       dmabuf_errno;
    /* test ibv_reg_mr of a GPU buffer: 0 ok, else its errno */
    int                       peermem_errno;
    /* nvidia_peermem / nv_mem entries in sysfs: 1, 0, -1 not looked */
    int                       peermem_modules;
    const char                *peermem_source; /* where they were looked */
} uct_rc_gdr_gate_nic_t;


typedef struct uct_rc_gdr_gate_config {
    uct_rc_gdr_dist_t         max_distance;
    uct_rc_gdr_policy_t       policy[UCT_RC_GDR_DIR_LAST];
    unsigned                  num_methods;
    uct_rc_gdr_reg_method_t   methods[UCT_RC_GDR_REG_LAST]; /* preference */
    int                       bounce;       /* bounce lane allowed */
    uct_rc_gdr_require_t      require;
} uct_rc_gdr_gate_config_t;


/* One step of the chain, or a fact recorded beside it */
typedef struct uct_rc_gdr_evidence {
    const char                *check;       /* "gpu.gdr_attribute" */
    char                      value[UCT_RC_GDR_GATE_VALUE_MAX];
    uct_rc_gdr_verdict_t      verdict;
    char                      source[UCT_RC_GDR_GATE_SOURCE_MAX];
    const char                *knob;        /* governing setting, or NULL */
    const char                *hint;        /* what to check next, or NULL */
} uct_rc_gdr_evidence_t;


typedef struct uct_rc_gdr_gate_result {
    ucs_status_t              status;       /* what evaluate returned */
    char                      gpu[32];
    char                      gpu_bdf[UCT_RC_GDR_BDF_MAX];
    char                      nic[64];
    uint8_t                   port_num;
    uct_rc_gdr_dist_t         dist;
    uct_rc_gdr_lane_t         lane[UCT_RC_GDR_DIR_LAST];
    /* Evidence index of the check that kept GDR off, -1 for a GDR lane */
    int                       why[UCT_RC_GDR_DIR_LAST];
    /* Setting that turned a failure into REFUSED ("UCX_RC_GDR_BOUNCE=no") */
    char                      refused_by[UCT_RC_GDR_DIR_LAST][48];
    unsigned                  num_evidence;
    uct_rc_gdr_evidence_t     evidence[UCT_RC_GDR_GATE_MAX_EVIDENCE];
} uct_rc_gdr_gate_result_t;


/** Defaults: PXB, auto/auto, dmabuf,peermem, bounce allowed, require no. */
void uct_rc_gdr_gate_config_init(uct_rc_gdr_gate_config_t *config);


/**
 * Set one knob from its string value.
 *
 * @param name   "MAX_DISTANCE", "RC_GDR_MAX_DISTANCE" or
 *               "UCX_RC_GDR_MAX_DISTANCE" (likewise for the others).
 * @param value  Levels LOC..SYS; policies auto|yes|no; methods a comma list
 *               of dmabuf|peermem without repeats; bounce yes|no; require
 *               no|gdr. Case-insensitive; y/n, on/off, 1/0 mean yes/no.
 *
 * @return UCS_ERR_INVALID_PARAM (logged, naming the value and the allowed
 *         ones) for a bad value, UCS_ERR_NO_ELEM for an unknown knob;
 *         @a config is unchanged on error.
 */
ucs_status_t uct_rc_gdr_gate_config_set(uct_rc_gdr_gate_config_t *config,
                                        const char *name, const char *value);


/** Apply every UCX_RC_GDR_* knob found in the environment. */
ucs_status_t uct_rc_gdr_gate_config_read_env(uct_rc_gdr_gate_config_t *config);


/**
 * Evaluate the chain for one GPU and one NIC port, both directions.
 *
 * @param [in]  topo      Distance between them; NULL counts as unknown.
 * @param [out] result_p  The lanes and the ordered evidence. Filled on
 *                        UCS_OK and also on UCS_ERR_UNSUPPORTED, because
 *                        then it is the explanation.
 *
 * @return UCS_OK; UCS_ERR_UNSUPPORTED when GDR is required (policy "yes" or
 *         UCX_RC_GDR_REQUIRE=gdr) and a check failed: that direction's
 *         lane is REFUSED and uct_rc_gdr_gate_format_why() names the check;
 *         UCS_ERR_INVALID_PARAM for missing inputs or a broken config.
 *         Nothing is logged: see uct_rc_gdr_gate_log().
 */
ucs_status_t uct_rc_gdr_gate_evaluate(const uct_rc_gdr_gate_gpu_t *gpu,
                                      const uct_rc_gdr_gate_nic_t *nic,
                                      const uct_rc_gdr_topo_t *topo,
                                      const uct_rc_gdr_gate_config_t *config,
                                      uct_rc_gdr_gate_result_t *result_p);


/**
 * The one-line "why GDR is off" (or "uses GDR") message for a direction:
 * the failing check, its value and the knob that governs it, e.g.
 * "rc_gdr: GPU0 <-> rxe0 NIC-writes-GPU uses the bounce lane:
 *  registration.mechanism = none (dmabuf: EOPNOTSUPP, peermem: EFAULT);
 *  HINT: check nvidia_peermem / DMA-BUF support, UCX_RC_GDR_REG_METHODS"
 *
 * @return @a buf.
 */
const char *uct_rc_gdr_gate_format_why(const uct_rc_gdr_gate_result_t *result,
                                       uct_rc_gdr_dir_t dir, char *buf,
                                       size_t max);


/**
 * Log the outcome once: one line per direction, or one line for both when
 * they agree. Error level when evaluation failed, diag for the bounce lane
 * or a refusal, debug for GDR.
 */
void uct_rc_gdr_gate_log(const uct_rc_gdr_gate_result_t *result);


/** The chain as an aligned, human-readable table. */
void uct_rc_gdr_gate_print_table(const uct_rc_gdr_gate_result_t *result,
                                 FILE *stream);


/** The result as one JSON object (strings escaped; ASCII output). */
void uct_rc_gdr_gate_print_json(const uct_rc_gdr_gate_result_t *result,
                                FILE *stream);


/*
 * The GPU x NIC matrix, at a glance as `nvidia-smi topo -m` shows it: one
 * row per GPU, one column per NIC, each cell the PCIe distance class and
 * the lane of each direction.
 */
typedef struct uct_rc_gdr_gate_cell {
    uct_rc_gdr_dist_t         dist;
    uct_rc_gdr_lane_t         lane[UCT_RC_GDR_DIR_LAST]; /* _LAST: not
                                                            evaluated */
} uct_rc_gdr_gate_cell_t;


/** What the matrix shows of one pair's result; NULL: not evaluated. */
void uct_rc_gdr_gate_cell_set(uct_rc_gdr_gate_cell_t *cell,
                              const uct_rc_gdr_gate_result_t *result);


/**
 * @param cells  num_gpus x num_nics, row by row (GPU-major).
 * A legend follows the matrix; a cell marked '*' is a NIC nearest the GPU
 * (the smallest known distance of its row).
 */
void uct_rc_gdr_gate_print_matrix(const char *const *gpus, unsigned num_gpus,
                                  const char *const *nics, unsigned num_nics,
                                  const uct_rc_gdr_gate_cell_t *cells,
                                  FILE *stream);


/**
 * The NICs of one GPU's row marked '*' in the matrix (its nearest), comma
 * separated as UCX_NET_DEVICES takes them ("mlx5_0:1,mlx5_1:1"), on one
 * line. @return how many; none when no NIC's distance is known.
 */
unsigned uct_rc_gdr_gate_print_nearest(const char *const *nics,
                                       unsigned num_nics,
                                       const uct_rc_gdr_gate_cell_t *row,
                                       FILE *stream);


/** The matrix as one JSON object: {"gpus": [], "nics": [], "cells": [[]]} */
void uct_rc_gdr_gate_print_matrix_json(const char *const *gpus,
                                       unsigned num_gpus,
                                       const char *const *nics,
                                       unsigned num_nics,
                                       const uct_rc_gdr_gate_cell_t *cells,
                                       FILE *stream);


/** @a str as a quoted JSON string; NULL prints null. */
void uct_rc_gdr_gate_print_json_string(FILE *stream, const char *str);


const char *uct_rc_gdr_gate_lane_name(uct_rc_gdr_lane_t lane);
const char *uct_rc_gdr_gate_dir_name(uct_rc_gdr_dir_t dir);
const char *uct_rc_gdr_gate_verdict_name(uct_rc_gdr_verdict_t verdict);

END_C_DECLS

#endif
