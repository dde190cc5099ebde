/*
 * rc_gdr data-path trace: see rc_gdr_trace.h.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h" /* UCX's: its log level, assertions */
#endif

#include "rc_gdr_trace.h"

#include <ucs/sys/math.h>

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>


static const char *uct_rc_gdr_trace_opcode(enum ibv_wr_opcode opcode)
{
    switch (opcode) {
    case IBV_WR_RDMA_WRITE:           return "RDMA_WRITE";
    case IBV_WR_RDMA_WRITE_WITH_IMM:  return "RDMA_WRITE_WITH_IMM";
    case IBV_WR_SEND:                 return "SEND";
    case IBV_WR_SEND_WITH_IMM:        return "SEND_WITH_IMM";
    case IBV_WR_RDMA_READ:            return "RDMA_READ";
    case IBV_WR_ATOMIC_CMP_AND_SWP:   return "ATOMIC_CMP_AND_SWP";
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return "ATOMIC_FETCH_AND_ADD";
    default:                          return "OPCODE?";
    }
}


/* Appends to buf[*pos, max): never past the end, always terminated. */
static void UCS_F_PRINTF(4, 5)
uct_rc_gdr_trace_append(char *buf, size_t max, size_t *pos, const char *fmt,
                        ...)
{
    va_list ap;
    int ret;

    if (*pos >= max) {
        return;
    }

    va_start(ap, fmt);
    ret = vsnprintf(buf + *pos, max - *pos, fmt, ap);
    va_end(ap);
    if (ret > 0) {
        *pos = ucs_min(*pos + ret, max - 1);
    }
}


const char *uct_rc_gdr_trace_send_wr(uint32_t qp_num,
                                     const struct ibv_send_wr *wr, char *buf,
                                     size_t max)
{
    size_t pos    = 0;
    size_t length = 0;
    int i;

    if (max == 0) {
        return buf;
    }

    buf[0] = '\0';
    for (i = 0; i < wr->num_sge; ++i) {
        length += wr->sg_list[i].length;
    }

    uct_rc_gdr_trace_append(buf, max, &pos, "QP 0x%x post %s len %zu (sge %d)",
                            qp_num, uct_rc_gdr_trace_opcode(wr->opcode),
                            length, wr->num_sge);
    switch (wr->opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
        uct_rc_gdr_trace_append(buf, max, &pos, " raddr 0x%" PRIx64
                                " rkey 0x%x", wr->wr.rdma.remote_addr,
                                wr->wr.rdma.rkey);
        break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        uct_rc_gdr_trace_append(buf, max, &pos, " raddr 0x%" PRIx64
                                " rkey 0x%x compare_add 0x%" PRIx64 " swap 0x%"
                                PRIx64, wr->wr.atomic.remote_addr,
                                wr->wr.atomic.rkey, wr->wr.atomic.compare_add,
                                wr->wr.atomic.swap);
        break;
    default:
        break;
    }

    if ((wr->opcode == IBV_WR_SEND_WITH_IMM) ||
        (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)) {
        uct_rc_gdr_trace_append(buf, max, &pos, " imm 0x%x",
                                ntohl(wr->imm_data));
    }

    uct_rc_gdr_trace_append(buf, max, &pos, "%s%s%s wr_id 0x%" PRIx64,
                            (wr->send_flags & IBV_SEND_SIGNALED) ?
                            " signaled" : "",
                            (wr->send_flags & IBV_SEND_FENCE) ? " fence" : "",
                            (wr->send_flags & IBV_SEND_INLINE) ? " inline" : "",
                            (uint64_t)wr->wr_id);
    return buf;
}
