/*
 * rc_gdr: what a peer may make us say again and again (a refused request, a
 * message off the protocol) is said once per kind at its level, the rest at
 * debug level; the counters, not the log, count every one. A hostile peer
 * repeats a refused request at will and must not flood the log.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_RC_GDR_LOG_H_
#define UCT_RC_GDR_LOG_H_

#include <ucs/debug/log_def.h>
#include <ucs/sys/compiler_def.h>


/* @a level the first time @a what (a bit of *logged) is said, debug level
 * after that */
static inline ucs_log_level_t
uct_rc_gdr_log_once_level(unsigned *logged, unsigned what,
                          ucs_log_level_t level)
{
    if (*logged & UCS_BIT(what)) {
        return UCS_LOG_LEVEL_DEBUG;
    }

    *logged |= UCS_BIT(what);
    return level;
}


/* What the first line of its kind adds: where the others go */
static inline const char *uct_rc_gdr_log_once_more(ucs_log_level_t level)
{
    return (level == UCS_LOG_LEVEL_DEBUG) ? "" :
           " (further ones like it are counted, logged at debug level)";
}

#endif
