/*
 * rc_gdr glue, compile-time part, for UCX 1.13.
 */

#ifndef UCT_RC_GDR_GLUE_V113_H_
#define UCT_RC_GDR_GLUE_V113_H_

#include <uct/base/uct_iface.h>
#include "rc_gdr_glue_math.h"


/* UCT_FLUSH_FLAG_REMOTE exists from UCX 1.14 on. */
#define UCT_RC_GDR_HAVE_FLUSH_REMOTE 0

/* md query v2 and connect_to_ep v2 (1.14 on) */
#define UCT_RC_GDR_HAVE_V2_API       0

/* is_reachable v2 (1.15 on), ep_is_connected, rkey_compare, the md's
 * registration alignment (1.16 on) */
#define UCT_RC_GDR_HAVE_IS_REACHABLE_V2 0
#define UCT_RC_GDR_HAVE_EP_IS_CONNECTED 0
#define UCT_RC_GDR_HAVE_RKEY_COMPARE    0
#define UCT_RC_GDR_HAVE_REG_ALIGNMENT   0

/* uct_ep_invalidate() takes a parameter struct (1.21 on) */
#define UCT_RC_GDR_HAVE_EP_INVALIDATE_PARAMS 0

/* iface_query_v2 (1.22 on) */
#define UCT_RC_GDR_HAVE_IFACE_QUERY_V2 0


/* The send/receive buffer pool's knobs (TX_MAX_BUFS, TX_BUFS_GROW). */
#define UCT_RC_GDR_IFACE_MPOOL_CONFIG_FIELDS(_prefix, _dfl_max, _dfl_grow, \
                                             _mp_name, _offset, _desc) \
    UCT_IFACE_MPOOL_CONFIG_FIELDS(_prefix, _dfl_max, _dfl_grow, _mp_name, \
                                  _offset, _desc)

#endif
