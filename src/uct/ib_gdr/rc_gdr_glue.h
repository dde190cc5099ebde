/*
 * rc_gdr: the one place that knows which UCX release it is built against.
 *
 * UCX has no stable ABI for transports: the md ops table, the internal iface
 * ops, the component struct and several signatures change between releases
 * (../shared/research/ucx_internals.md, section 1). Everything that differs
 * is expressed here, so porting to another release is one diff of this file
 * (plus rc_gdr_glue_version.c for the load-time check).
 */

#ifndef UCT_RC_GDR_GLUE_H_
#define UCT_RC_GDR_GLUE_H_

#include <uct/base/uct_md.h>
#include <uct/base/uct_iface.h>
#include <uct/base/uct_component.h>


#if !(RC_GDR_UCX_MAJOR == 1 && RC_GDR_UCX_MINOR == 13)
#  error "rc_gdr_glue.h covers UCX 1.13 only: add the new release here"
#endif


/* UCT_FLUSH_FLAG_REMOTE exists from UCX 1.14 on. */
#define UCT_RC_GDR_HAVE_FLUSH_REMOTE 0


/* md->ops->query takes uct_md_attr_t (1.13) or uct_md_attr_v2_t (>= 1.14). */
typedef uct_md_attr_t uct_rc_gdr_md_attr_t;

/* md->ops->mem_reg: flags (1.13) or uct_md_mem_reg_params_t (>= 1.14). */
#define UCT_RC_GDR_MEM_REG_ARGS \
    uct_md_h tl_md, void *address, size_t length, unsigned flags, \
    uct_mem_h *memh_p

/* md->ops->mkey_pack: no address/length arguments before 1.18. */
#define UCT_RC_GDR_MKEY_PACK_ARGS \
    uct_md_h tl_md, uct_mem_h memh, \
    const uct_md_mkey_pack_params_t *params, void *rkey_buffer

/* component->rkey_unpack: gained uct_rkey_unpack_params_t in 1.19. */
#define UCT_RC_GDR_RKEY_UNPACK_ARGS \
    uct_component_t *component, const void *rkey_buffer, \
    uct_rkey_t *rkey_p, void **handle_p


/* The md ops table, in the member order of this release. */
#define UCT_RC_GDR_MD_OPS_INITIALIZER(_prefix) \
    { \
        .close                  = _prefix##_close, \
        .query                  = _prefix##_query, \
        .mem_alloc              = (uct_md_mem_alloc_func_t) \
                                      ucs_empty_function_return_unsupported, \
        .mem_free               = (uct_md_mem_free_func_t) \
                                      ucs_empty_function_return_unsupported, \
        .mem_advise             = (uct_md_mem_advise_func_t) \
                                      ucs_empty_function_return_unsupported, \
        .mem_reg                = _prefix##_mem_reg, \
        .mem_dereg              = _prefix##_mem_dereg, \
        .mem_query              = _prefix##_mem_query, \
        .mkey_pack              = _prefix##_mkey_pack, \
        .is_sockaddr_accessible = (uct_md_is_sockaddr_accessible_func_t) \
                                      ucs_empty_function_return_zero_int, \
        .detect_memory_type     = _prefix##_detect_memory_type \
    }


/* The internal iface ops, in the member order of this release. */
#define UCT_RC_GDR_IFACE_INTERNAL_OPS_INITIALIZER(_prefix) \
    { \
        .iface_estimate_perf = _prefix##_iface_estimate_perf, \
        .iface_vfs_refresh   = (uct_iface_vfs_refresh_func_t) \
                                   ucs_empty_function, \
        .ep_query            = (uct_ep_query_func_t) \
                                   ucs_empty_function_return_unsupported, \
        .ep_invalidate       = _prefix##_ep_invalidate \
    }


/* The component struct of this release (rkey_compare came in 1.16). */
#define UCT_RC_GDR_COMPONENT_INITIALIZER(_self, _name, _query_md_resources, \
                                         _md_open, _rkey_unpack, \
                                         _rkey_release, _md_config_name, \
                                         _md_config_prefix, \
                                         _md_config_table, _md_config_type) \
    { \
        .name               = _name, \
        .query_md_resources = _query_md_resources, \
        .md_open            = _md_open, \
        .cm_open            = (uct_component_cm_open_func_t) \
                                  ucs_empty_function_return_unsupported, \
        .rkey_unpack        = _rkey_unpack, \
        .rkey_ptr           = (uct_component_rkey_ptr_func_t) \
                                  ucs_empty_function_return_unsupported, \
        .rkey_release       = _rkey_release, \
        .md_config          = { \
            .name           = _md_config_name, \
            .prefix         = _md_config_prefix, \
            .table          = _md_config_table, \
            .size           = sizeof(_md_config_type), \
        }, \
        .cm_config          = UCS_CONFIG_EMPTY_GLOBAL_LIST_ENTRY, \
        .tl_list            = UCT_COMPONENT_TL_LIST_INITIALIZER(_self), \
        .flags              = 0, \
        .md_vfs_init        = (uct_component_md_vfs_init_func_t) \
                                  ucs_empty_function \
    }


/*
 * Load-time check of the UCX the process really runs: refuse to register
 * (instead of crashing later) when it is not the release the plugin was built
 * against. On refusal, *reason_p describes the mismatch.
 */
typedef struct uct_rc_gdr_ucx_version {
    unsigned major;
    unsigned minor;
    unsigned patch;
} uct_rc_gdr_ucx_version_t;

ucs_status_t uct_rc_gdr_glue_running_version(uct_rc_gdr_ucx_version_t *ver_p);

ucs_status_t
uct_rc_gdr_glue_version_check(const uct_rc_gdr_ucx_version_t *running,
                              char *reason, size_t max);

#endif
