/*
 * callgrind-progress: names the progress function a UCT transport registers
 * with its worker, as callgrind names it, for contrib/bench-callgrind.sh.
 *
 * UCX's rc_verbs registers a static function, which a distribution's
 * stripped library does not name; callgrind then calls it by its offset in
 * the library ("0x000000000002dc80"), and so does this program: it opens an
 * interface of the transport on the device, enables its progress, and looks
 * up the callback the worker got with dladdr().
 *
 *   callgrind-progress TL DEVICE     e.g. rc_verbs rxe1:1
 *
 * Prints the name (or 0x offset) and the library, one line; exits non-zero
 * when the transport cannot be opened there.
 *
 * Built by contrib/bench-callgrind.sh in the guest:
 *   cc -o callgrind-progress callgrind-progress.c -luct -lucs -ldl
 */

#define _GNU_SOURCE
#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static int open_iface(uct_worker_h worker, const char *tl, const char *dev,
                      uct_md_h *md_p, uct_iface_h *iface_p)
{
    uct_component_h *components;
    unsigned num_components, c, m, t;
    uct_component_attr_t cattr;
    uct_md_config_t *md_config;
    uct_iface_config_t *iface_config;
    uct_tl_resource_desc_t *tls;
    unsigned num_tls;
    uct_iface_params_t params;
    ucs_status_t status;
    int found;

    if (uct_query_components(&components, &num_components) != UCS_OK) {
        return -1;
    }

    for (c = 0; c < num_components; ++c) {
        memset(&cattr, 0, sizeof(cattr));
        cattr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
        if (uct_component_query(components[c], &cattr) != UCS_OK) {
            continue;
        }
        cattr.md_resources = calloc(cattr.md_resource_count + 1,
                                    sizeof(*cattr.md_resources));
        cattr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        if (uct_component_query(components[c], &cattr) != UCS_OK) {
            free(cattr.md_resources);
            continue;
        }

        for (m = 0; m < cattr.md_resource_count; ++m) {
            if (uct_md_config_read(components[c], NULL, NULL,
                                   &md_config) != UCS_OK) {
                continue;
            }
            status = uct_md_open(components[c],
                                 cattr.md_resources[m].md_name, md_config,
                                 md_p);
            uct_config_release(md_config);
            if (status != UCS_OK) {
                continue;
            }

            found = 0;
            if (uct_md_query_tl_resources(*md_p, &tls, &num_tls) == UCS_OK) {
                for (t = 0; t < num_tls; ++t) {
                    found |= !strcmp(tls[t].tl_name, tl) &&
                             !strcmp(tls[t].dev_name, dev);
                }
                uct_release_tl_resource_list(tls);
            }

            if (found &&
                (uct_md_iface_config_read(*md_p, tl, NULL, NULL,
                                          &iface_config) == UCS_OK)) {
                memset(&params, 0, sizeof(params));
                params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                              UCT_IFACE_PARAM_FIELD_DEVICE;
                params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
                params.mode.device.tl_name  = tl;
                params.mode.device.dev_name = dev;
                status = uct_iface_open(*md_p, worker, &params, iface_config,
                                        iface_p);
                uct_config_release(iface_config);
                if (status == UCS_OK) {
                    free(cattr.md_resources);
                    uct_release_component_list(components);
                    return 0;
                }
            }
            uct_md_close(*md_p);
        }
        free(cattr.md_resources);
    }

    uct_release_component_list(components);
    return -1;
}


int main(int argc, char **argv)
{
    ucs_async_context_t *async;
    uct_worker_h worker;
    uct_iface_h iface;
    uct_md_h md;
    Dl_info info;
    void *cb;

    if (argc != 3) {
        fprintf(stderr, "usage: %s TL DEVICE\n", argv[0]);
        return 2;
    }

    if ((ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                  &async) != UCS_OK) ||
        (uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker) !=
         UCS_OK)) {
        fprintf(stderr, "callgrind-progress: no UCT worker\n");
        return 1;
    }

    if (open_iface(worker, argv[1], argv[2], &md, &iface) != 0) {
        fprintf(stderr, "callgrind-progress: cannot open %s on %s\n",
                argv[1], argv[2]);
        return 1;
    }

    uct_iface_progress_enable(iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    cb = (void*)worker->progress_q.fast_elems[0].cb;
    if ((cb == NULL) || !dladdr(cb, &info)) {
        fprintf(stderr, "callgrind-progress: %s registered no progress\n",
                argv[1]);
        return 1;
    }

    if ((info.dli_sname != NULL) && (info.dli_saddr == cb)) {
        printf("%s %s\n", info.dli_sname, info.dli_fname);
    } else {
        printf("0x%016lx %s\n",
               (unsigned long)((char*)cb - (char*)info.dli_fbase),
               info.dli_fname);
    }

    uct_iface_close(iface);
    uct_md_close(md);
    uct_worker_destroy(worker);
    ucs_async_context_destroy(async);
    return 0;
}
