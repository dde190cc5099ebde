/*
 * uct_test_util: what the UCT suites (and two benchmarks) share.
 *
 * rc_gdr nodes (md, iface and endpoint on an async context and a worker),
 * address exchange, bounded waits, a forked peer for the peer-death tests,
 * and the module's counters. Results are gtest's alone.
 *
 * A set-up step that fails is not a test result: it prints
 * "PROGRAM: what: status" on stderr and exits with status 2.
 */

#ifndef UCT_TEST_UTIL_H_
#define UCT_TEST_UTIL_H_

#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>
#include <ucs/sys/compiler_def.h>

#include <stdint.h>
#include <sys/types.h>

BEGIN_C_DECLS

#define UCT_TEST_TL_NAME     "rc_gdr"
#define UCT_TEST_ADDR_MAX    64   /* bytes kept of an address or packed rkey */
#define UCT_TEST_EXIT_SETUP  2


/* One side of a test: an rc_gdr endpoint and, with a buffer size, a
 * registered host buffer whose remote key is packed for a peer */
typedef struct uct_test_node {
    ucs_async_context_t *async;
    uct_worker_h        worker;
    uct_component_h     component;
    uct_md_h            md;
    uct_md_attr_t       md_attr;
    uct_iface_h         iface;
    uct_iface_attr_t    iface_attr;
    uct_ep_h            ep;
    void                *buf;
    uct_mem_h           memh;
    void                *rkey_buf;
    volatile int        ep_error;        /* set by the error handler */
    ucs_status_t        ep_error_status;
} uct_test_node_t;


/* What a peer needs to connect to a node and reach its buffer; fixed size,
 * to go through a pipe to a forked peer */
typedef struct {
    unsigned char dev[UCT_TEST_ADDR_MAX];
    unsigned char ep[UCT_TEST_ADDR_MAX];
    unsigned char rkey[UCT_TEST_ADDR_MAX];
    uint64_t      buf;
} uct_test_wire_t;


typedef struct {
    uct_completion_t comp;
    ucs_status_t     status;   /* the operation's, once comp.count is 0 */
} uct_test_comp_t;


/* Mirrors of uct_rc_gdr_md_stats_t (rc_gdr_md.h) and
 * uct_rc_gdr_iface_stats_t (rc_gdr_iface.h): the programs reach the module
 * through dlsym only. The size field first makes a layout mismatch an error
 * instead of garbage. */
typedef struct {
    uint64_t size, host_regs, dmabuf_regs, peermem_regs, bounce_regs,
             cache_hits, cache_entries, invalidations, num_gpus, emulated_gpu;
} uct_test_md_stats_t;

typedef struct {
    uint64_t size, tx_wrs, rx_msgs, credit_grants, flush_reads,
             bounce_xfers, bounce_failed, bounce_staged_bytes, bounce_msgs,
             bounce_refused, bounce_bufs_in_use, bounce_bufs_max,
             bounce_malformed, bounce_unexpected, bounce_revoked,
             bounce_acks_dropped, bounce_timeouts, unknown_qp_msgs,
             credit_overflows, bounce_queued_max, tx_stalls,
             bounce_serve_timeouts, rx_no_imm, am_no_handler,
             am_staged_bytes, rma_zcopy_bytes;
} uct_test_iface_stats_t;


/* Retries _call while the transport has no resources, progressing _nodes,
 * until the operation timeout; the value is _call's last answer */
#define UCT_TEST_RETRY(_nodes, _count, _call) \
    ({ \
        __typeof__(_call) _st; \
        double _deadline = uct_test_now() + uct_test_timeout_s; \
        while (((_st = (_call)) == (__typeof__(_call))UCS_ERR_NO_RESOURCE) && \
               (uct_test_now() < _deadline)) { \
            uct_test_progress(_nodes, _count); \
        } \
        _st; \
    })


/* Bound of every wait, in seconds (uct_test_init) */
extern double uct_test_timeout_s;
/* rx_headroom of the interfaces opened next (0: none asked) */
extern size_t uct_test_rx_headroom;


/*
 * What uct_test_die() calls instead of exiting, in the process that set it:
 * the gtest suites throw, so that a failed set-up fails one test. It must
 * not return. A forked child still exits.
 */
typedef void (*uct_test_die_hook_t)(const char *what, ucs_status_t status);

void uct_test_set_die_hook(uct_test_die_hook_t hook);

/* Names the program in set-up errors, bounds waits by timeout_s, and makes
 * stdout line-buffered: what was printed survives a crash */
void uct_test_init(const char *prog, double timeout_s);

void uct_test_die(const char *what, ucs_status_t status);

double uct_test_now(void);

/* A byte pattern that differs between seeds and between nearby offsets */
void uct_test_fill(void *buf, size_t length, unsigned seed);

void uct_test_write_all(int fd, const void *buf, size_t length);

void uct_test_read_all(int fd, void *buf, size_t length);


/* The rc_gdr component; NULL when the module is not in this process */
uct_component_h uct_test_component_find(void);

/* Opens the memory domain of dev ("mlx5_0:1" or "mlx5_0") */
void uct_test_md_open(uct_test_node_t *node, const char *dev);

/* The error handler sets node->ep_error; buf_size 0: no buffer */
void uct_test_node_open(uct_test_node_t *node, const char *dev,
                        size_t buf_size);

void uct_test_node_close(uct_test_node_t *node);

void uct_test_node_wire(const uct_test_node_t *node, uct_test_wire_t *wire_p);

void uct_test_node_connect(uct_test_node_t *node, const uct_test_wire_t *peer);

/* Connects a and b to each other; their addresses in wa and wb, if not NULL */
void uct_test_node_connect_pair(uct_test_node_t *a, uct_test_node_t *b,
                                uct_test_wire_t *wa, uct_test_wire_t *wb);

/* Registers [buf, +size) on node and packs its remote key into a new
 * buffer of md_attr.rkey_packed_size bytes */
void uct_test_mem_reg(uct_test_node_t *node, void *buf, size_t size,
                      uct_mem_h *memh_p, void **rkey_buf_p);


/*
 * The peer of a peer-death test, forked: it opens peer_dev with a buffer of
 * buf_size bytes, connects to node (opened here on dev) and progresses until
 * it is killed. Returns its pid once both sides are connected, with its
 * addresses in *peer_wire_p and its buffer's key unpacked in *rkey_p (the
 * caller releases it).
 */
pid_t uct_test_peer_fork(uct_test_node_t *node, const char *dev,
                         const char *peer_dev, size_t buf_size,
                         uct_test_wire_t *peer_wire_p,
                         uct_rkey_bundle_t *rkey_p);


/* One contiguous buffer */
void uct_test_iov_init(uct_iov_t *iov, void *buffer, size_t length,
                       uct_mem_h memh);

/* Progresses every node of nodes[count] that is not NULL */
void uct_test_progress(uct_test_node_t **nodes, int count);

void uct_test_comp_init(uct_test_comp_t *comp);

/* The final status of an operation that answered status and completes comp;
 * UCS_ERR_TIMED_OUT after uct_test_timeout_s */
ucs_status_t uct_test_comp_wait(uct_test_node_t **nodes, int count,
                                ucs_status_t status, uct_test_comp_t *comp);

/* uct_ep_invalidate(ep) in the form this UCX release has */
ucs_status_t uct_test_ep_invalidate(uct_ep_h ep);

/* Flushes ep with a completion and waits for it */
ucs_status_t uct_test_ep_flush(uct_test_node_t **nodes, int count,
                               uct_ep_h ep);


/* The md counters; UCS_ERR_UNSUPPORTED when the module is not in this
 * process */
ucs_status_t uct_test_md_stats_query(uct_md_h md, uct_test_md_stats_t *stats);

uct_test_md_stats_t uct_test_md_stats(uct_md_h md);

uct_test_iface_stats_t uct_test_iface_stats(uct_iface_h iface);

/* The counters of every live rc_gdr interface on dev ("rxe0:1"), summed:
 * what UCP's hidden interfaces did there; UCS_ERR_NO_ELEM when none */
ucs_status_t uct_test_dev_stats(const char *dev,
                                uct_test_iface_stats_t *stats);

/* A symbol of the rc_gdr module (preloaded, or UCX's plugin); NULL if none */
void *uct_test_module_sym(const char *name);

/* Dies now, not at the first count, if the iface counters are missing */
void uct_test_iface_stats_check(void);

END_C_DECLS

#endif
