/*
 * rc_gdr data-path trace: one line per posted send work request (opcode,
 * length, remote address and key, flags, wr_id), at UCX's "data" log level
 * (UCX_LOG_LEVEL=data), so that a hang shows what was last asked of the NIC.
 *
 * Compiled out where UCX compiles out its own data-path traces: a UCX built
 * for release (Debian's: UCS_MAX_LOG_LEVEL is DEBUG) leaves no trace call in
 * the post path. Building rc_gdr with CPPFLAGS=-DUCT_RC_GDR_TRACE_DATA at
 * configure time keeps it against such a UCX.
 */

#ifndef UCT_RC_GDR_TRACE_H_
#define UCT_RC_GDR_TRACE_H_

#include <ucs/debug/log_def.h>
#include <ucs/sys/compiler_def.h>

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

BEGIN_C_DECLS

#ifdef UCT_RC_GDR_TRACE_DATA
#  define UCT_RC_GDR_TRACE_MAX_LEVEL UCS_LOG_LEVEL_TRACE_DATA
#else
#  define UCT_RC_GDR_TRACE_MAX_LEVEL UCS_MAX_LOG_LEVEL
#endif

/* Room for one work request with UCT_RC_GDR_MAX_IOV entries */
#define UCT_RC_GDR_TRACE_WR_MAX    256


/* Logs @a _wr, about to be posted on QP @a _qp_num; nothing when the level
 * is compiled out (a constant condition) or not asked for. */
#define uct_rc_gdr_trace_post_send(_qp_num, _wr) \
    do { \
        char _buf[UCT_RC_GDR_TRACE_WR_MAX]; \
        \
        if (ucs_unlikely((UCS_LOG_LEVEL_TRACE_DATA <= \
                          UCT_RC_GDR_TRACE_MAX_LEVEL) && \
                         (UCS_LOG_LEVEL_TRACE_DATA <= \
                          ucs_global_opts.log_component.log_level))) { \
            ucs_log_dispatch(__FILE__, __LINE__, __func__, \
                             UCS_LOG_LEVEL_TRACE_DATA, \
                             &ucs_global_opts.log_component, "%s", \
                             uct_rc_gdr_trace_send_wr(_qp_num, _wr, _buf, \
                                                      sizeof(_buf))); \
        } \
    } while (0)


/**
 * One send work request as one line: "QP 0x.. post OPCODE len N (sge S)
 * [raddr 0x.. rkey 0x..] [compare/add, swap] [imm 0x..] [signaled] [fence]
 * [inline] wr_id 0x..". Always NUL-terminated, truncated to @a max.
 *
 * @return @a buf.
 */
const char *uct_rc_gdr_trace_send_wr(uint32_t qp_num,
                                     const struct ibv_send_wr *wr, char *buf,
                                     size_t max);

END_C_DECLS

#endif
