/*
 * site_uct: what the site programs (reg_sweep, data_check) share, on plain
 * UCT calls: the rc_gdr component, its md counters (through the module's
 * exported query, found by dlsym: the module is a plugin, never linked),
 * a connected pair of rc_gdr nodes, and a zcopy operation waited for.
 * Nothing here comes from the test tree: a site builds and runs these
 * programs alone.
 *
 * See file LICENSE for terms.
 */

#ifndef SITE_UCT_H_
#define SITE_UCT_H_

#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>

#include <stdint.h>

#define SITE_UCT_TL_NAME "rc_gdr"


/* The first fields of uct_rc_gdr_md_stats_t (rc_gdr_md.h), in its order;
 * `size` first: a module of another layout answers an error, not garbage */
typedef struct {
    uint64_t size, host_regs, dmabuf_regs, peermem_regs, bounce_regs,
             cache_hits, cache_entries, invalidations, num_gpus, emulated_gpu;
} site_md_stats_t;


/* One rc_gdr endpoint on its own worker, md and interface */
typedef struct {
    ucs_async_context_t *async;
    uct_worker_h        worker;
    uct_component_h     component;
    uct_md_h            md;
    uct_md_attr_t       md_attr;
    uct_iface_h         iface;
    uct_iface_attr_t    iface_attr;
    uct_ep_h            ep;
} site_node_t;


/* Seconds, monotonic */
double site_now(void);

/* The rc_gdr component; NULL when the module is not in this process */
uct_component_h site_component_find(void);

/* A symbol of the module: in the process's scope when preloaded, in the
 * module itself when UCX >= 1.22 opened it from UCX_PLUGIN_PATH */
void *site_module_sym(const char *name);

/* The md counters; UCS_ERR_UNSUPPORTED when the module is not in this
 * process */
ucs_status_t site_md_stats_query(uct_md_h md, site_md_stats_t *stats);

/* Opens a node on dev ("mlx5_0:1"); on failure, says on stderr which step
 * failed, closes what was opened, names the step in *step_p (the md's open
 * is "uct_md_open": a lane forced by UCX_RC_GDR_* that the gate refuses,
 * with the gate's line in the log) and returns its status */
ucs_status_t site_node_open(site_node_t *node, const char *dev,
                            const char *prog, const char **step_p);

void site_node_close(site_node_t *node);

/* Connects the endpoints of a and b to each other */
ucs_status_t site_node_connect_pair(site_node_t *a, site_node_t *b);

/* put (put != 0) or get zcopy of length bytes at local from a's endpoint,
 * retried while a has no resources and waited for, both nodes progressed:
 * the final status, or UCS_ERR_TIMED_OUT after timeout_s: then the
 * operation may still be in flight on its completion, and the caller ends
 * the process instead of going on */
ucs_status_t site_zcopy(site_node_t *a, site_node_t *b, int put, void *local,
                        uct_mem_h memh, size_t length, uint64_t remote_addr,
                        uct_rkey_t rkey, double timeout_s);

#endif
