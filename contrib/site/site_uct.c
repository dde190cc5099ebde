/*
 * site_uct: the site programs' shared UCT steps (site_uct.h).
 *
 * See file LICENSE for terms.
 */

#define _GNU_SOURCE

#include "site_uct.h"

#include <ucs/async/async.h>

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>


typedef ucs_status_t (*site_md_stats_func_t)(uct_md_h md,
                                             site_md_stats_t *stats);

typedef struct {
    uct_completion_t comp;
    ucs_status_t     status;
} site_comp_t;


double site_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

uct_component_h site_component_find(void)
{
    uct_component_h *components, found = NULL;
    uct_component_attr_t attr;
    unsigned i, count;

    if (uct_query_components(&components, &count) != UCS_OK) {
        return NULL;
    }

    for (i = 0; i < count; ++i) {
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
        if ((uct_component_query(components[i], &attr) == UCS_OK) &&
            !strcmp(attr.name, SITE_UCT_TL_NAME)) {
            found = components[i];
        }
    }
    uct_release_component_list(components);
    return found;
}

void *site_module_sym(const char *name)
{
    void *func = dlsym(RTLD_DEFAULT, name);
    void *module;

    if (func == NULL) {
        site_component_find(); /* UCX loads its plugins on this query */
        module = dlopen("libuct_ib_gdr.so", RTLD_LAZY | RTLD_NOLOAD);
        if (module != NULL) {
            func = dlsym(module, name);
            dlclose(module);
        }
    }
    return func;
}

ucs_status_t site_md_stats_query(uct_md_h md, site_md_stats_t *stats)
{
    site_md_stats_func_t query;

    query = (site_md_stats_func_t)site_module_sym("uct_rc_gdr_md_stats_query");
    if (query == NULL) {
        return UCS_ERR_UNSUPPORTED;
    }

    memset(stats, 0, sizeof(*stats));
    stats->size = sizeof(*stats);
    return query(md, stats);
}

static ucs_status_t site_node_md_open(site_node_t *node, const char *dev,
                                      const char *prog)
{
    uct_md_config_t *md_config;
    char md_name[64];
    ucs_status_t status;

    node->component = site_component_find();
    if (node->component == NULL) {
        fprintf(stderr, "%s: component '%s' is not registered (is the "
                "module preloaded? . contrib/env.sh)\n", prog,
                SITE_UCT_TL_NAME);
        return UCS_ERR_NO_DEVICE;
    }

    status = uct_md_config_read(node->component, NULL, NULL, &md_config);
    if (status != UCS_OK) {
        fprintf(stderr, "%s: uct_md_config_read: %s\n", prog,
                ucs_status_string(status));
        return status;
    }

    /* the md is the device without its port */
    snprintf(md_name, sizeof(md_name), "%s", dev);
    *strchrnul(md_name, ':') = '\0';
    status = uct_md_open(node->component, md_name, md_config, &node->md);
    uct_config_release(md_config);
    if (status != UCS_OK) {
        fprintf(stderr, "%s: the rc_gdr memory domain of %s did not open: "
                "%s\n", prog, md_name, ucs_status_string(status));
        node->md = NULL;
        return status;
    }

    status = uct_md_query(node->md, &node->md_attr);
    if (status != UCS_OK) {
        fprintf(stderr, "%s: uct_md_query: %s\n", prog,
                ucs_status_string(status));
    }
    return status;
}

ucs_status_t site_node_open(site_node_t *node, const char *dev,
                            const char *prog, const char **step_p)
{
    uct_iface_config_t *iface_config;
    uct_iface_params_t params;
    uct_ep_params_t ep_params;
    const char *step;
    ucs_status_t status;

    memset(node, 0, sizeof(*node));
    step   = "ucs_async_context_create";
    status = ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                      &node->async);
    if (status != UCS_OK) {
        goto err;
    }

    step   = "uct_worker_create";
    status = uct_worker_create(node->async, UCS_THREAD_MODE_SINGLE,
                               &node->worker);
    if (status != UCS_OK) {
        goto err_close;
    }

    status = site_node_md_open(node, dev, prog);
    if (status != UCS_OK) {
        *step_p = (node->component == NULL) ? "uct_query_components" :
                  "uct_md_open";
        site_node_close(node);
        return status;
    }

    step   = "uct_md_iface_config_read";
    status = uct_md_iface_config_read(node->md, SITE_UCT_TL_NAME, NULL, NULL,
                                      &iface_config);
    if (status != UCS_OK) {
        goto err_close;
    }

    memset(&params, 0, sizeof(params));
    params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                  UCT_IFACE_PARAM_FIELD_DEVICE;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = SITE_UCT_TL_NAME;
    params.mode.device.dev_name = dev;
    step   = "uct_iface_open";
    status = uct_iface_open(node->md, node->worker, &params, iface_config,
                            &node->iface);
    uct_config_release(iface_config);
    if (status != UCS_OK) {
        node->iface = NULL;
        goto err_close;
    }

    step   = "uct_iface_query";
    status = uct_iface_query(node->iface, &node->iface_attr);
    if (status != UCS_OK) {
        goto err_close;
    }
    uct_iface_progress_enable(node->iface,
                              UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);

    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    ep_params.iface      = node->iface;
    step   = "uct_ep_create";
    status = uct_ep_create(&ep_params, &node->ep);
    if (status != UCS_OK) {
        node->ep = NULL;
        goto err_close;
    }
    return UCS_OK;

err_close:
    site_node_close(node);
err:
    fprintf(stderr, "%s: %s on %s: %s\n", prog, step, dev,
            ucs_status_string(status));
    *step_p = step;
    return status;
}

void site_node_close(site_node_t *node)
{
    if (node->ep != NULL) {
        uct_ep_destroy(node->ep);
    }
    if (node->iface != NULL) {
        uct_iface_close(node->iface);
    }
    if (node->md != NULL) {
        uct_md_close(node->md);
    }
    if (node->worker != NULL) {
        uct_worker_destroy(node->worker);
    }
    if (node->async != NULL) {
        ucs_async_context_destroy(node->async);
    }
    memset(node, 0, sizeof(*node));
}

ucs_status_t site_node_connect_pair(site_node_t *a, site_node_t *b)
{
    char dev_a[256], dev_b[256], ep_a[256], ep_b[256];
    ucs_status_t status;

    if ((a->iface_attr.device_addr_len > sizeof(dev_a)) ||
        (b->iface_attr.device_addr_len > sizeof(dev_b)) ||
        (a->iface_attr.ep_addr_len > sizeof(ep_a)) ||
        (b->iface_attr.ep_addr_len > sizeof(ep_b))) {
        return UCS_ERR_BUFFER_TOO_SMALL;
    }

    status = uct_iface_get_device_address(a->iface,
                                          (uct_device_addr_t*)dev_a);
    if (status == UCS_OK) {
        status = uct_iface_get_device_address(b->iface,
                                              (uct_device_addr_t*)dev_b);
    }
    if (status == UCS_OK) {
        status = uct_ep_get_address(a->ep, (uct_ep_addr_t*)ep_a);
    }
    if (status == UCS_OK) {
        status = uct_ep_get_address(b->ep, (uct_ep_addr_t*)ep_b);
    }
    if (status == UCS_OK) {
        status = uct_ep_connect_to_ep(a->ep, (uct_device_addr_t*)dev_b,
                                      (uct_ep_addr_t*)ep_b);
    }
    if (status == UCS_OK) {
        status = uct_ep_connect_to_ep(b->ep, (uct_device_addr_t*)dev_a,
                                      (uct_ep_addr_t*)ep_a);
    }
    return status;
}

static void site_comp_cb(uct_completion_t *self)
{
    site_comp_t *comp = ucs_container_of(self, site_comp_t, comp);

    comp->status = self->status;
}

static void site_progress(site_node_t *a, site_node_t *b)
{
    uct_worker_progress(a->worker);
    uct_worker_progress(b->worker);
}

ucs_status_t site_zcopy(site_node_t *a, site_node_t *b, int put, void *local,
                        uct_mem_h memh, size_t length, uint64_t remote_addr,
                        uct_rkey_t rkey, double timeout_s)
{
    double deadline = site_now() + timeout_s;
    site_comp_t comp;
    ucs_status_t status;
    uct_iov_t iov;

    iov.buffer = local;
    iov.length = length;
    iov.memh   = memh;
    iov.stride = 0;
    iov.count  = 1;

    comp.comp.func   = site_comp_cb;
    comp.comp.count  = 1;
    comp.comp.status = UCS_OK;
    comp.status      = UCS_OK;

    for (;;) {
        status = put ? uct_ep_put_zcopy(a->ep, &iov, 1, remote_addr, rkey,
                                        &comp.comp) :
                       uct_ep_get_zcopy(a->ep, &iov, 1, remote_addr, rkey,
                                        &comp.comp);
        if ((status != UCS_ERR_NO_RESOURCE) || (site_now() > deadline)) {
            break;
        }
        site_progress(a, b);
    }

    while ((status == UCS_INPROGRESS) && (comp.comp.count > 0)) {
        site_progress(a, b);
        if (site_now() > deadline) {
            return UCS_ERR_TIMED_OUT;
        }
    }
    return (status == UCS_INPROGRESS) ? comp.status : status;
}
