/**
 * Test helper: the registration cache's invariant checker. Test code, not
 * the product: it reads the cache's layout through rc_gdr_rcache_int.h.
 *
 * See file LICENSE for terms.
 */

#ifndef RC_GDR_TEST_RCACHE_CHECK_H_
#define RC_GDR_TEST_RCACHE_CHECK_H_

#include <uct/ib_gdr/rc_gdr_rcache.h>

BEGIN_C_DECLS

/*
 * Verify the tree (order, AVL balance, subtree max end), the counters, the
 * kept list and every live region's handles. Returns UCS_OK or logs the
 * first broken invariant and returns UCS_ERR_INVALID_PARAM.
 */
ucs_status_t uct_rc_gdr_rcache_check(uct_rc_gdr_rcache_t *rcache);

END_C_DECLS

#endif
