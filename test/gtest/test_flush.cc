/**
 * Flush-by-RDMA-read policy: every combination of the target GPU's writes
 * ordering (value, readable or not), compute capability (the fallback) and
 * the UCX_RC_GDR_FLUSH knob; the data-path decision from rkey flags; the
 * knob's parsing, by the function and through the configuration field the
 * interface table uses.
 */

#include <gtest/gtest.h>

extern "C" {
#include <uct/ib_gdr/rc_gdr_glue.h>
#include <uct/ib_gdr/rc_gdr_flush.h>
#include <ucs/config/global_opts.h>
#include <ucs/config/parser.h>
#include <ucs/debug/log_def.h>
}

#include "test_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>


namespace {

const int NONE  = UCT_RC_GDR_CUDA_WRITES_ORDERING_NONE;
const int OWNER = UCT_RC_GDR_CUDA_WRITES_ORDERING_OWNER;
const int ALL   = UCT_RC_GDR_CUDA_WRITES_ORDERING_ALL_DEVICES;
const int NO_CC = -1; /* compute capability not readable */
const int NO_WO = -2; /* writes ordering not readable */

const uct_rc_gdr_flush_mode_t AUTO   = UCT_RC_GDR_FLUSH_AUTO;
const uct_rc_gdr_flush_mode_t ALWAYS = UCT_RC_GDR_FLUSH_ALWAYS;
const uct_rc_gdr_flush_mode_t NEVER  = UCT_RC_GDR_FLUSH_NEVER;




bool contains(const std::string &text, const std::string &part)
{
    return text.find(part) != std::string::npos;
}


uct_rc_gdr_flush_target_t gpu(int writes_ordering, int cc_major)
{
    uct_rc_gdr_flush_target_t target;

    target.is_gpu                = 1;
    target.writes_ordering_valid = (writes_ordering != NO_WO);
    /* An unreadable attribute must be ignored whatever the field holds:
     * fill it with the value that would give the opposite answer. */
    target.writes_ordering       = (writes_ordering != NO_WO) ?
                                   writes_ordering : OWNER;
    target.cc_valid              = (cc_major != NO_CC);
    target.cc_major              = (cc_major != NO_CC) ? cc_major : 0;
    return target;
}


uct_rc_gdr_flush_target_t host()
{
    uct_rc_gdr_flush_target_t target;

    memset(&target, 0, sizeof(target));
    target.writes_ordering_valid = 1; /* must not matter for host memory */
    target.writes_ordering       = NONE;
    target.cc_valid              = 1;
    target.cc_major              = 7;
    return target;
}

} /* namespace */


/*
 * The whole table, written out: the expected answer under auto, and the
 * reason. always must read and never must not, on every row.
 */
TEST(test_rc_gdr_flush, policy_every_combination) {
    static const struct {
        int                    writes_ordering; /* or NO_WO */
        int                    cc_major;        /* or NO_CC */
        int                    auto_needed;
        uct_rc_gdr_flush_why_t auto_why;
    } rows[] = {
        /* The attribute is readable: it alone decides, cc is ignored */
        {NONE,  NO_CC, 1, UCT_RC_GDR_FLUSH_WHY_ORDERING_NONE},
        {NONE,  7,     1, UCT_RC_GDR_FLUSH_WHY_ORDERING_NONE},
        {NONE,  8,     1, UCT_RC_GDR_FLUSH_WHY_ORDERING_NONE},
        {NONE,  9,     1, UCT_RC_GDR_FLUSH_WHY_ORDERING_NONE},
        {NONE,  10,    1, UCT_RC_GDR_FLUSH_WHY_ORDERING_NONE},
        {OWNER, NO_CC, 0, UCT_RC_GDR_FLUSH_WHY_ORDERING_OWNER},
        {OWNER, 7,     0, UCT_RC_GDR_FLUSH_WHY_ORDERING_OWNER},
        {OWNER, 8,     0, UCT_RC_GDR_FLUSH_WHY_ORDERING_OWNER},
        {OWNER, 9,     0, UCT_RC_GDR_FLUSH_WHY_ORDERING_OWNER},
        {OWNER, 10,    0, UCT_RC_GDR_FLUSH_WHY_ORDERING_OWNER},
        {ALL,   NO_CC, 0, UCT_RC_GDR_FLUSH_WHY_ORDERING_ALL_DEVICES},
        {ALL,   7,     0, UCT_RC_GDR_FLUSH_WHY_ORDERING_ALL_DEVICES},
        {ALL,   8,     0, UCT_RC_GDR_FLUSH_WHY_ORDERING_ALL_DEVICES},
        {ALL,   9,     0, UCT_RC_GDR_FLUSH_WHY_ORDERING_ALL_DEVICES},
        {ALL,   10,    0, UCT_RC_GDR_FLUSH_WHY_ORDERING_ALL_DEVICES},
        /* A value this code does not know (a newer driver): read */
        {50,    NO_CC, 1, UCT_RC_GDR_FLUSH_WHY_ORDERING_UNKNOWN},
        {50,    7,     1, UCT_RC_GDR_FLUSH_WHY_ORDERING_UNKNOWN},
        {300,   9,     1, UCT_RC_GDR_FLUSH_WHY_ORDERING_UNKNOWN},
        {-1,    10,    1, UCT_RC_GDR_FLUSH_WHY_ORDERING_UNKNOWN},
        /* Unreadable attribute: the compute capability decides */
        {NO_WO, 5,     1, UCT_RC_GDR_FLUSH_WHY_CC_BEFORE_9},
        {NO_WO, 7,     1, UCT_RC_GDR_FLUSH_WHY_CC_BEFORE_9},
        {NO_WO, 8,     1, UCT_RC_GDR_FLUSH_WHY_CC_BEFORE_9},
        {NO_WO, 9,     0, UCT_RC_GDR_FLUSH_WHY_CC_9_OR_LATER},
        {NO_WO, 10,    0, UCT_RC_GDR_FLUSH_WHY_CC_9_OR_LATER},
        {NO_WO, 12,    0, UCT_RC_GDR_FLUSH_WHY_CC_9_OR_LATER},
        /* Nothing known: read */
        {NO_WO, NO_CC, 1, UCT_RC_GDR_FLUSH_WHY_GPU_UNKNOWN}
    };
    uct_rc_gdr_flush_target_t target;
    uct_rc_gdr_flush_why_t why;

    for (const auto &row : rows) {
        target = gpu(row.writes_ordering, row.cc_major);
        SCOPED_TRACE(::testing::Message()
                     << "writes_ordering=" << row.writes_ordering
                     << " cc=" << row.cc_major);

        why = UCT_RC_GDR_FLUSH_WHY_LAST;
        EXPECT_EQ(row.auto_needed,
                  uct_rc_gdr_flush_read_needed(AUTO, &target, &why));
        EXPECT_EQ(row.auto_why, why) << uct_rc_gdr_flush_why_str(why);

        EXPECT_EQ(1, uct_rc_gdr_flush_read_needed(ALWAYS, &target, &why));
        EXPECT_EQ(UCT_RC_GDR_FLUSH_WHY_KNOB_ALWAYS, why);

        EXPECT_EQ(0, uct_rc_gdr_flush_read_needed(NEVER, &target, &why));
        EXPECT_EQ(UCT_RC_GDR_FLUSH_WHY_KNOB_NEVER, why);

        /* why_p is optional */
        EXPECT_EQ(row.auto_needed,
                  uct_rc_gdr_flush_read_needed(AUTO, &target, NULL));
    }
}

TEST(test_rc_gdr_flush, host_memory) {
    uct_rc_gdr_flush_target_t target = host();
    uct_rc_gdr_flush_why_t why;

    EXPECT_EQ(0, uct_rc_gdr_flush_read_needed(AUTO, &target, &why));
    EXPECT_EQ(UCT_RC_GDR_FLUSH_WHY_HOST_MEMORY, why);
    EXPECT_EQ(1, uct_rc_gdr_flush_read_needed(ALWAYS, &target, &why));
    EXPECT_EQ(UCT_RC_GDR_FLUSH_WHY_KNOB_ALWAYS, why);
    EXPECT_EQ(0, uct_rc_gdr_flush_read_needed(NEVER, &target, &why));
    EXPECT_EQ(UCT_RC_GDR_FLUSH_WHY_KNOB_NEVER, why);
}

/* DMA-BUF or peermem: the registration mechanism is no input. A GPU's
 * target comes out the same whatever its DMA-BUF support says. */
TEST(test_rc_gdr_flush, independent_of_registration_mechanism) {
    uct_rc_gdr_cuda_dev_attr_t attr;
    uct_rc_gdr_flush_target_t with_dmabuf, without_dmabuf;

    memset(&attr, 0, sizeof(attr));
    attr.valid_mask       = UCT_RC_GDR_CUDA_DEV_ATTR_CC |
                            UCT_RC_GDR_CUDA_DEV_ATTR_WRITES_ORDERING |
                            UCT_RC_GDR_CUDA_DEV_ATTR_GDR |
                            UCT_RC_GDR_CUDA_DEV_ATTR_DMABUF;
    attr.cc_major         = 8;
    attr.writes_ordering  = NONE;
    attr.gdr_supported    = 1;
    attr.dmabuf_supported = 1;
    uct_rc_gdr_flush_target_from_gpu(&attr, &with_dmabuf);

    attr.dmabuf_supported = 0;
    attr.valid_mask      &= ~UCT_RC_GDR_CUDA_DEV_ATTR_DMABUF;
    uct_rc_gdr_flush_target_from_gpu(&attr, &without_dmabuf);

    EXPECT_EQ(0, memcmp(&with_dmabuf, &without_dmabuf, sizeof(with_dmabuf)));
    EXPECT_EQ(1, uct_rc_gdr_flush_read_needed(AUTO, &with_dmabuf, NULL));
    EXPECT_EQ(1, uct_rc_gdr_flush_read_needed(AUTO, &without_dmabuf, NULL));
}

/* From the attributes the CUDA shim reports, valid_mask decides what is
 * known, and the H200 measured here (ordering 100, cc 9) needs no read. */
TEST(test_rc_gdr_flush, target_from_gpu_attributes) {
    uct_rc_gdr_cuda_dev_attr_t attr;
    uct_rc_gdr_flush_target_t target;

    memset(&attr, 0, sizeof(attr));
    attr.valid_mask      = UCT_RC_GDR_CUDA_DEV_ATTR_CC |
                           UCT_RC_GDR_CUDA_DEV_ATTR_WRITES_ORDERING;
    attr.cc_major        = 9;
    attr.writes_ordering = OWNER;
    uct_rc_gdr_flush_target_from_gpu(&attr, &target);
    EXPECT_EQ(1, target.is_gpu);
    EXPECT_EQ(1, target.writes_ordering_valid);
    EXPECT_EQ(OWNER, target.writes_ordering);
    EXPECT_EQ(1, target.cc_valid);
    EXPECT_EQ(9, target.cc_major);
    EXPECT_EQ(0, uct_rc_gdr_flush_read_needed(AUTO, &target, NULL));

    /* An A100-like GPU whose driver predates the attribute */
    attr.valid_mask = UCT_RC_GDR_CUDA_DEV_ATTR_CC;
    attr.cc_major   = 8;
    uct_rc_gdr_flush_target_from_gpu(&attr, &target);
    EXPECT_EQ(0, target.writes_ordering_valid);
    EXPECT_EQ(1, uct_rc_gdr_flush_read_needed(AUTO, &target, NULL));

    /* Ordering NONE reported on a cc 9 GPU: the attribute wins */
    attr.valid_mask      = UCT_RC_GDR_CUDA_DEV_ATTR_CC |
                           UCT_RC_GDR_CUDA_DEV_ATTR_WRITES_ORDERING;
    attr.cc_major        = 9;
    attr.writes_ordering = NONE;
    uct_rc_gdr_flush_target_from_gpu(&attr, &target);
    EXPECT_EQ(1, uct_rc_gdr_flush_read_needed(AUTO, &target, NULL));

    /* Nothing readable */
    attr.valid_mask = 0;
    uct_rc_gdr_flush_target_from_gpu(&attr, &target);
    EXPECT_EQ(0, target.cc_valid);
    EXPECT_EQ(1, uct_rc_gdr_flush_read_needed(AUTO, &target, NULL));
}

/* The data path: rkey flags x knob */
TEST(test_rc_gdr_flush, rkey_flags_decide_in_auto_mode) {
    static const uint8_t NIC   = UCT_RC_GDR_RKEY_FLAG_NIC;
    static const uint8_t GPU   = UCT_RC_GDR_RKEY_FLAG_GPU;
    static const uint8_t FLUSH = UCT_RC_GDR_RKEY_FLAG_FLUSH_READ;
    static const struct {
        uint8_t flags;
        int     auto_needs;
    } rows[] = {
        {0,                 0},
        {NIC,               0}, /* host memory */
        {NIC | GPU,         0}, /* GPU with write ordering */
        {NIC | GPU | FLUSH, 1}, /* GPU that needs the read */
        {NIC | FLUSH,       1}, /* the md decided: the flag is the word */
        {FLUSH,             1}
    };

    for (const auto &row : rows) {
        SCOPED_TRACE(::testing::Message() << "rkey flags 0x" << std::hex
                     << (unsigned)row.flags);
        EXPECT_EQ(row.auto_needs,
                  uct_rc_gdr_flush_rkey_needs_read(AUTO, row.flags));
        EXPECT_EQ(1, uct_rc_gdr_flush_rkey_needs_read(ALWAYS, row.flags));
        EXPECT_EQ(0, uct_rc_gdr_flush_rkey_needs_read(NEVER, row.flags));
    }
}

TEST(test_rc_gdr_flush, why_strings) {
    for (int why = 0; why < UCT_RC_GDR_FLUSH_WHY_LAST; ++why) {
        const char *str = uct_rc_gdr_flush_why_str(
                (uct_rc_gdr_flush_why_t)why);
        ASSERT_TRUE(str != NULL);
        EXPECT_GT(strlen(str), 3u) << why;
        EXPECT_STRNE("?", str) << why;
    }
    EXPECT_STREQ("?", uct_rc_gdr_flush_why_str(UCT_RC_GDR_FLUSH_WHY_LAST));
    EXPECT_TRUE(contains(uct_rc_gdr_flush_why_str(
                                 UCT_RC_GDR_FLUSH_WHY_KNOB_NEVER),
                         "UCX_RC_GDR_FLUSH=never"));
}

TEST(test_rc_gdr_flush, parse_values) {
    static const struct {
        const char              *value;
        uct_rc_gdr_flush_mode_t mode;
    } rows[] = {
        {"auto", AUTO}, {"always", ALWAYS}, {"never", NEVER},
        {"AUTO", AUTO}, {"Always", ALWAYS}, {"NEVER", NEVER}
    };
    uct_rc_gdr_flush_mode_t mode;

    for (const auto &row : rows) {
        mode = UCT_RC_GDR_FLUSH_LAST;
        EXPECT_EQ(UCS_OK, uct_rc_gdr_flush_mode_parse(row.value, &mode))
                << row.value;
        EXPECT_EQ(row.mode, mode) << row.value;
    }

    /* The names the configuration table prints are the parser's */
    EXPECT_STREQ("auto", uct_rc_gdr_flush_mode_names[AUTO]);
    EXPECT_STREQ("always", uct_rc_gdr_flush_mode_names[ALWAYS]);
    EXPECT_STREQ("never", uct_rc_gdr_flush_mode_names[NEVER]);
    EXPECT_EQ(NULL, uct_rc_gdr_flush_mode_names[UCT_RC_GDR_FLUSH_LAST]);
}

TEST(test_rc_gdr_flush, parse_errors) {
    static const char *bad[] = {"", "yes", "no", "on", "auto ", "alway",
                                "always,never", "1"};
    uct_rc_gdr_flush_mode_t mode;

    for (const char *value : bad) {
        log_capture capture;

        mode = ALWAYS;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_rc_gdr_flush_mode_parse(value, &mode)) << value;
        EXPECT_EQ(ALWAYS, mode) << "changed by a rejected value";
        ASSERT_EQ(1u, captured_log.size());
        EXPECT_TRUE(contains(captured_log[0],
                             std::string("'") + value +
                             "' for UCX_RC_GDR_FLUSH: allowed values are "
                             "auto, always, never"))
                << captured_log[0];
    }

    log_capture capture;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_rc_gdr_flush_mode_parse(NULL, &mode));
}


/* The field of the interface table, parsed by UCS from the environment as
 * uct_md_iface_config_read does (env prefix "UCX_", table prefix "RC_GDR_") */
class test_rc_gdr_flush_config : public ::testing::Test {
protected:
    struct opts_t {
        uct_rc_gdr_flush_mode_t mode;
    };

    virtual void TearDown()
    {
        unsetenv(UCT_RC_GDR_KNOB_FLUSH);
    }

    ucs_status_t fill(opts_t *opts)
    {
        static ucs_config_field_t table[] = {
            UCT_RC_GDR_FLUSH_CONFIG_FIELD(ucs_offsetof(opts_t, mode)),
            {NULL}
        };

        return uct_rc_gdr_glue_config_fill(opts, table, sizeof(*opts),
                                           "UCX_", "RC_GDR_");
    }
};

TEST_F(test_rc_gdr_flush_config, default_is_auto) {
    opts_t opts;

    unsetenv(UCT_RC_GDR_KNOB_FLUSH);
    opts.mode = NEVER;
    ASSERT_EQ(UCS_OK, fill(&opts));
    EXPECT_EQ(AUTO, opts.mode);
}

TEST_F(test_rc_gdr_flush_config, environment) {
    opts_t opts;

    setenv(UCT_RC_GDR_KNOB_FLUSH, "always", 1);
    ASSERT_EQ(UCS_OK, fill(&opts));
    EXPECT_EQ(ALWAYS, opts.mode);

    setenv(UCT_RC_GDR_KNOB_FLUSH, "never", 1);
    ASSERT_EQ(UCS_OK, fill(&opts));
    EXPECT_EQ(NEVER, opts.mode);

    setenv(UCT_RC_GDR_KNOB_FLUSH, "auto", 1);
    ASSERT_EQ(UCS_OK, fill(&opts));
    EXPECT_EQ(AUTO, opts.mode);
}

TEST_F(test_rc_gdr_flush_config, bad_value_is_a_clear_error) {
    opts_t opts;

    setenv(UCT_RC_GDR_KNOB_FLUSH, "sometimes", 1);
    log_capture capture;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, fill(&opts));
    ASSERT_EQ(1u, captured_log.size());
    EXPECT_TRUE(contains(captured_log[0], "'sometimes'")) << captured_log[0];
    EXPECT_TRUE(contains(captured_log[0], "FLUSH")) << captured_log[0];
    EXPECT_TRUE(contains(captured_log[0], "auto|always|never"))
            << captured_log[0];
}

TEST_F(test_rc_gdr_flush_config, documented) {
    ucs_config_field_t field = UCT_RC_GDR_FLUSH_CONFIG_FIELD(0);

    EXPECT_STREQ("FLUSH", field.name);
    EXPECT_STREQ("auto", field.dfl_value);
    EXPECT_TRUE(contains(field.doc, "always"));
    EXPECT_TRUE(contains(field.doc, "UNSAFE"));
}
