/*
 * rc_gdr: which UCX does this process really run?
 *
 * libuct and libucs export no version query; libucp does (ucp_get_version),
 * and every UCX release ships the three libraries together. The plugin asks
 * the libucp already loaded in the process, or else the one installed beside
 * the libuct it is linked to, so the answer is about the UCX in use.
 *
 * Part of the glue (the only other place that knows the release), and of
 * the core library: the unit tests use it too.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "rc_gdr_glue.h"

#include <ucs/sys/string.h>

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>


typedef void (*uct_rc_gdr_get_version_func_t)(unsigned *major, unsigned *minor,
                                              unsigned *patch);


static void *uct_rc_gdr_glue_open_ucp(void)
{
    char lib_path[PATH_MAX], ucp_path[PATH_MAX];
    Dl_info info;
    void *handle;

    handle = dlopen("libucp.so.0", RTLD_LAZY | RTLD_NOLOAD);
    if (handle != NULL) {
        return handle;
    }

    /* Not loaded (a UCT-only program): open the one that ships with our
     * libuct, which is the release whose structures we will touch. */
    if ((dladdr((void*)uct_tl_register, &info) == 0) ||
        (info.dli_fname == NULL)) {
        return NULL;
    }

    ucs_strncpy_safe(lib_path, info.dli_fname, sizeof(lib_path));
    snprintf(ucp_path, sizeof(ucp_path), "%s/libucp.so.0", dirname(lib_path));
    return dlopen(ucp_path, RTLD_LAZY | RTLD_LOCAL);
}


ucs_status_t uct_rc_gdr_glue_running_version(uct_rc_gdr_ucx_version_t *ver_p)
{
    uct_rc_gdr_get_version_func_t get_version;
    void *handle;

    /* A symbol that the process already resolves wins: that is the one the
     * application itself uses (and what a test substitutes). */
    get_version = (uct_rc_gdr_get_version_func_t)dlsym(RTLD_DEFAULT,
                                                       "ucp_get_version");
    if (get_version == NULL) {
        handle = uct_rc_gdr_glue_open_ucp();
        if (handle == NULL) {
            return UCS_ERR_NO_ELEM;
        }
        get_version = (uct_rc_gdr_get_version_func_t)dlsym(handle,
                                                           "ucp_get_version");
        if (get_version == NULL) {
            return UCS_ERR_NO_ELEM;
        }
    }

    get_version(&ver_p->major, &ver_p->minor, &ver_p->patch);
    return UCS_OK;
}


ucs_status_t
uct_rc_gdr_glue_version_check(const uct_rc_gdr_ucx_version_t *running,
                              char *reason, size_t max)
{
    /* Internal layouts differ between releases, and sometimes between patch
     * releases of one branch: accept only the exact release. */
    if ((running->major == RC_GDR_UCX_MAJOR) &&
        (running->minor == RC_GDR_UCX_MINOR) &&
        (running->patch == RC_GDR_UCX_PATCH)) {
        return UCS_OK;
    }

    snprintf(reason, max,
             "rc_gdr was built for UCX %d.%d.%d but this process runs UCX "
             "%u.%u.%u; the transport is not registered (rebuild rc_gdr "
             "against this UCX: contrib/build.sh --ucx VERSION)",
             RC_GDR_UCX_MAJOR, RC_GDR_UCX_MINOR, RC_GDR_UCX_PATCH,
             running->major, running->minor, running->patch);
    return UCS_ERR_UNSUPPORTED;
}


void uct_rc_gdr_glue_built_version(uct_rc_gdr_ucx_version_t *ver_p)
{
    ver_p->major = RC_GDR_UCX_MAJOR;
    ver_p->minor = RC_GDR_UCX_MINOR;
    ver_p->patch = RC_GDR_UCX_PATCH;
}


void uct_rc_gdr_glue_refuse(const char *reason)
{
    /* Not ucs_error(): it reads UCX's global options, whose layout is this
     * build's, not necessarily the process's. One line, always shown. */
    fprintf(stderr, "[%d] %s\n", (int)getpid(), reason);
    fflush(stderr);
}


ucs_status_t uct_rc_gdr_glue_config_fill(void *opts, ucs_config_field_t *table,
                                         size_t size, const char *env_prefix,
                                         const char *table_prefix)
{
#if !RC_GDR_UCX_HAVE_FILL_OPTS_ENTRY
    return ucs_config_parser_fill_opts(opts, table, env_prefix, table_prefix,
                                       0);
#else
    /* 1.15 on: the table comes as a global list entry */
    ucs_config_global_list_entry_t entry = {
        .name   = "rc_gdr",
        .prefix = table_prefix,
        .table  = table,
        .size   = size
    };

    return ucs_config_parser_fill_opts(opts, &entry, env_prefix, 0);
#endif
}
