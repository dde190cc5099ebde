/*
 * rc_gdr: the contract between rc_gdr's core and the UCX release it runs in.
 *
 * UCX has no stable ABI for transports: the md ops table, the internal iface
 * ops, the component struct, attribute and parameter structs change between
 * releases (../shared/research/ucx_internals.md, section 1). rc_gdr's core
 * speaks only the release-neutral terms below: it fills its own capability
 * and attribute structs and offers functions of its own signatures. One glue
 * unit per UCX API generation, chosen by configure, copies those into the
 * release's structs and builds its tables (copy-in adapters):
 *
 *   rc_gdr_glue_v113.{h,c}   no uct_md_attr_v2_t (UCX 1.13)
 *   rc_gdr_glue_v114.{h,c}   uct_md_attr_v2_t and the internal
 *                            ep_connect_to_ep_v2, mem_query without memory
 *                            flags (UCX 1.14 - 1.21; is_reachable v2 from
 *                            1.15, rkey_compare and ep_is_connected from 1.16,
 *                            ep_invalidate with parameters in 1.21)
 *   rc_gdr_glue_v122.{h,c}   uct_md_mem_attr_v2_t (UCX 1.22: mem_query with
 *                            memory flags, iface_query_v2 with tokens, ...)
 *
 * configure picks the unit by what the UCX headers declare, and passes what
 * changed within a generation as RC_GDR_UCX_HAVE_* (0 or 1), which only the
 * glue reads (the glue headers turn those tests need into UCT_RC_GDR_HAVE_*).
 *
 * Nothing outside the glue files tests the UCX version
 * (test/host/glue_only.sh checks it).
 */

#ifndef UCT_RC_GDR_GLUE_H_
#define UCT_RC_GDR_GLUE_H_

#include <uct/base/uct_md.h>
#include <uct/base/uct_iface.h>
#include <uct/base/uct_component.h>

/* The generation's compile-time part: feature macros, config-table macros
 * (configure sets RC_GDR_GLUE_HEADER). */
#include RC_GDR_GLUE_HEADER


/* ------------------------------------------------------------------------
 * What the core fills, in rc_gdr's own terms
 * ------------------------------------------------------------------------ */

/* Memory domain capabilities: every field is meaningful; a release copies
 * those it has. */
typedef struct uct_rc_gdr_md_caps {
    uint64_t          flags;                  /* UCT_MD_FLAG_xx */
    uint64_t          reg_mem_types;
    uint64_t          reg_nonblock_mem_types;
    uint64_t          cache_mem_types;        /* registrations a cache may
                                                 keep: the md is told when
                                                 such memory goes */
    uint64_t          gva_mem_types;
    uint64_t          detect_mem_types;
    uint64_t          alloc_mem_types;
    uint64_t          access_mem_types;
    uint64_t          dmabuf_mem_types;
    size_t            max_alloc;
    size_t            max_reg;
    size_t            rkey_packed_size;
    size_t            exported_mkey_packed_size;
    size_t            reg_alignment;          /* >= 1 */
    ucs_linear_func_t reg_cost;
    const char        *component_name;
    const char        *global_id;             /* unique per device */
    size_t            global_id_length;
    ucs_cpu_set_t     local_cpus;
} uct_rc_gdr_md_caps_t;


/* What a memory query tells about [address, address + length). */
typedef struct uct_rc_gdr_mem_info {
    ucs_memory_type_t mem_type;
    ucs_sys_device_t  sys_dev;
    void              *base_address;
    size_t            alloc_length;
} uct_rc_gdr_mem_info_t;


/* ------------------------------------------------------------------------
 * What the core offers the glue (rc_gdr_md.c, rc_gdr_iface.c, rc_gdr_ep.c)
 * ------------------------------------------------------------------------ */

void uct_rc_gdr_md_close(uct_md_h tl_md);
void uct_rc_gdr_md_caps(uct_md_h tl_md, uct_rc_gdr_md_caps_t *caps);
/* @a flags: UCT_MD_MEM_FLAG_xx and UCT_MD_MEM_ACCESS_xx; host memory gets
 * all access whatever it asks (UCT_RC_GDR_MD_HOST_ACCESS) */
ucs_status_t uct_rc_gdr_md_reg(uct_md_h tl_md, void *address, size_t length,
                               uint64_t flags, uct_mem_h *memh_p);
ucs_status_t uct_rc_gdr_md_mem_dereg(uct_md_h tl_md,
                                     const uct_md_mem_dereg_params_t *params);
ucs_status_t uct_rc_gdr_md_mem_advise(uct_md_h tl_md, uct_mem_h memh,
                                      void *address, size_t length,
                                      unsigned advice);
ucs_status_t uct_rc_gdr_md_mem_info(uct_md_h tl_md, const void *address,
                                    size_t length,
                                    uct_rc_gdr_mem_info_t *info);
ucs_status_t uct_rc_gdr_md_detect_memory_type(uct_md_h tl_md,
                                              const void *address,
                                              size_t length,
                                              ucs_memory_type_t *mem_type_p);
ucs_status_t uct_rc_gdr_md_pack(uct_md_h tl_md, uct_mem_h memh,
                                void *rkey_buffer);
ucs_status_t uct_rc_gdr_md_unpack(const void *rkey_buffer, uct_rkey_t *rkey_p,
                                  void **handle_p);
/* <0, 0, >0 as memcmp, for remote keys of this component */
int uct_rc_gdr_md_rkey_cmp(uct_rkey_t rkey1, uct_rkey_t rkey2);
ucs_status_t uct_rc_gdr_md_query_resources(uct_component_t *component,
                                           uct_md_resource_desc_t **resources_p,
                                           unsigned *num_resources_p);
ucs_status_t uct_rc_gdr_md_open(uct_component_t *component,
                                const char *md_name,
                                const uct_md_config_t *config,
                                uct_md_h *md_p);
extern ucs_config_field_t uct_rc_gdr_md_config_table[];

ucs_status_t uct_rc_gdr_iface_estimate_perf(uct_iface_h tl_iface,
                                            uct_perf_attr_t *perf_attr);
/* On refusal, a reason in @a why (may be NULL) */
int uct_rc_gdr_iface_reachable(uct_iface_h tl_iface,
                               const uct_device_addr_t *dev_addr,
                               char *why, size_t max);
/* Whether @a dev_addr is this interface's own device */
int uct_rc_gdr_iface_same_device(uct_iface_h tl_iface,
                                 const uct_device_addr_t *dev_addr);

/* The endpoint's (connect_to_ep, is_connected_to, invalidate): every
 * uct_rc_gdr_ep_* prototype is in rc_gdr_ep.h */


/* ------------------------------------------------------------------------
 * What the glue unit provides
 * ------------------------------------------------------------------------ */

extern uct_component_t          uct_rc_gdr_component;
extern uct_md_ops_t             uct_rc_gdr_md_ops;
extern uct_iface_internal_ops_t uct_rc_gdr_iface_internal_ops;

/* The thread mode a UCT worker was created with (uct_priv_worker_t, the
 * same in every supported release so far) */
static inline ucs_thread_mode_t
uct_rc_gdr_glue_worker_thread_mode(uct_worker_h worker)
{
    return ucs_derived_of(worker, uct_priv_worker_t)->thread_mode;
}

/* A plain memory pool (no registration): ucs_mpool_init of this release. */
ucs_status_t uct_rc_gdr_glue_mpool_init(ucs_mpool_t *mp, size_t elem_size,
                                        size_t alignment,
                                        unsigned elems_per_chunk,
                                        unsigned max_elems,
                                        ucs_mpool_ops_t *ops,
                                        const char *name);


/* ------------------------------------------------------------------------
 * Which release (rc_gdr_glue_version.c: also in the core library)
 * ------------------------------------------------------------------------ */

typedef struct uct_rc_gdr_ucx_version {
    unsigned major;
    unsigned minor;
    unsigned patch;
} uct_rc_gdr_ucx_version_t;

/* The release this build is for. */
void uct_rc_gdr_glue_built_version(uct_rc_gdr_ucx_version_t *ver_p);

/* The release the process really runs (asks the libucp in the process). */
ucs_status_t uct_rc_gdr_glue_running_version(uct_rc_gdr_ucx_version_t *ver_p);

/*
 * Load-time check: refuse to register (instead of crashing later) when the
 * process runs another release than the one the module was built against.
 * On refusal, @a reason describes the mismatch in one line.
 */
ucs_status_t
uct_rc_gdr_glue_version_check(const uct_rc_gdr_ucx_version_t *running,
                              char *reason, size_t max);

/*
 * Says why the module does not register, on stderr, without UCX's logger:
 * in a process of another release, UCX's globals have another layout.
 */
void uct_rc_gdr_glue_refuse(const char *reason);

/* Names a system device in UCX's topology (what ucx_info -d prints), at
 * the priority this release's own transports give a device of that kind:
 * @a nic a NIC, else a GPU. */
void uct_rc_gdr_glue_sys_dev_set_name(ucs_sys_device_t sys_dev,
                                      const char *name, int nic);

/* ucs_config_parser_fill_opts of this release, for a table of rc_gdr's own
 * (tests). */
ucs_status_t uct_rc_gdr_glue_config_fill(void *opts, ucs_config_field_t *table,
                                         size_t size, const char *env_prefix,
                                         const char *table_prefix);

#endif
