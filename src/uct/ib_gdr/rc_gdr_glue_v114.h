/*
 * rc_gdr glue, compile-time part, for UCX 1.14 - 1.21 (md attributes v2,
 * mem_query without memory flags).
 */

#ifndef UCT_RC_GDR_GLUE_V114_H_
#define UCT_RC_GDR_GLUE_V114_H_

#include <uct/base/uct_iface.h>
#include "rc_gdr_glue_math.h"


/* UCT_FLUSH_FLAG_REMOTE: from UCX 1.14 on. */
#define UCT_RC_GDR_HAVE_FLUSH_REMOTE 1

/* md query v2 and connect_to_ep v2 (1.14 on) */
#define UCT_RC_GDR_HAVE_V2_API       1

/* What came later in the generation, as configure found it: is_reachable
 * v2 with a scope (1.15), ep_is_connected, rkey_compare and the md's
 * registration alignment (1.16) */
#define UCT_RC_GDR_HAVE_IS_REACHABLE_V2 RC_GDR_UCX_HAVE_IFACE_IS_REACHABLE_V2
#define UCT_RC_GDR_HAVE_EP_IS_CONNECTED RC_GDR_UCX_HAVE_EP_IS_CONNECTED
#define UCT_RC_GDR_HAVE_RKEY_COMPARE    RC_GDR_UCX_HAVE_RKEY_COMPARE
#define UCT_RC_GDR_HAVE_REG_ALIGNMENT   RC_GDR_UCX_HAVE_REG_ALIGNMENT

/* uct_ep_invalidate() takes a parameter struct (1.21 on) */
#define UCT_RC_GDR_HAVE_EP_INVALIDATE_PARAMS \
    RC_GDR_UCX_HAVE_EP_INVALIDATE_PARAMS

/* iface_query_v2 of the plugin generation (1.22: SGL put, tokens); 1.20's
 * asks only about device memory elements, answered in the glue unit */
#define UCT_RC_GDR_HAVE_IFACE_QUERY_V2 0


/*
 * What this generation references and older releases lack: weak, so that
 * the module still loads into a process of an older release (where it
 * refuses to register, in one line) instead of failing the dynamic link
 * ("symbol lookup error"). test/host/cross.sh checks the list is complete.
 */
#pragma weak ucs_config_doc_nop
#pragma weak ucs_mpool_params_reset


/* The send/receive buffer pool's knobs; 1.14 added chunk size and growth
 * factor. */
#define UCT_RC_GDR_IFACE_MPOOL_CONFIG_FIELDS(_prefix, _dfl_max, _dfl_grow, \
                                             _mp_name, _offset, _desc) \
    UCT_IFACE_MPOOL_CONFIG_FIELDS(_prefix, _dfl_max, _dfl_grow, 128m, 1.0, \
                                  _mp_name, _offset, _desc)

#endif
