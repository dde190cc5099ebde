/*
 * rc_gdr glue, compile-time part, for UCX 1.22.
 */

#ifndef UCT_RC_GDR_GLUE_V122_H_
#define UCT_RC_GDR_GLUE_V122_H_

#include <uct/base/uct_iface.h>
#include "rc_gdr_glue_math.h"


/* UCT_FLUSH_FLAG_REMOTE: from UCX 1.14 on. */
#define UCT_RC_GDR_HAVE_FLUSH_REMOTE 1

/* md query v2 and connect_to_ep v2 (1.14 on) */
#define UCT_RC_GDR_HAVE_V2_API       1

/* is_reachable v2 (1.15 on), ep_is_connected, rkey_compare, the md's
 * registration alignment (1.16 on) */
#define UCT_RC_GDR_HAVE_IS_REACHABLE_V2 1
#define UCT_RC_GDR_HAVE_EP_IS_CONNECTED 1
#define UCT_RC_GDR_HAVE_RKEY_COMPARE    1
#define UCT_RC_GDR_HAVE_REG_ALIGNMENT   1

/* uct_ep_invalidate() takes a parameter struct (1.21 on) */
#define UCT_RC_GDR_HAVE_EP_INVALIDATE_PARAMS 1

/* iface_query_v2 (1.22 on) */
#define UCT_RC_GDR_HAVE_IFACE_QUERY_V2 1


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
