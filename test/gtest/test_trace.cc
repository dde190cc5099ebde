/*
 * The data-path trace (rc_gdr_trace.h): one line per posted work request
 * with what a hang needs to be understood, and its log call when the level
 * is compiled in (here by UCT_RC_GDR_TRACE_DATA, as a debug build of rc_gdr
 * against a release UCX) and asked for.
 */

#include <gtest/gtest.h>

#define UCT_RC_GDR_TRACE_DATA 1

extern "C" {
#include <uct/ib_gdr/rc_gdr_trace.h>
#include <ucs/config/global_opts.h>
#include <ucs/debug/log_def.h>
}

#include <arpa/inet.h>
#include <stdio.h>
#include <string>
#include <vector>


namespace {

std::string wr_str(uint32_t qp_num, const struct ibv_send_wr &wr,
                   size_t max = UCT_RC_GDR_TRACE_WR_MAX)
{
    std::vector<char> buf(max + 1, 'X');

    return uct_rc_gdr_trace_send_wr(qp_num, &wr, buf.data(), max);
}

bool has(const std::string &s, const std::string &part)
{
    return s.find(part) != std::string::npos;
}

} // namespace


TEST(trace, rdma_write_signaled)
{
    struct ibv_sge sges[2] = {{0x1000, 100, 1}, {0x2000, 28, 2}};
    struct ibv_send_wr wr  = {};

    wr.wr_id               = 0xabc0;
    wr.opcode              = IBV_WR_RDMA_WRITE;
    wr.sg_list             = sges;
    wr.num_sge             = 2;
    wr.send_flags          = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = 0x7f0000001000ull;
    wr.wr.rdma.rkey        = 0x1234;

    std::string s = wr_str(0x11, wr);
    EXPECT_EQ("QP 0x11 post RDMA_WRITE len 128 (sge 2) raddr 0x7f0000001000 "
              "rkey 0x1234 signaled wr_id 0xabc0", s);
}


TEST(trace, send_with_imm_inline_unsignaled)
{
    struct ibv_send_wr wr = {};

    wr.wr_id      = 0x42;
    wr.opcode     = IBV_WR_SEND_WITH_IMM;
    wr.imm_data   = htonl(0x380);
    wr.send_flags = IBV_SEND_INLINE;

    std::string s = wr_str(0x22, wr);
    EXPECT_EQ("QP 0x22 post SEND_WITH_IMM len 0 (sge 0) imm 0x380 inline "
              "wr_id 0x42", s);
}


TEST(trace, atomic_read_fence)
{
    struct ibv_sge sge    = {0x3000, 8, 3};
    struct ibv_send_wr wr = {};

    wr.opcode                = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.sg_list               = &sge;
    wr.num_sge               = 1;
    wr.send_flags            = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
    wr.wr.atomic.remote_addr = 0x8000;
    wr.wr.atomic.rkey        = 0x99;
    wr.wr.atomic.compare_add = 5;

    std::string s = wr_str(1, wr);
    EXPECT_TRUE(has(s, "ATOMIC_FETCH_AND_ADD len 8 (sge 1) raddr 0x8000 "
                       "rkey 0x99 compare_add 0x5 swap 0x0 signaled fence"))
        << s;

    wr.opcode           = IBV_WR_RDMA_READ;
    wr.wr.rdma.rkey     = 0x77;
    s                   = wr_str(1, wr);
    EXPECT_TRUE(has(s, "RDMA_READ len 8 (sge 1) raddr 0x8000 rkey 0x77 "
                       "signaled fence")) << s;
}


TEST(trace, truncated_and_terminated)
{
    struct ibv_send_wr wr = {};

    wr.opcode     = IBV_WR_RDMA_WRITE;
    std::string s = wr_str(0x11, wr, 16);
    EXPECT_EQ(15u, s.size());
    EXPECT_EQ("QP 0x11 post RD", s);
}


namespace {

std::vector<std::string> captured;

ucs_log_func_rc_t capture(const char*, unsigned, const char*,
                          ucs_log_level_t level,
                          const ucs_log_component_config_t*,
                          const char *format, va_list ap)
{
    char line[512];

    if (level == UCS_LOG_LEVEL_TRACE_DATA) {
        vsnprintf(line, sizeof(line), format, ap);
        captured.push_back(line);
    }
    return UCS_LOG_FUNC_RC_STOP;
}

} // namespace


TEST(trace, post_logged_at_data_level_only)
{
    ucs_log_level_t saved = ucs_global_opts.log_component.log_level;
    struct ibv_send_wr wr = {};

    wr.opcode = IBV_WR_SEND_WITH_IMM;
    captured.clear();
    ucs_log_push_handler(capture);

    ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_TRACE;
    uct_rc_gdr_trace_post_send(7, &wr);
    EXPECT_TRUE(captured.empty());

    ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_TRACE_DATA;
    uct_rc_gdr_trace_post_send(7, &wr);

    ucs_global_opts.log_component.log_level = saved;
    ucs_log_pop_handler();
    ASSERT_EQ(1u, captured.size());
    EXPECT_TRUE(has(captured[0], "QP 0x7 post SEND_WITH_IMM")) << captured[0];
}
