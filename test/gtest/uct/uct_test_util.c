/*
 * uct_test_util: what the UCT suites (and two benchmarks) share
 * (see uct_test_util.h).
 */

#define _GNU_SOURCE

#include "uct_test_util.h"
#include "../../../contrib/site/site_uct.h" /* what sites run shares these */

#include <uct/ib_gdr/rc_gdr_glue.h> /* which uct_ep_invalidate() */

#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


typedef ucs_status_t (*uct_test_md_stats_func_t)(uct_md_h md,
                                                 uct_test_md_stats_t *stats);

typedef ucs_status_t
(*uct_test_iface_stats_func_t)(uct_iface_h iface,
                               uct_test_iface_stats_t *stats);


double uct_test_timeout_s = 30.0;
size_t uct_test_rx_headroom;

static const char *uct_test_prog = "uct_test";
static uct_test_die_hook_t uct_test_die_hook;
static pid_t uct_test_die_hook_pid;


void uct_test_set_die_hook(uct_test_die_hook_t hook)
{
    uct_test_die_hook     = hook;
    uct_test_die_hook_pid = getpid();
}


void uct_test_init(const char *prog, double timeout_s)
{
    uct_test_prog      = prog;
    uct_test_timeout_s = timeout_s;
    setvbuf(stdout, NULL, _IOLBF, 0);
}

void uct_test_die(const char *what, ucs_status_t status)
{
    if ((uct_test_die_hook != NULL) && (getpid() == uct_test_die_hook_pid)) {
        uct_test_die_hook(what, status);
    }

    fprintf(stderr, "%s: %s: %s\n", uct_test_prog, what,
            ucs_status_string(status));
    exit(UCT_TEST_EXIT_SETUP);
}

double uct_test_now(void)
{
    return site_now();
}

void uct_test_fill(void *buf, size_t length, unsigned seed)
{
    unsigned char *p = buf;
    size_t i;

    for (i = 0; i < length; ++i) {
        p[i] = (unsigned char)(seed + i * 31 + (i >> 8));
    }
}

void uct_test_write_all(int fd, const void *buf, size_t length)
{
    if (write(fd, buf, length) != (ssize_t)length) {
        perror("write");
        uct_test_die("write", UCS_ERR_IO_ERROR);
    }
}

void uct_test_read_all(int fd, void *buf, size_t length)
{
    size_t done = 0;
    ssize_t ret;

    while (done < length) {
        ret = read(fd, (char*)buf + done, length - done);
        if (ret <= 0) {
            perror("read");
            uct_test_die("read", UCS_ERR_IO_ERROR);
        }
        done += ret;
    }
}


/* ------------------------------------------------------------- nodes -- */

uct_component_h uct_test_component_find(void)
{
    return site_component_find();
}

void uct_test_md_open(uct_test_node_t *node, const char *dev)
{
    uct_md_config_t *md_config;
    char md_name[64];
    ucs_status_t status;

    node->component = uct_test_component_find();
    if (node->component == NULL) {
        fprintf(stderr, "%s: component '%s' is not registered (is the "
                "module preloaded? . contrib/env.sh)\n", uct_test_prog,
                UCT_TEST_TL_NAME);
        uct_test_die("uct_query_components", UCS_ERR_NO_DEVICE);
    }

    status = uct_md_config_read(node->component, NULL, NULL, &md_config);
    if (status != UCS_OK) {
        uct_test_die("uct_md_config_read", status);
    }

    /* the md is the device without its port */
    snprintf(md_name, sizeof(md_name), "%s", dev);
    *strchrnul(md_name, ':') = '\0';
    status = uct_md_open(node->component, md_name, md_config, &node->md);
    uct_config_release(md_config);
    if (status != UCS_OK) {
        uct_test_die("uct_md_open", status);
    }

    status = uct_md_query(node->md, &node->md_attr);
    if (status != UCS_OK) {
        uct_test_die("uct_md_query", status);
    }
}

static ucs_status_t
uct_test_node_err_handler(void *arg, uct_ep_h ep, ucs_status_t status)
{
    uct_test_node_t *node = arg;

    node->ep_error        = 1;
    node->ep_error_status = status;
    return UCS_OK;
}

void uct_test_mem_reg(uct_test_node_t *node, void *buf, size_t size,
                      uct_mem_h *memh_p, void **rkey_buf_p)
{
    ucs_status_t status;
    uct_mem_h memh;
    void *rkey_buf;

    status = uct_md_mem_reg(node->md, buf, size, UCT_MD_MEM_ACCESS_ALL,
                            &memh);
    if (status != UCS_OK) {
        uct_test_die("uct_md_mem_reg", status);
    }

    rkey_buf = calloc(1, node->md_attr.rkey_packed_size);
    status   = uct_md_mkey_pack(node->md, memh, rkey_buf);
    if (status != UCS_OK) {
        uct_test_die("uct_md_mkey_pack", status);
    }

    *memh_p     = memh;
    *rkey_buf_p = rkey_buf;
}

void uct_test_node_open(uct_test_node_t *node, const char *dev,
                        size_t buf_size)
{
    uct_iface_config_t *iface_config;
    uct_iface_params_t params;
    uct_ep_params_t ep_params;
    ucs_status_t status;

    memset(node, 0, sizeof(*node));
    status = ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                      &node->async);
    if (status != UCS_OK) {
        uct_test_die("ucs_async_context_create", status);
    }

    status = uct_worker_create(node->async, UCS_THREAD_MODE_SINGLE,
                               &node->worker);
    if (status != UCS_OK) {
        uct_test_die("uct_worker_create", status);
    }

    uct_test_md_open(node, dev);
    status = uct_md_iface_config_read(node->md, UCT_TEST_TL_NAME, NULL, NULL,
                                      &iface_config);
    if (status != UCS_OK) {
        uct_test_die("uct_md_iface_config_read", status);
    }

    memset(&params, 0, sizeof(params));
    params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                  UCT_IFACE_PARAM_FIELD_DEVICE |
                                  UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                                  UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                                  UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = UCT_TEST_TL_NAME;
    params.mode.device.dev_name = dev;
    params.err_handler          = uct_test_node_err_handler;
    params.err_handler_arg      = node;
    params.err_handler_flags    = UCT_CB_FLAG_ASYNC;
    if (uct_test_rx_headroom > 0) {
        params.field_mask      |= UCT_IFACE_PARAM_FIELD_RX_HEADROOM;
        params.rx_headroom      = uct_test_rx_headroom;
    }
    status = uct_iface_open(node->md, node->worker, &params, iface_config,
                            &node->iface);
    uct_config_release(iface_config);
    if (status != UCS_OK) {
        uct_test_die("uct_iface_open", status);
    }

    uct_iface_query(node->iface, &node->iface_attr);
    uct_iface_progress_enable(node->iface,
                              UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);

    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    ep_params.iface      = node->iface;
    status = uct_ep_create(&ep_params, &node->ep);
    if (status != UCS_OK) {
        uct_test_die("uct_ep_create", status);
    }

    if (buf_size == 0) {
        return;
    }

    if (posix_memalign(&node->buf, 4096, buf_size) != 0) {
        uct_test_die("posix_memalign", UCS_ERR_NO_MEMORY);
    }
    memset(node->buf, 0, buf_size);
    uct_test_mem_reg(node, node->buf, buf_size, &node->memh,
                     &node->rkey_buf);
}

void uct_test_node_close(uct_test_node_t *node)
{
    /* a test may have destroyed the endpoint already */
    if (node->ep != NULL) {
        uct_ep_destroy(node->ep);
    }
    if (node->buf != NULL) {
        uct_md_mem_dereg(node->md, node->memh);
    }
    uct_iface_close(node->iface);
    uct_md_close(node->md);
    uct_worker_destroy(node->worker);
    ucs_async_context_destroy(node->async);
    free(node->rkey_buf);
    free(node->buf);
}

void uct_test_node_wire(const uct_test_node_t *node, uct_test_wire_t *wire_p)
{
    /* a peer reads fixed-size fields */
    if ((node->iface_attr.device_addr_len > UCT_TEST_ADDR_MAX) ||
        (node->iface_attr.ep_addr_len > UCT_TEST_ADDR_MAX) ||
        (node->md_attr.rkey_packed_size > UCT_TEST_ADDR_MAX)) {
        uct_test_die("address larger than UCT_TEST_ADDR_MAX",
                     UCS_ERR_BUFFER_TOO_SMALL);
    }

    memset(wire_p, 0, sizeof(*wire_p));
    uct_iface_get_device_address(node->iface,
                                 (uct_device_addr_t*)wire_p->dev);
    uct_ep_get_address(node->ep, (uct_ep_addr_t*)wire_p->ep);
    if (node->buf != NULL) {
        memcpy(wire_p->rkey, node->rkey_buf, node->md_attr.rkey_packed_size);
        wire_p->buf = (uintptr_t)node->buf;
    }
}

void uct_test_node_connect(uct_test_node_t *node, const uct_test_wire_t *peer)
{
    ucs_status_t status;

    status = uct_ep_connect_to_ep(node->ep,
                                  (const uct_device_addr_t*)peer->dev,
                                  (const uct_ep_addr_t*)peer->ep);
    if (status != UCS_OK) {
        uct_test_die("uct_ep_connect_to_ep", status);
    }
}

void uct_test_node_connect_pair(uct_test_node_t *a, uct_test_node_t *b,
                                uct_test_wire_t *wa, uct_test_wire_t *wb)
{
    uct_test_wire_t wire_a, wire_b;

    uct_test_node_wire(a, &wire_a);
    uct_test_node_wire(b, &wire_b);
    uct_test_node_connect(a, &wire_b);
    uct_test_node_connect(b, &wire_a);
    if (wa != NULL) {
        *wa = wire_a;
    }
    if (wb != NULL) {
        *wb = wire_b;
    }
}

pid_t uct_test_peer_fork(uct_test_node_t *node, const char *dev,
                         const char *peer_dev, size_t buf_size,
                         uct_test_wire_t *peer_wire_p,
                         uct_rkey_bundle_t *rkey_p)
{
    int to_child[2], to_parent[2];
    uct_test_wire_t wire;
    uct_test_node_t *nodes[1];
    uct_test_node_t peer;
    ucs_status_t status;
    pid_t child;
    char ready;

    if ((pipe(to_child) != 0) || (pipe(to_parent) != 0)) {
        perror("pipe");
        uct_test_die("pipe", UCS_ERR_IO_ERROR);
    }

    child = fork();
    if (child == 0) {
        /* the target: publishes its buffer and progresses until killed */
        nodes[0] = &peer;
        uct_test_node_open(&peer, peer_dev, buf_size);
        uct_test_node_wire(&peer, &wire);
        uct_test_write_all(to_parent[1], &wire, sizeof(wire));
        uct_test_read_all(to_child[0], &wire, sizeof(wire));
        uct_test_node_connect(&peer, &wire);
        uct_test_write_all(to_parent[1], "r", 1);
        for (;;) {
            uct_test_progress(nodes, 1);
        }
    }

    uct_test_node_open(node, dev, buf_size);
    uct_test_node_wire(node, &wire);
    uct_test_read_all(to_parent[0], peer_wire_p, sizeof(*peer_wire_p));
    uct_test_write_all(to_child[1], &wire, sizeof(wire));
    uct_test_node_connect(node, peer_wire_p);
    uct_test_read_all(to_parent[0], &ready, 1);

    status = uct_rkey_unpack(node->component, peer_wire_p->rkey, rkey_p);
    if (status != UCS_OK) {
        uct_test_die("uct_rkey_unpack", status);
    }
    return child;
}


/* --------------------------------------------------------- completion -- */

void uct_test_iov_init(uct_iov_t *iov, void *buffer, size_t length,
                       uct_mem_h memh)
{
    iov->buffer = buffer;
    iov->length = length;
    iov->memh   = memh;
    iov->stride = 0;
    iov->count  = 1;
}

void uct_test_progress(uct_test_node_t **nodes, int count)
{
    int i;

    for (i = 0; i < count; ++i) {
        if (nodes[i] != NULL) {
            uct_worker_progress(nodes[i]->worker);
        }
    }
}

static void uct_test_comp_cb(uct_completion_t *self)
{
    uct_test_comp_t *comp = ucs_container_of(self, uct_test_comp_t, comp);

    comp->status = self->status;
}

void uct_test_comp_init(uct_test_comp_t *comp)
{
    comp->comp.func   = uct_test_comp_cb;
    comp->comp.count  = 1;
    comp->comp.status = UCS_OK;
    comp->status      = UCS_OK;
}

ucs_status_t uct_test_comp_wait(uct_test_node_t **nodes, int count,
                                ucs_status_t status, uct_test_comp_t *comp)
{
    double deadline = uct_test_now() + uct_test_timeout_s;

    while ((status == UCS_INPROGRESS) && (comp->comp.count > 0)) {
        uct_test_progress(nodes, count);
        if (uct_test_now() > deadline) {
            return UCS_ERR_TIMED_OUT;
        }
    }
    return (status == UCS_INPROGRESS) ? comp->status : status;
}

ucs_status_t uct_test_ep_invalidate(uct_ep_h ep)
{
#if UCT_RC_GDR_HAVE_EP_INVALIDATE_PARAMS
    uct_ep_invalidate_params_t params = {0};

    return uct_ep_invalidate(ep, &params);
#else
    return uct_ep_invalidate(ep, 0);
#endif
}


ucs_status_t uct_test_ep_flush(uct_test_node_t **nodes, int count,
                               uct_ep_h ep)
{
    uct_test_comp_t comp;
    ucs_status_t status;

    uct_test_comp_init(&comp);
    status = UCT_TEST_RETRY(nodes, count, uct_ep_flush(ep, 0, &comp.comp));
    return uct_test_comp_wait(nodes, count, status, &comp);
}


/* ----------------------------------------------------------- counters -- */

/* The module is loaded as a plugin, not linked: its queries by dlsym, in
 * the process's scope (preloaded) or in the module itself (UCX >= 1.22 opens
 * it from UCX_PLUGIN_PATH with local symbols). */
void *uct_test_module_sym(const char *name)
{
    return site_module_sym(name);
}


static uct_test_iface_stats_func_t uct_test_iface_stats_func(void)
{
    static const char *name = "uct_rc_gdr_iface_stats_query";
    void *func              = uct_test_module_sym(name);

    if (func == NULL) {
        fprintf(stderr, "%s: %s not found (is the module preloaded? "
                ". contrib/env.sh)\n", uct_test_prog, name);
        uct_test_die("dlsym", UCS_ERR_NO_ELEM);
    }
    return (uct_test_iface_stats_func_t)func;
}

ucs_status_t uct_test_md_stats_query(uct_md_h md, uct_test_md_stats_t *stats)
{
    uct_test_md_stats_func_t query;

    query = (uct_test_md_stats_func_t)uct_test_module_sym(
                                            "uct_rc_gdr_md_stats_query");
    if (query == NULL) {
        return UCS_ERR_UNSUPPORTED;
    }

    memset(stats, 0, sizeof(*stats));
    stats->size = sizeof(*stats);
    return query(md, stats);
}

uct_test_md_stats_t uct_test_md_stats(uct_md_h md)
{
    uct_test_md_stats_t stats;
    ucs_status_t status;

    status = uct_test_md_stats_query(md, &stats);
    if (status != UCS_OK) {
        uct_test_die("uct_rc_gdr_md_stats_query", status);
    }
    return stats;
}

void uct_test_iface_stats_check(void)
{
    uct_test_iface_stats_func();
}

ucs_status_t uct_test_dev_stats(const char *dev,
                                uct_test_iface_stats_t *stats)
{
    typedef ucs_status_t (*query_func_t)(const char*,
                                         uct_test_iface_stats_t*);
    query_func_t query = (query_func_t)uct_test_module_sym(
                                "uct_rc_gdr_dev_stats_query");

    if (query == NULL) {
        return UCS_ERR_UNSUPPORTED;
    }
    memset(stats, 0, sizeof(*stats));
    stats->size = sizeof(*stats);
    return query(dev, stats);
}

uct_test_iface_stats_t uct_test_iface_stats(uct_iface_h iface)
{
    uct_test_iface_stats_t stats;
    ucs_status_t status;

    memset(&stats, 0, sizeof(stats));
    stats.size = sizeof(stats);
    status     = uct_test_iface_stats_func()(iface, &stats);
    if (status != UCS_OK) {
        uct_test_die("uct_rc_gdr_iface_stats_query", status);
    }

    /* the module answers with the size it has, at most ours */
    if (stats.size != sizeof(stats)) {
        fprintf(stderr, "%s: the module's stats are %" PRIu64 " bytes, "
                "this program expects %zu: update uct_test_iface_stats_t\n",
                uct_test_prog, stats.size, sizeof(stats));
        uct_test_die("uct_test_iface_stats", UCS_ERR_INVALID_PARAM);
    }
    return stats;
}
