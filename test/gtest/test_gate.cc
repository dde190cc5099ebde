/**
 * The GDR capability chain: decisions from synthetic GPU/NIC facts and
 * topologies, configuration parsing, and the reports (why line, table, JSON).
 */

#include <gtest/gtest.h>

#include "test_log.h"
#include "test_sysfs.h"

extern "C" {
#include <uct/ib_gdr/rc_gdr_gate.h>
#include <uct/ib_gdr/rc_gdr_topo.h>
#include <ucs/config/global_opts.h>
#include <ucs/debug/log_def.h>
}

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>


/* A strict JSON checker (RFC 8259 grammar), so the test needs no tools */
class json_checker {
public:
    static bool valid(const std::string &text)
    {
        json_checker checker(text);
        return checker.value() && (checker.skip_ws(), checker.m_pos ==
                                                       text.size());
    }

private:
    explicit json_checker(const std::string &text) : m_text(text), m_pos(0)
    {
    }

    void skip_ws()
    {
        while ((m_pos < m_text.size()) && strchr(" \t\r\n", m_text[m_pos]) &&
               (m_text[m_pos] != '\0')) {
            ++m_pos;
        }
    }

    bool eat(char c)
    {
        skip_ws();
        if ((m_pos < m_text.size()) && (m_text[m_pos] == c)) {
            ++m_pos;
            return true;
        }
        return false;
    }

    bool literal(const char *word)
    {
        size_t len = strlen(word);
        if (m_text.compare(m_pos, len, word) != 0) {
            return false;
        }
        m_pos += len;
        return true;
    }

    bool string()
    {
        if (!eat('"')) {
            return false;
        }
        while (m_pos < m_text.size()) {
            unsigned char c = m_text[m_pos++];
            if (c == '"') {
                return true;
            } else if (c < 0x20) {
                return false;
            } else if (c == '\\') {
                if (m_pos >= m_text.size()) {
                    return false;
                }
                c = m_text[m_pos++];
                if (c == 'u') {
                    for (int i = 0; i < 4; ++i, ++m_pos) {
                        if ((m_pos >= m_text.size()) ||
                            !isxdigit((unsigned char)m_text[m_pos])) {
                            return false;
                        }
                    }
                } else if (!strchr("\"\\/bfnrt", c) || (c == '\0')) {
                    return false;
                }
            }
        }
        return false;
    }

    bool number()
    {
        size_t start = m_pos;
        if ((m_pos < m_text.size()) && (m_text[m_pos] == '-')) {
            ++m_pos;
        }
        while ((m_pos < m_text.size()) &&
               (isdigit((unsigned char)m_text[m_pos]) ||
                strchr(".eE+-", m_text[m_pos]))) {
            ++m_pos;
        }
        return (m_pos > start) && isdigit((unsigned char)m_text[m_pos - 1]);
    }

    template<typename F> bool sequence(char close, F item)
    {
        if (eat(close)) {
            return true;
        }
        do {
            if (!item()) {
                return false;
            }
        } while (eat(','));
        return eat(close);
    }

    bool value()
    {
        skip_ws();
        if (m_pos >= m_text.size()) {
            return false;
        }
        switch (m_text[m_pos]) {
        case '{':
            ++m_pos;
            return sequence('}', [this]() {
                return string() && eat(':') && value();
            });
        case '[':
            ++m_pos;
            return sequence(']', [this]() { return value(); });
        case '"':
            return string();
        case 't':
            return literal("true");
        case 'f':
            return literal("false");
        case 'n':
            return literal("null");
        default:
            return number();
        }
    }

    const std::string &m_text;
    size_t            m_pos;
};


static bool contains(const std::string &str, const std::string &part)
{
    return str.find(part) != std::string::npos;
}


class test_rc_gdr_gate : public testing::Test {
public:
    void SetUp() override
    {
        uct_rc_gdr_gate_config_init(&m_config);

        memset(&m_gpu, 0, sizeof(m_gpu));
        m_gpu.name             = "GPU0";
        m_gpu.pci_bdf          = "0000:03:00.0";
        m_gpu.gdr_supported    = 1;
        m_gpu.dmabuf_supported = 1;
        m_gpu.query_error      = NULL;

        m_nic.name            = "mlx5_0";
        m_nic.port_num        = 1;
        m_nic.port_active     = 1;
        m_nic.port_state      = "ACTIVE";
        m_nic.dmabuf_errno    = EBADF;
        m_nic.peermem_errno   = 0;
        m_nic.peermem_modules = 1;
        m_nic.peermem_source  = "/sys/module/nvidia_peermem";

        memset(&m_topo, 0, sizeof(m_topo));
        set_dist(UCT_RC_GDR_DIST_PIX);
        strcpy(m_topo.sysfs_root, "/sys");
        strcpy(m_topo.nic_name, "mlx5_0");
        strcpy(m_topo.gpu.bdf, "0000:03:00.0");
        strcpy(m_topo.nic.bdf, "0000:04:00.0");
        strcpy(m_topo.reason, "one PCIe switch/bridge between them");
    }

    void set_dist(uct_rc_gdr_dist_t dist)
    {
        m_topo.outcome = UCT_RC_GDR_TOPO_PCI;
        m_topo.dist    = dist;
    }

    void set(const char *name, const char *value)
    {
        ASSERT_EQ(UCS_OK, uct_rc_gdr_gate_config_set(&m_config, name, value))
                << name << "=" << value;
    }

    ucs_status_t evaluate()
    {
        return uct_rc_gdr_gate_evaluate(&m_gpu, &m_nic, &m_topo, &m_config,
                                        &m_result);
    }

    uct_rc_gdr_lane_t lane(uct_rc_gdr_dir_t dir) const
    {
        return m_result.lane[dir];
    }

    std::string why(uct_rc_gdr_dir_t dir) const
    {
        char buf[UCT_RC_GDR_GATE_WHY_MAX];
        return uct_rc_gdr_gate_format_why(&m_result, dir, buf, sizeof(buf));
    }

    const uct_rc_gdr_evidence_t *find(const char *check) const
    {
        for (unsigned i = 0; i < m_result.num_evidence; ++i) {
            if (!strcmp(m_result.evidence[i].check, check)) {
                return &m_result.evidence[i];
            }
        }
        return NULL;
    }

    static const uct_rc_gdr_dir_t SEND = UCT_RC_GDR_DIR_NIC_READS_GPU;
    static const uct_rc_gdr_dir_t RECV = UCT_RC_GDR_DIR_NIC_WRITES_GPU;

    uct_rc_gdr_gate_config_t m_config;
    uct_rc_gdr_gate_gpu_t    m_gpu;
    uct_rc_gdr_gate_nic_t    m_nic;
    uct_rc_gdr_topo_t        m_topo;
    uct_rc_gdr_gate_result_t m_result;
};




TEST_F(test_rc_gdr_gate, all_checks_pass_dmabuf_first) {
    ASSERT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_DMABUF, lane(SEND));
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_DMABUF, lane(RECV));
    EXPECT_EQ(-1, m_result.why[SEND]);

    /* The chain starts with the GPU attribute, with its source */
    const uct_rc_gdr_evidence_t *ev = &m_result.evidence[0];
    EXPECT_STREQ("gpu.gdr_attribute", ev->check);
    EXPECT_STREQ("1", ev->value);
    EXPECT_EQ(UCT_RC_GDR_VERDICT_PASS, ev->verdict);
    EXPECT_TRUE(contains(ev->source,
                         "CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED"));
    EXPECT_TRUE(contains(why(SEND), "uses the GDR lane (DMA-BUF)"));
}

TEST_F(test_rc_gdr_gate, dmabuf_ebadf_gives_dmabuf_lane) {
    m_nic.peermem_errno = EFAULT;
    ASSERT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_DMABUF, lane(SEND));
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_DMABUF, lane(RECV));
    EXPECT_TRUE(contains(find("nic.dmabuf_probe")->value, "EBADF"));
}

TEST_F(test_rc_gdr_gate, eopnotsupp_and_peermem_ok_gives_peermem_lane) {
    m_nic.dmabuf_errno = EOPNOTSUPP;
    ASSERT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_PEERMEM, lane(SEND));
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_PEERMEM, lane(RECV));
    EXPECT_EQ(UCT_RC_GDR_VERDICT_FAIL, find("nic.dmabuf_probe")->verdict);
    EXPECT_STREQ("peermem", find("registration.mechanism")->value);
}

TEST_F(test_rc_gdr_gate, gpu_without_dmabuf_attribute_uses_peermem) {
    m_gpu.dmabuf_supported = 0;
    ASSERT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_PEERMEM, lane(SEND));
}

TEST_F(test_rc_gdr_gate, method_order_respected) {
    set("REG_METHODS", "peermem,dmabuf");
    ASSERT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_PEERMEM, lane(SEND));

    /* peermem first but broken: the next one in the list */
    m_nic.peermem_errno = EFAULT;
    ASSERT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_DMABUF, lane(SEND));

    /* Only peermem allowed: DMA-BUF is not used even though it works */
    set("REG_METHODS", "peermem");
    ASSERT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_BOUNCE, lane(SEND));
    EXPECT_STREQ("none (peermem: EFAULT, dmabuf: disabled)",
                 find("registration.mechanism")->value);
    EXPECT_EQ(UCT_RC_GDR_VERDICT_INFO, find("nic.dmabuf_probe")->verdict);
}

TEST_F(test_rc_gdr_gate, gdr_attribute_but_no_mechanism_bounces) {
    m_nic.name          = "rxe0";
    m_nic.dmabuf_errno  = EOPNOTSUPP;
    m_nic.peermem_errno = EFAULT;
    ASSERT_EQ(UCS_OK, evaluate());

    EXPECT_EQ(UCT_RC_GDR_LANE_BOUNCE, lane(SEND));
    EXPECT_EQ(UCT_RC_GDR_LANE_BOUNCE, lane(RECV));
    EXPECT_EQ(UCT_RC_GDR_VERDICT_PASS, find("gpu.gdr_attribute")->verdict);
    EXPECT_EQ("rc_gdr: GPU0 <-> rxe0 NIC-writes-GPU uses the bounce lane: "
              "registration.mechanism = none (dmabuf: EOPNOTSUPP, peermem: "
              "EFAULT); HINT: check nvidia_peermem / DMA-BUF support, "
              "UCX_RC_GDR_REG_METHODS",
              why(RECV));
    /* Modules loaded while registration fails is worth a warning */
    EXPECT_EQ(UCT_RC_GDR_VERDICT_WARN, find("nic.peermem_modules")->verdict);
}

TEST_F(test_rc_gdr_gate, config_cannot_widen_the_chain) {
    /* The widest settings: any distance, GDR demanded, DMA-BUF first */
    set("MAX_DISTANCE", "SYS");
    set("NIC_READS_GPU", "yes");
    set("REG_METHODS", "dmabuf,peermem");

    struct {
        const char *check;
        void      (*breaks)(test_rc_gdr_gate*);
    } cases[] = {
        {"gpu.gdr_attribute",
         [](test_rc_gdr_gate *t) { t->m_gpu.gdr_supported = 0; }},
        {"nic.port_state",
         [](test_rc_gdr_gate *t) { t->m_nic.port_active = 0; }},
        {"registration.mechanism",
         [](test_rc_gdr_gate *t) {
             t->m_nic.dmabuf_errno  = EOPNOTSUPP;
             t->m_nic.peermem_errno = UCT_RC_GDR_GATE_NOT_PROBED;
         }},
        {"topo.distance",
         [](test_rc_gdr_gate *t) {
             t->m_topo.dist    = UCT_RC_GDR_DIST_UNKNOWN;
             t->m_topo.outcome = UCT_RC_GDR_TOPO_VIRTUAL_NIC;
         }}
    };

    for (auto &c : cases) {
        SetUp();
        set("MAX_DISTANCE", "SYS");
        set("NIC_READS_GPU", "yes");
        c.breaks(this);

        EXPECT_EQ(UCS_ERR_UNSUPPORTED, evaluate()) << c.check;
        EXPECT_EQ(UCT_RC_GDR_LANE_REFUSED, lane(SEND)) << c.check;
        EXPECT_EQ(UCT_RC_GDR_LANE_BOUNCE, lane(RECV)) << c.check;
        EXPECT_TRUE(contains(why(SEND), c.check)) << why(SEND);
        EXPECT_TRUE(contains(why(SEND), "UCX_RC_GDR_NIC_READS_GPU=yes"))
                << why(SEND);
    }
}

TEST_F(test_rc_gdr_gate, distance_level) {
    set_dist(UCT_RC_GDR_DIST_PHB);
    ASSERT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_BOUNCE, lane(SEND));
    EXPECT_TRUE(contains(why(SEND), "topo.distance = PHB (max PXB)"));
    EXPECT_TRUE(contains(why(SEND), "UCX_RC_GDR_MAX_DISTANCE"));

    set("MAX_DISTANCE", "phb");
    ASSERT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_DMABUF, lane(SEND));

    /* Narrowing works too */
    set("MAX_DISTANCE", "LOC");
    set_dist(UCT_RC_GDR_DIST_PIX);
    ASSERT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_BOUNCE, lane(SEND));
}

TEST_F(test_rc_gdr_gate, virtual_nic_never_gdr) {
    m_topo.outcome = UCT_RC_GDR_TOPO_VIRTUAL_NIC;
    m_topo.dist    = UCT_RC_GDR_DIST_UNKNOWN;
    strcpy(m_topo.reason, "no PCI device: virtual NIC (rxe0 has no PCI "
                          "function)");
    set("MAX_DISTANCE", "SYS");
    ASSERT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_BOUNCE, lane(SEND));
    EXPECT_TRUE(contains(why(SEND), "topo.distance = unknown: no PCI device: "
                                    "virtual NIC"));

    /* No topology at all counts as unknown */
    ASSERT_EQ(UCS_OK, uct_rc_gdr_gate_evaluate(&m_gpu, &m_nic, NULL,
                                               &m_config, &m_result));
    EXPECT_EQ(UCT_RC_GDR_LANE_BOUNCE, lane(RECV));
}

TEST_F(test_rc_gdr_gate, require_gdr_fails_naming_the_check) {
    set("REQUIRE", "gdr");
    set_dist(UCT_RC_GDR_DIST_SYS);

    EXPECT_EQ(UCS_ERR_UNSUPPORTED, evaluate());
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, m_result.status);
    EXPECT_EQ(UCT_RC_GDR_LANE_REFUSED, lane(SEND));
    EXPECT_EQ(UCT_RC_GDR_LANE_REFUSED, lane(RECV));
    EXPECT_EQ("rc_gdr: GPU0 <-> mlx5_0 NIC-reads-GPU is refused "
              "(UCX_RC_GDR_REQUIRE=gdr): topo.distance = SYS (max PXB); "
              "HINT: the NIC is farther from the GPU than allowed: use a "
              "closer NIC or raise the level, UCX_RC_GDR_MAX_DISTANCE",
              why(SEND));

    /* Logged once, at error level, for both directions */
    {
        log_capture capture;
        uct_rc_gdr_gate_log(&m_result);
        ASSERT_EQ(1u, captured_log.size());
        EXPECT_TRUE(contains(captured_log[0], "both directions"));
        EXPECT_TRUE(contains(captured_log[0], "topo.distance"));
    }
}

TEST_F(test_rc_gdr_gate, require_gdr_met) {
    set("REQUIRE", "gdr");
    EXPECT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_DMABUF, lane(SEND));
}

TEST_F(test_rc_gdr_gate, require_exempts_direction_turned_off) {
    set("REQUIRE", "gdr");
    set("NIC_READS_GPU", "no");
    EXPECT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_BOUNCE, lane(SEND));
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_DMABUF, lane(RECV));
}

TEST_F(test_rc_gdr_gate, bounce_disallowed_refuses) {
    set("BOUNCE", "no");
    m_gpu.gdr_supported = 0;
    EXPECT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_REFUSED, lane(SEND));
    EXPECT_EQ(UCT_RC_GDR_LANE_REFUSED, lane(RECV));
    EXPECT_TRUE(contains(why(RECV), "is refused (UCX_RC_GDR_BOUNCE=no): "
                                    "gpu.gdr_attribute = 0"));
}

TEST_F(test_rc_gdr_gate, read_policy_no_bounces_send_only) {
    set("NIC_READS_GPU", "no");
    ASSERT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_BOUNCE, lane(SEND));
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_DMABUF, lane(RECV));
    EXPECT_TRUE(contains(why(SEND), "policy.nic_reads_gpu = no"));
    EXPECT_TRUE(contains(why(SEND), "UCX_RC_GDR_NIC_READS_GPU"));

    /* Two directions that disagree log one line each */
    log_capture capture(UCS_LOG_LEVEL_DEBUG);
    uct_rc_gdr_gate_log(&m_result);
    EXPECT_EQ(2u, captured_log.size());
}

TEST_F(test_rc_gdr_gate, first_failing_check_is_named) {
    /* The GPU comes first in the chain: fixing the distance would not help */
    m_gpu.gdr_supported = -1;
    m_gpu.query_error   = "CUDA driver not queried";
    set_dist(UCT_RC_GDR_DIST_SYS);
    ASSERT_EQ(UCS_OK, evaluate());
    EXPECT_TRUE(contains(why(SEND), "gpu.gdr_attribute = unknown: CUDA "
                                    "driver not queried"))
            << why(SEND);
    EXPECT_EQ(UCT_RC_GDR_VERDICT_FAIL, find("topo.distance")->verdict);
}

TEST_F(test_rc_gdr_gate, port_down) {
    m_nic.port_active = 0;
    m_nic.port_state  = "PORT_DOWN";
    ASSERT_EQ(UCS_OK, evaluate());
    EXPECT_TRUE(contains(why(SEND), "nic.port_state = PORT_DOWN"));
}

TEST_F(test_rc_gdr_gate, acs_and_iommu_are_warnings) {
    m_topo.num_route = 2;
    strcpy(m_topo.route[0].bdf, "0000:02:00.0");
    m_topo.route[0].acs        = UCT_RC_GDR_ACS_REDIRECT;
    m_topo.route[0].acs_ctrl   = 0x001d;
    m_topo.route[0].acs_offset = 0x148;
    strcpy(m_topo.route[1].bdf, "0000:02:01.0");
    m_topo.route[1].acs = UCT_RC_GDR_ACS_UNREADABLE;
    m_topo.gpu.iommu    = UCT_RC_GDR_IOMMU_TRANSLATED;
    strcpy(m_topo.gpu.iommu_type, "DMA-FQ");

    ASSERT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_DMABUF, lane(SEND));

    const uct_rc_gdr_evidence_t *acs = find("topo.acs");
    ASSERT_TRUE(acs != NULL);
    EXPECT_EQ(UCT_RC_GDR_VERDICT_WARN, acs->verdict);
    EXPECT_TRUE(contains(acs->value, "0000:02:00.0 ctrl=0x001d: P2P request "
                                     "and completion redirect"))
            << acs->value;
    EXPECT_TRUE(contains(acs->source, "0x14e"));
    EXPECT_EQ(UCT_RC_GDR_VERDICT_WARN, find("topo.acs_summary")->verdict);
    EXPECT_EQ(UCT_RC_GDR_VERDICT_WARN, find("topo.iommu")->verdict);
    EXPECT_TRUE(contains(find("topo.iommu")->value, "DMA-FQ"));
    EXPECT_TRUE(contains(why(SEND), "with warnings"));
}

/* The stand-in driver's "GPU" is host memory: no PCIe path to judge. Only
 * then is an unknown distance not a failure. */
TEST_F(test_rc_gdr_gate, emulated_gpu_distance_not_applicable)
{
    m_topo.dist    = UCT_RC_GDR_DIST_UNKNOWN;
    m_topo.outcome = UCT_RC_GDR_TOPO_VIRTUAL_NIC;
    EXPECT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_BOUNCE, lane(SEND));

    m_gpu.emulated = 1;
    EXPECT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_DMABUF, lane(SEND));
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_DMABUF, lane(RECV));
}

/* An emulated GPU placed at a PCI function (a guest's) is judged by its
 * place as a real GPU is: a far NIC bounces, a near one does not */
TEST_F(test_rc_gdr_gate, placed_emulated_gpu_judged_by_place)
{
    m_gpu.emulated = 1;
    m_gpu.placed   = 1;
    m_topo.dist    = UCT_RC_GDR_DIST_SYS;
    EXPECT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_BOUNCE, lane(SEND));
    EXPECT_EQ(UCT_RC_GDR_LANE_BOUNCE, lane(RECV));
    EXPECT_EQ(UCT_RC_GDR_VERDICT_FAIL, find("topo.distance")->verdict);

    m_topo.dist = UCT_RC_GDR_DIST_PIX;
    EXPECT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_DMABUF, lane(SEND));
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_DMABUF, lane(RECV));

    /* not placed: the same far place is not judged */
    m_gpu.placed = 0;
    m_topo.dist  = UCT_RC_GDR_DIST_SYS;
    EXPECT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_LANE_GDR_DMABUF, lane(SEND));
}

TEST_F(test_rc_gdr_gate, iommu_identity_is_not_a_warning) {
    m_topo.gpu.iommu = UCT_RC_GDR_IOMMU_IDENTITY;
    m_topo.nic.iommu = UCT_RC_GDR_IOMMU_ABSENT;
    ASSERT_EQ(UCS_OK, evaluate());
    EXPECT_EQ(UCT_RC_GDR_VERDICT_INFO, find("topo.iommu")->verdict);
}

TEST_F(test_rc_gdr_gate, config_defaults) {
    EXPECT_EQ(UCT_RC_GDR_DIST_PXB, m_config.max_distance);
    EXPECT_EQ(UCT_RC_GDR_POLICY_AUTO, m_config.policy[SEND]);
    EXPECT_EQ(UCT_RC_GDR_POLICY_AUTO, m_config.policy[RECV]);
    ASSERT_EQ(2u, m_config.num_methods);
    EXPECT_EQ(UCT_RC_GDR_REG_DMABUF, m_config.methods[0]);
    EXPECT_EQ(UCT_RC_GDR_REG_PEERMEM, m_config.methods[1]);
    EXPECT_TRUE(m_config.bounce);
    EXPECT_EQ(UCT_RC_GDR_REQUIRE_NO, m_config.require);
}

TEST_F(test_rc_gdr_gate, config_parse_values) {
    set("UCX_RC_GDR_MAX_DISTANCE", "node");
    EXPECT_EQ(UCT_RC_GDR_DIST_NODE, m_config.max_distance);
    set("RC_GDR_NIC_WRITES_GPU", "NO");
    EXPECT_EQ(UCT_RC_GDR_POLICY_NO, m_config.policy[RECV]);
    set("nic_reads_gpu", "Yes");
    EXPECT_EQ(UCT_RC_GDR_POLICY_YES, m_config.policy[SEND]);
    set("REG_METHODS", " PeerMem , dmabuf ");
    EXPECT_EQ(UCT_RC_GDR_REG_PEERMEM, m_config.methods[0]);
    set("BOUNCE", "n");
    EXPECT_FALSE(m_config.bounce);
    set("REQUIRE", "GDR");
    EXPECT_EQ(UCT_RC_GDR_REQUIRE_GDR, m_config.require);
}

TEST_F(test_rc_gdr_gate, config_parse_errors) {
    struct {
        const char *name, *value, *message;
    } cases[] = {
        {"MAX_DISTANCE", "NVL",
         "'NVL' for UCX_RC_GDR_MAX_DISTANCE: allowed values are LOC, PIX, "
         "PXB, PHB, NODE, SYS"},
        {"MAX_DISTANCE", "", "allowed values are LOC"},
        {"NIC_READS_GPU", "maybe",
         "'maybe' for UCX_RC_GDR_NIC_READS_GPU: allowed values are auto, "
         "yes, no"},
        {"REG_METHODS", "dmabuf,gdrcopy",
         "'gdrcopy' is not a method; allowed is a comma-separated list of "
         "dmabuf, peermem"},
        {"REG_METHODS", "dmabuf,,peermem", "'' is not a method"},
        {"REG_METHODS", "", "'' is not a method"},
        {"REG_METHODS", "peermem,PEERMEM", "'PEERMEM' is listed twice"},
        {"BOUNCE", "auto", "allowed values are yes, no"},
        {"REQUIRE", "yes", "'yes' for UCX_RC_GDR_REQUIRE: allowed values are "
                           "no, gdr"}
    };
    uct_rc_gdr_gate_config_t before = m_config;

    for (auto &c : cases) {
        log_capture capture;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_rc_gdr_gate_config_set(&m_config, c.name, c.value))
                << c.name << "=" << c.value;
        ASSERT_EQ(1u, captured_log.size());
        EXPECT_TRUE(contains(captured_log[0], c.message)) << captured_log[0];
        EXPECT_EQ(0, memcmp(&before, &m_config, sizeof(before)))
                << "config changed by a rejected value";
    }

    log_capture capture;
    EXPECT_EQ(UCS_ERR_NO_ELEM,
              uct_rc_gdr_gate_config_set(&m_config, "LEVEL", "PXB"));
    EXPECT_TRUE(contains(captured_log.at(0), "unknown rc_gdr gate setting"));
}

TEST_F(test_rc_gdr_gate, config_from_environment) {
    setenv(UCT_RC_GDR_KNOB_MAX_DISTANCE, "sys", 1);
    setenv(UCT_RC_GDR_KNOB_REG_METHODS, "peermem", 1);
    EXPECT_EQ(UCS_OK, uct_rc_gdr_gate_config_read_env(&m_config));
    EXPECT_EQ(UCT_RC_GDR_DIST_SYS, m_config.max_distance);
    EXPECT_EQ(1u, m_config.num_methods);

    setenv(UCT_RC_GDR_KNOB_BOUNCE, "sometimes", 1);
    {
        log_capture capture;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_rc_gdr_gate_config_read_env(&m_config));
    }
    unsetenv(UCT_RC_GDR_KNOB_MAX_DISTANCE);
    unsetenv(UCT_RC_GDR_KNOB_REG_METHODS);
    unsetenv(UCT_RC_GDR_KNOB_BOUNCE);
}

TEST_F(test_rc_gdr_gate, invalid_inputs) {
    log_capture capture;
    m_config.num_methods = 0;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, evaluate());
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_gate_evaluate(NULL, &m_nic, &m_topo, &m_config,
                                       &m_result));
}

TEST_F(test_rc_gdr_gate, json_is_valid_and_escaped) {
    /* Names that need escaping */
    m_gpu.name         = "GPU \"0\"\\\n\t\x01";
    m_nic.port_state   = "weird\x7f\xc3\xa9";
    m_nic.port_active  = 0;
    m_nic.dmabuf_errno = EOPNOTSUPP;

    uct_rc_gdr_gate_evaluate(&m_gpu, &m_nic, &m_topo, &m_config, &m_result);

    char *text  = NULL;
    size_t size = 0;
    FILE *stream = open_memstream(&text, &size);
    ASSERT_TRUE(stream != NULL);
    uct_rc_gdr_gate_print_json(&m_result, stream);
    fclose(stream);

    std::string json(text, size);
    free(text);
    EXPECT_TRUE(json_checker::valid(json)) << json;
    EXPECT_TRUE(contains(json, "\"gpu\": \"GPU \\\"0\\\"\\\\\\n\\t\\u0001\""))
            << json;
    EXPECT_TRUE(contains(json, "\"nic_reads_gpu\": \"BOUNCE\""));
    EXPECT_TRUE(contains(json, "\"check\": \"gpu.gdr_attribute\""));
    EXPECT_TRUE(contains(json, "\"knob\": null"));
}

TEST_F(test_rc_gdr_gate, json_checker_rejects_broken_json) {
    EXPECT_TRUE(json_checker::valid("{\"a\": [1, -2.5e3, true, null, "
                                    "\"\\u00e9\"]}"));
    EXPECT_FALSE(json_checker::valid("{\"a\": 1,}"));
    EXPECT_FALSE(json_checker::valid("{\"a\": \"x\ny\"}"));
    EXPECT_FALSE(json_checker::valid("{\"a\": \"\\x\"}"));
    EXPECT_FALSE(json_checker::valid("[1] 2"));
}

TEST_F(test_rc_gdr_gate, table_lists_every_check) {
    m_nic.dmabuf_errno  = EOPNOTSUPP;
    m_nic.peermem_errno = EFAULT;
    ASSERT_EQ(UCS_OK, evaluate());

    char *text  = NULL;
    size_t size = 0;
    FILE *stream = open_memstream(&text, &size);
    ASSERT_TRUE(stream != NULL);
    uct_rc_gdr_gate_print_table(&m_result, stream);
    fclose(stream);

    std::string table(text, size);
    free(text);
    for (unsigned i = 0; i < m_result.num_evidence; ++i) {
        EXPECT_TRUE(contains(table, m_result.evidence[i].check));
    }
    EXPECT_TRUE(contains(table, "GPU0 (0000:03:00.0) <-> mlx5_0 port 1: "
                                "distance PIX"));
    EXPECT_TRUE(contains(table, "hint: check nvidia_peermem / DMA-BUF "
                                "support, UCX_RC_GDR_REG_METHODS"));
    EXPECT_TRUE(contains(table, "NIC-writes-GPU  BOUNCE"));
}


/* The tool, on a machine that has neither a GPU in the given sysfs nor, in
 * CI, a verbs device: it must say so and exit 0 (2 with --require-gdr). */
#ifdef RC_GDR_TEST_BUILDDIR
static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw)
{
    return remove(path);
}

/* Runs the tool on a machine without a CUDA driver: this binary points the
 * shim at the stand-in driver, which the tool must not inherit here. */
static int run_tool(const std::string &args, std::string &out)
{
    std::string cmd = "RC_GDR_CUDA_LIBRARY=/nonexistent/libcuda.so.1 " +
                      std::string(RC_GDR_TEST_BUILDDIR) +
                      "/../src/tools/rc_gdr_info " + args + " 2>/dev/null";
    FILE *pipe      = popen(cmd.c_str(), "r");
    char buf[4096];
    size_t n;

    out.clear();
    while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) {
        out.append(buf, n);
    }
    int status = pclose(pipe);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(test_rc_gdr_info, no_gpu_json_and_require) {
    std::string tool = std::string(RC_GDR_TEST_BUILDDIR) +
                       "/../src/tools/rc_gdr_info";
    if (access(tool.c_str(), X_OK) != 0) {
        GTEST_SKIP() << tool << " is not built";
    }

    char root[] = "/tmp/rc_gdr_info.XXXXXX";
    ASSERT_TRUE(mkdtemp(root) != NULL);

    std::string out;
    EXPECT_EQ(0, run_tool(std::string("--json --sysfs ") + root, out));
    EXPECT_TRUE(json_checker::valid(out)) << out;
    EXPECT_TRUE(contains(out, "no NVIDIA GPU found")) << out;

    EXPECT_EQ(0, run_tool(std::string("--sysfs ") + root, out));
    EXPECT_TRUE(contains(out, "no NVIDIA GPU found")) << out;

    EXPECT_EQ(2, run_tool(std::string("--require-gdr --sysfs ") + root, out));
    EXPECT_EQ(1, run_tool("--bogus", out));
    /* --nearest-nics: a GPU not here is exit 3 and nothing on stdout, for
     * a launcher's $(...); with --json it is a usage error */
    EXPECT_EQ(3, run_tool(std::string("--nearest-nics 0 --sysfs ") + root,
                          out));
    EXPECT_EQ("", out);
    EXPECT_EQ(1, run_tool("--nearest-nics 0 --json", out));

    /* With the stand-in driver the GPUs come from CUDA, marked emulated,
     * and the JSON stays valid. */
    std::string fake = "RC_GDR_CUDA_LIBRARY=" +
                       std::string(RC_GDR_TEST_BUILDDIR) +
                       "/mocks/libcuda.so.1 ";
    FILE *pipe = popen((fake + RC_GDR_TEST_BUILDDIR +
                        "/../src/tools/rc_gdr_info --json --sysfs " + root +
                        " 2>/dev/null").c_str(), "r");
    ASSERT_TRUE(pipe != NULL);
    char buf[4096];
    size_t n;
    out.clear();
    while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) {
        out.append(buf, n);
    }
    EXPECT_EQ(0, WEXITSTATUS(pclose(pipe)));
    EXPECT_TRUE(json_checker::valid(out)) << out;
    EXPECT_TRUE(contains(out, "\"emulated\": true")) << out;
    /* the emulated GPUs' PCI functions are not in this empty tree */
    EXPECT_TRUE(contains(out, "\"pcie_path\": null, \"numa_node\": null"))
            << out;

    nftw(root, remove_entry, 4, FTW_DEPTH | FTW_PHYS);
}
#endif


/*
 * One device's place, as rc_gdr_info prints it per GPU: the host bridge,
 * the bridges down to it (root port first) and its NUMA node; a function
 * not in the tree, or a malformed address, is an error.
 */
TEST_F(test_rc_gdr_gate, dev_query_pcie_path_and_numa_node) {
    const char *sw1 = "pci0000:80/0000:80:01.0/0000:81:00.0";
    uct_rc_gdr_topo_dev_t dev;
    rc_gdr_sysfs sysfs;

    sysfs.add_pci(std::string(sw1) + "/0000:82:00.0/0000:83:00.0", 1,
                  "0x10de", "0x030200");
    ASSERT_EQ(UCS_OK, uct_rc_gdr_topo_dev_query(sysfs.root(), "83:00.0",
                                                &dev));
    EXPECT_STREQ("0000:83:00.0", dev.bdf);
    EXPECT_STREQ("pci0000:80", dev.host_bridge);
    ASSERT_EQ(3u, dev.num_bridges);
    EXPECT_STREQ("0000:80:01.0", dev.bridges[0]);
    EXPECT_STREQ("0000:81:00.0", dev.bridges[1]);
    EXPECT_STREQ("0000:82:00.0", dev.bridges[2]);
    EXPECT_EQ(1, dev.numa_node);

    EXPECT_NE(UCS_OK, uct_rc_gdr_topo_dev_query(sysfs.root(), "0000:84:00.0",
                                                &dev));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_topo_dev_query(sysfs.root(), "not-a-bdf", &dev));
}


/*
 * The GPU x NIC matrix rc_gdr_info prints, as nvidia-smi topo -m: over a
 * synthetic two-socket tree, each cell's distance class, the nearest NIC of
 * each GPU and the lane of each direction the gate gives.
 *
 *  pci0000:00 (node 0): 00:01.0 -> switch 01:00.0 -> 02:00.0 GPU0 03:00.0,
 *                                                    02:01.0 mlx5_0 04:00.0
 *  pci0000:80 (node 1): 80:01.0 -> switch 81:00.0 -> 82:00.0 GPU1 83:00.0,
 *                                                    82:01.0 mlx5_1 84:00.0
 */
TEST_F(test_rc_gdr_gate, matrix_of_two_sockets) {
    const char *sw0 = "pci0000:00/0000:00:01.0/0000:01:00.0";
    const char *sw1 = "pci0000:80/0000:80:01.0/0000:81:00.0";
    const char *gpus[] = {"GPU0", "GPU1"};
    const char *bdfs[] = {"0000:03:00.0", "0000:83:00.0"};
    const char *nics[] = {"mlx5_0", "mlx5_1"};
    const char *columns[] = {"mlx5_0:1", "mlx5_1:1"};
    uct_rc_gdr_gate_cell_t cells[4];
    rc_gdr_sysfs sysfs;

    sysfs.add_pci(std::string(sw0) + "/0000:02:00.0/0000:03:00.0", 0,
                  "0x10de", "0x030200");
    sysfs.add_pci(std::string(sw0) + "/0000:02:01.0/0000:04:00.0", 0);
    sysfs.add_pci(std::string(sw1) + "/0000:82:00.0/0000:83:00.0", 1,
                  "0x10de", "0x030200");
    sysfs.add_pci(std::string(sw1) + "/0000:82:01.0/0000:84:00.0", 1);
    sysfs.add_ib("mlx5_0", std::string(sw0) + "/0000:02:01.0/0000:04:00.0");
    sysfs.add_ib("mlx5_1", std::string(sw1) + "/0000:82:01.0/0000:84:00.0");

    /* GPU1 has no DMA-BUF: peermem where it is near */
    for (unsigned g = 0; g < 2; ++g) {
        m_gpu.name             = gpus[g];
        m_gpu.pci_bdf          = bdfs[g];
        m_gpu.dmabuf_supported = (g == 0);
        for (unsigned n = 0; n < 2; ++n) {
            m_nic.name = nics[n];
            ASSERT_EQ(UCS_OK, uct_rc_gdr_topo_classify(sysfs.root(), bdfs[g],
                                                       nics[n], &m_topo));
            ASSERT_EQ(UCS_OK, evaluate());
            uct_rc_gdr_gate_cell_set(&cells[g * 2 + n], &m_result);
        }
    }

    EXPECT_EQ(UCT_RC_GDR_DIST_PIX, cells[0].dist);
    EXPECT_EQ(UCT_RC_GDR_DIST_SYS, cells[1].dist);

    char *text  = NULL;
    size_t size = 0;
    FILE *stream = open_memstream(&text, &size);
    ASSERT_TRUE(stream != NULL);
    uct_rc_gdr_gate_print_matrix(gpus, 2, columns, 2, cells, stream);
    fclose(stream);
    std::string matrix(text, size);
    free(text);

    /* A header of NICs, a row per GPU: the near NIC marked, GDR by the
     * GPU's mechanism; the far one across sockets bounces */
    std::vector<std::string> lines;
    for (size_t pos = 0, next; pos < matrix.size(); pos = next + 1) {
        next = matrix.find('\n', pos);
        lines.push_back(matrix.substr(pos, next - pos));
    }
    ASSERT_GE(lines.size(), 3u) << matrix;
    EXPECT_TRUE(contains(lines[0], "mlx5_0:1")) << matrix;
    EXPECT_LT(lines[0].find("mlx5_0:1"), lines[0].find("mlx5_1:1"));
    EXPECT_EQ(0u, lines[1].find("GPU0")) << matrix;
    EXPECT_TRUE(contains(lines[1], "PIX* dmabuf/dmabuf")) << matrix;
    EXPECT_TRUE(contains(lines[1], "SYS bounce/bounce")) << matrix;
    EXPECT_LT(lines[1].find("PIX*"), lines[1].find("SYS"));
    EXPECT_EQ(0u, lines[2].find("GPU1")) << matrix;
    EXPECT_TRUE(contains(lines[2], "SYS bounce/bounce")) << matrix;
    EXPECT_TRUE(contains(lines[2], "PIX* peermem/peermem")) << matrix;
    EXPECT_LT(lines[2].find("SYS"), lines[2].find("PIX*"));
    /* Columns line up under their NIC */
    EXPECT_EQ(lines[0].find("mlx5_1:1"), lines[1].find("SYS"));
    EXPECT_TRUE(contains(matrix, "Legend"));

    stream = open_memstream(&text, &size);
    ASSERT_TRUE(stream != NULL);
    uct_rc_gdr_gate_print_matrix_json(gpus, 2, columns, 2, cells, stream);
    fclose(stream);
    std::string json(text, size);
    free(text);
    EXPECT_TRUE(json_checker::valid(json)) << json;
    EXPECT_TRUE(contains(json, "\"nics\": [\"mlx5_0:1\", \"mlx5_1:1\"]"))
            << json;
    EXPECT_TRUE(contains(json, "{\"distance\": \"PIX\", \"nearest\": true, "
                               "\"nic_reads_gpu\": \"GDR_DMABUF\", "
                               "\"nic_writes_gpu\": \"GDR_DMABUF\"}"))
            << json;
    EXPECT_TRUE(contains(json, "{\"distance\": \"SYS\", \"nearest\": false, "
                               "\"nic_reads_gpu\": \"BOUNCE\""))
            << json;

    /* rc_gdr_info --nearest-nics: each GPU's own NIC, as UCX_NET_DEVICES
     * takes it */
    for (unsigned g = 0; g < 2; ++g) {
        stream = open_memstream(&text, &size);
        ASSERT_TRUE(stream != NULL);
        EXPECT_EQ(1u, uct_rc_gdr_gate_print_nearest(columns, 2, &cells[g * 2],
                                                    stream));
        fclose(stream);
        EXPECT_EQ(std::string(columns[g]) + "\n", std::string(text, size));
        free(text);
    }
}


/* The nearest NICs of a row: every NIC at the smallest known distance, in
 * the row's order, comma-separated; none when no distance is known. */
TEST(test_rc_gdr_gate_matrix, nearest_nics_as_net_devices) {
    const char *nics[] = {"mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"};
    uct_rc_gdr_gate_cell_t row[4] = {};
    char *text  = NULL;
    size_t size = 0;
    FILE *stream;

    row[0].dist = UCT_RC_GDR_DIST_SYS;
    row[1].dist = UCT_RC_GDR_DIST_PIX;
    row[2].dist = UCT_RC_GDR_DIST_UNKNOWN;
    row[3].dist = UCT_RC_GDR_DIST_PIX;
    stream = open_memstream(&text, &size);
    ASSERT_TRUE(stream != NULL);
    EXPECT_EQ(2u, uct_rc_gdr_gate_print_nearest(nics, 4, row, stream));
    fclose(stream);
    EXPECT_EQ("mlx5_1:1,mlx5_3:1\n", std::string(text, size));
    free(text);

    for (unsigned n = 0; n < 4; ++n) {
        row[n].dist = UCT_RC_GDR_DIST_UNKNOWN;
    }
    stream = open_memstream(&text, &size);
    ASSERT_TRUE(stream != NULL);
    EXPECT_EQ(0u, uct_rc_gdr_gate_print_nearest(nics, 4, row, stream));
    fclose(stream);
    EXPECT_EQ("", std::string(text, size));
    free(text);
}
