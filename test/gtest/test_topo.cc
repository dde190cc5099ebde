/**
 * PCIe distance classification over synthetic sysfs trees, built at run time
 * in a temporary directory so each tree reads in the test that uses it.
 */

#include <gtest/gtest.h>

extern "C" {
#include <uct/ib_gdr/rc_gdr_topo.h>
}

#include "test_sysfs.h"

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>


/*
 * The box most tests use:
 *
 *  pci0000:00 (node 0)
 *    00:01.0 root port
 *      01:00.0 switch upstream
 *        02:00.0 down -> 03:00.0 GPU0
 *        02:01.0 down -> 04:00.0 mlx5_0          GPU0: PIX
 *        02:02.0 down -> 05:00.0 up -> 06:00.0 down -> 07:00.0 GPU1
 *    00:02.0 root port -> 08:00.0 mlx5_1         GPU0: PHB
 *  pci0000:40 (node 0)
 *    40:01.0 -> 41:00.0 mlx5_2                   GPU0: NODE
 *  pci0000:80 (node 1)
 *    80:01.0 -> 81:00.0 mlx5_3                   GPU0: SYS
 */
class test_rc_gdr_topo : public testing::Test {
protected:
    static constexpr const char *GPU0 = "0000:03:00.0";
    static constexpr const char *GPU1 = "0000:07:00.0";
    static constexpr const char *SW   = "pci0000:00/0000:00:01.0/0000:01:00.0";

    void SetUp() override
    {
        m_sysfs.add_pci(std::string(SW) + "/0000:02:00.0/0000:03:00.0", 0,
                        "0x10de", "0x030200");
        m_sysfs.add_pci(std::string(SW) + "/0000:02:01.0/0000:04:00.0", 0);
        m_sysfs.add_pci(std::string(SW) + "/0000:02:02.0/0000:05:00.0/"
                        "0000:06:00.0/0000:07:00.0", 0, "0x10de", "0x030200");
        m_sysfs.add_pci("pci0000:00/0000:00:02.0/0000:08:00.0", 0);
        m_sysfs.add_pci("pci0000:40/0000:40:01.0/0000:41:00.0", 0);
        m_sysfs.add_pci("pci0000:80/0000:80:01.0/0000:81:00.0", 1);

        m_sysfs.add_ib("mlx5_0", std::string(SW) + "/0000:02:01.0/"
                                                   "0000:04:00.0");
        m_sysfs.add_ib("mlx5_1", "pci0000:00/0000:00:02.0/0000:08:00.0");
        m_sysfs.add_ib("mlx5_2", "pci0000:40/0000:40:01.0/0000:41:00.0");
        m_sysfs.add_ib("mlx5_3", "pci0000:80/0000:80:01.0/0000:81:00.0");
    }

    uct_rc_gdr_topo_t classify(const char *gpu, const char *nic)
    {
        uct_rc_gdr_topo_t topo;

        EXPECT_EQ(UCS_OK, uct_rc_gdr_topo_classify(m_sysfs.root(), gpu, nic,
                                                   &topo));
        return topo;
    }

    uct_rc_gdr_dist_t dist(const char *gpu, const char *nic)
    {
        return classify(gpu, nic).dist;
    }

    rc_gdr_sysfs m_sysfs;
};


TEST_F(test_rc_gdr_topo, loc_same_device) {
    uct_rc_gdr_topo_t topo = classify(GPU0, GPU0);

    EXPECT_EQ(UCT_RC_GDR_DIST_LOC, topo.dist);
    EXPECT_EQ(0u, topo.num_route);
}

TEST_F(test_rc_gdr_topo, pix_one_switch) {
    uct_rc_gdr_topo_t topo = classify(GPU0, "mlx5_0");

    EXPECT_EQ(UCT_RC_GDR_TOPO_PCI, topo.outcome);
    EXPECT_EQ(UCT_RC_GDR_DIST_PIX, topo.dist) << topo.reason;
    EXPECT_STREQ("0000:04:00.0", topo.nic.bdf);
    EXPECT_STREQ("pci0000:00", topo.gpu.host_bridge);
    ASSERT_EQ(3u, topo.gpu.num_bridges);
    EXPECT_STREQ("0000:00:01.0", topo.gpu.bridges[0]);
    EXPECT_STREQ("0000:02:00.0", topo.gpu.bridges[2]);
    /* The switch upstream port and both downstream ports */
    EXPECT_EQ(3u, topo.num_route);
}

TEST_F(test_rc_gdr_topo, pix_by_pci_address) {
    EXPECT_EQ(UCT_RC_GDR_DIST_PIX, dist(GPU0, "0000:04:00.0"));
    /* CUDA and nvidia-smi spellings of the GPU address */
    EXPECT_EQ(UCT_RC_GDR_DIST_PIX, dist("00000000:03:00.0", "mlx5_0"));
    EXPECT_EQ(UCT_RC_GDR_DIST_PIX, dist("03:00.0", "mlx5_0"));
}

TEST_F(test_rc_gdr_topo, pxb_nested_switches) {
    uct_rc_gdr_topo_t topo = classify(GPU1, "mlx5_0");

    EXPECT_EQ(UCT_RC_GDR_DIST_PXB, topo.dist) << topo.reason;
    EXPECT_EQ(UCT_RC_GDR_DIST_PXB, dist(GPU0, GPU1));
}

TEST_F(test_rc_gdr_topo, phb_different_root_ports) {
    uct_rc_gdr_topo_t topo = classify(GPU0, "mlx5_1");

    EXPECT_EQ(UCT_RC_GDR_DIST_PHB, topo.dist) << topo.reason;
    EXPECT_NE(std::string::npos, std::string(topo.reason).find("pci0000:00"));
}

TEST_F(test_rc_gdr_topo, node_different_host_bridges) {
    uct_rc_gdr_topo_t topo = classify(GPU0, "mlx5_2");

    EXPECT_EQ(UCT_RC_GDR_DIST_NODE, topo.dist) << topo.reason;
    EXPECT_EQ(0, topo.gpu.numa_node);
    EXPECT_EQ(0, topo.nic.numa_node);
}

TEST_F(test_rc_gdr_topo, sys_two_numa_nodes) {
    uct_rc_gdr_topo_t topo = classify(GPU0, "mlx5_3");

    EXPECT_EQ(UCT_RC_GDR_DIST_SYS, topo.dist) << topo.reason;
    EXPECT_EQ(0, topo.gpu.numa_node);
    EXPECT_EQ(1, topo.nic.numa_node);
    EXPECT_EQ(UCT_RC_GDR_DIST_SYS, dist(GPU1, "mlx5_3"));
}

TEST_F(test_rc_gdr_topo, numa_unknown) {
    /* No NUMA at all: one node; NUMA on one side only: assume remote */
    m_sysfs.add_pci("pci0000:c0/0000:c0:01.0/0000:c1:00.0", -1);
    m_sysfs.add_pci("pci0000:d0/0000:d0:01.0/0000:d1:00.0", -1);
    EXPECT_EQ(UCT_RC_GDR_DIST_NODE, dist("0000:c1:00.0", "0000:d1:00.0"));
    EXPECT_EQ(UCT_RC_GDR_DIST_SYS, dist(GPU0, "0000:d1:00.0"));
}

TEST_F(test_rc_gdr_topo, acs_redirect_on_path) {
    /* Request + completion redirect on the GPU's downstream port */
    m_sysfs.set_config_acs("0000:02:00.0", 0x001d);
    m_sysfs.set_config_acs("0000:02:01.0", 0x0001);
    m_sysfs.set_config_no_acs("0000:01:00.0");

    uct_rc_gdr_topo_t topo = classify(GPU0, "mlx5_0");
    ASSERT_EQ(3u, topo.num_route);

    int redirect = 0, clear = 0, absent = 0;
    for (unsigned i = 0; i < topo.num_route; ++i) {
        const uct_rc_gdr_topo_bridge_t *b = &topo.route[i];
        if (std::string(b->bdf) == "0000:02:00.0") {
            EXPECT_EQ(UCT_RC_GDR_ACS_REDIRECT, b->acs);
            EXPECT_EQ(0x001d, b->acs_ctrl);
            EXPECT_EQ(0x148, b->acs_offset);
            ++redirect;
        } else if (std::string(b->bdf) == "0000:02:01.0") {
            EXPECT_EQ(UCT_RC_GDR_ACS_NO_REDIRECT, b->acs);
            ++clear;
        } else {
            EXPECT_EQ(UCT_RC_GDR_ACS_ABSENT, b->acs);
            ++absent;
        }
    }
    EXPECT_EQ(1, redirect);
    EXPECT_EQ(1, clear);
    EXPECT_EQ(1, absent);
}

TEST_F(test_rc_gdr_topo, acs_unreadable_without_root) {
    m_sysfs.set_config_unprivileged("0000:02:00.0");

    uct_rc_gdr_topo_t topo = classify(GPU0, "mlx5_0");
    for (unsigned i = 0; i < topo.num_route; ++i) {
        /* A 64-byte read, or no config file at all */
        EXPECT_EQ(UCT_RC_GDR_ACS_UNREADABLE, topo.route[i].acs);
    }
}

TEST_F(test_rc_gdr_topo, iommu_absent) {
    uct_rc_gdr_topo_t topo = classify(GPU0, "mlx5_0");

    EXPECT_FALSE(topo.iommu_present);
    EXPECT_EQ(UCT_RC_GDR_IOMMU_ABSENT, topo.gpu.iommu);
    EXPECT_EQ(UCT_RC_GDR_IOMMU_ABSENT, topo.nic.iommu);
}

TEST_F(test_rc_gdr_topo, iommu_translated) {
    m_sysfs.set_iommu_group(GPU0, 3, "DMA-FQ");
    m_sysfs.set_iommu_group("0000:04:00.0", 4, "DMA");

    uct_rc_gdr_topo_t topo = classify(GPU0, "mlx5_0");
    EXPECT_TRUE(topo.iommu_present);
    EXPECT_EQ(UCT_RC_GDR_IOMMU_TRANSLATED, topo.gpu.iommu);
    EXPECT_STREQ("DMA-FQ", topo.gpu.iommu_type);
    EXPECT_EQ(UCT_RC_GDR_IOMMU_TRANSLATED, topo.nic.iommu);
}

TEST_F(test_rc_gdr_topo, iommu_identity) {
    m_sysfs.set_iommu_group(GPU0, 3, "identity");
    m_sysfs.set_iommu_group("0000:04:00.0", 4, "identity");

    uct_rc_gdr_topo_t topo = classify(GPU0, "mlx5_0");
    EXPECT_EQ(UCT_RC_GDR_IOMMU_IDENTITY, topo.gpu.iommu);
    EXPECT_EQ(UCT_RC_GDR_IOMMU_IDENTITY, topo.nic.iommu);
    /* A device without its own group takes the system's mode */
    EXPECT_EQ(UCT_RC_GDR_IOMMU_IDENTITY, classify(GPU1, "mlx5_0").gpu.iommu);
}

TEST_F(test_rc_gdr_topo, virtual_nic_has_no_pci_device) {
    m_sysfs.add_virtual_ib("rxe0");

    uct_rc_gdr_topo_t topo = classify(GPU0, "rxe0");
    EXPECT_EQ(UCT_RC_GDR_TOPO_VIRTUAL_NIC, topo.outcome);
    EXPECT_EQ(UCT_RC_GDR_DIST_UNKNOWN, topo.dist);
    EXPECT_NE(std::string::npos,
              std::string(topo.reason).find("no PCI device: virtual NIC"));
}

/* rxe on the netdev of a PCI NIC: its traffic leaves through that NIC, so
 * it is placed there (on a veth, above, it stays unknown) */
TEST_F(test_rc_gdr_topo, rxe_on_pci_netdev_placed_at_its_nic) {
    char bdf[UCT_RC_GDR_BDF_MAX];

    m_sysfs.add_netdev("eth0", std::string(SW) + "/0000:02:01.0/"
                                                 "0000:04:00.0");
    m_sysfs.add_virtual_ib("rxe0", "eth0");
    m_sysfs.mkdirs("devices/virtual/net/v0");    /* a veth: no device */
    m_sysfs.link("../../devices/virtual/net/v0", "class/net/v0");
    m_sysfs.add_virtual_ib("rxe1", "v0");

    uct_rc_gdr_topo_t topo = classify(GPU0, "rxe0");
    EXPECT_EQ(UCT_RC_GDR_TOPO_PCI, topo.outcome) << topo.reason;
    EXPECT_EQ(UCT_RC_GDR_DIST_PIX, topo.dist);
    EXPECT_STREQ("0000:04:00.0", topo.nic.bdf);
    EXPECT_EQ(UCT_RC_GDR_DIST_SYS, dist(GPU0, "mlx5_3"));

    ASSERT_EQ(UCS_OK, uct_rc_gdr_topo_ibdev_bdf(
                              (std::string(m_sysfs.root()) +
                               "/class/infiniband/rxe0").c_str(),
                              bdf, sizeof(bdf)));
    EXPECT_STREQ("0000:04:00.0", bdf);

    /* virtio-net: the netdev's device is a virtio device below the PCI
     * function, which is where it is */
    std::string virtio = "devices/" + std::string(SW) + "/0000:02:02.0/"
                         "0000:05:00.0/virtio3";
    m_sysfs.mkdirs(virtio + "/net/eth2");
    m_sysfs.link("../../../virtio3", virtio + "/net/eth2/device");
    m_sysfs.link("../../" + virtio + "/net/eth2", "class/net/eth2");
    m_sysfs.add_virtual_ib("rxe2", "eth2");
    topo = classify(GPU0, "rxe2");
    EXPECT_EQ(UCT_RC_GDR_TOPO_PCI, topo.outcome) << topo.reason;
    EXPECT_STREQ("0000:05:00.0", topo.nic.bdf);

    /* a netdev without a PCI function */
    topo = classify(GPU0, "rxe1");
    EXPECT_EQ(UCT_RC_GDR_TOPO_VIRTUAL_NIC, topo.outcome);
    EXPECT_NE(UCS_OK, uct_rc_gdr_topo_ibdev_bdf(
                              (std::string(m_sysfs.root()) +
                               "/class/infiniband/rxe1").c_str(),
                              bdf, sizeof(bdf)));
}

TEST_F(test_rc_gdr_topo, nic_parent_not_pci) {
    /* A device link that leads to a network device, not a PCI function */
    m_sysfs.mkdirs("devices/virtual/net/eth9");
    m_sysfs.mkdirs("devices/virtual/infiniband/siw0");
    m_sysfs.link("../../net/eth9", "devices/virtual/infiniband/siw0/device");
    m_sysfs.mkdirs("class/infiniband");
    m_sysfs.link("../../devices/virtual/infiniband/siw0",
                 "class/infiniband/siw0");

    EXPECT_EQ(UCT_RC_GDR_TOPO_VIRTUAL_NIC,
              classify(GPU0, "siw0").outcome);
}

TEST_F(test_rc_gdr_topo, missing_devices) {
    uct_rc_gdr_topo_t topo = classify(GPU0, "mlx5_9");
    EXPECT_EQ(UCT_RC_GDR_TOPO_NOT_FOUND, topo.outcome);
    EXPECT_EQ(UCT_RC_GDR_DIST_UNKNOWN, topo.dist);

    topo = classify("0000:99:00.0", "mlx5_0");
    EXPECT_EQ(UCT_RC_GDR_TOPO_NOT_FOUND, topo.outcome);
    EXPECT_NE(std::string::npos, std::string(topo.reason).find("GPU"));
}

TEST_F(test_rc_gdr_topo, invalid_gpu_address) {
    uct_rc_gdr_topo_t topo;

    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_topo_classify(m_sysfs.root(), "GPU0", "mlx5_0",
                                       &topo));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_topo_classify(m_sysfs.root(), GPU0, "", &topo));
}

TEST(test_rc_gdr_topo_names, bdf_parse) {
    char bdf[UCT_RC_GDR_BDF_MAX];

    EXPECT_EQ(UCS_OK, uct_rc_gdr_topo_bdf_parse("0000:17:00.0", bdf,
                                                sizeof(bdf)));
    EXPECT_STREQ("0000:17:00.0", bdf);
    EXPECT_EQ(UCS_OK, uct_rc_gdr_topo_bdf_parse("00000000:AB:1F.7", bdf,
                                                sizeof(bdf)));
    EXPECT_STREQ("0000:ab:1f.7", bdf);
    EXPECT_EQ(UCS_OK, uct_rc_gdr_topo_bdf_parse("10000:e0:06.0", bdf,
                                                sizeof(bdf)));
    EXPECT_STREQ("10000:e0:06.0", bdf);

    const char *bad[] = {"", "mlx5_0", "0000:17:00", "0000:17:20.0",
                         "0000:17:00.8", "0000:17:00.0x", " 0000:17:00.0",
                         "0x0:17:00.0", "0000:100:00.0"};
    for (const char *str : bad) {
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_rc_gdr_topo_bdf_parse(str, bdf, sizeof(bdf)))
                << "'" << str << "'";
    }
}

TEST(test_rc_gdr_topo_names, dist_names) {
    uct_rc_gdr_dist_t dist;

    EXPECT_EQ(UCS_OK, uct_rc_gdr_topo_dist_parse("pxb", &dist));
    EXPECT_EQ(UCT_RC_GDR_DIST_PXB, dist);
    EXPECT_EQ(UCS_OK, uct_rc_gdr_topo_dist_parse("Sys", &dist));
    EXPECT_EQ(UCT_RC_GDR_DIST_SYS, dist);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_topo_dist_parse("UNKNOWN", &dist));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_rc_gdr_topo_dist_parse("NV1", &dist));
    EXPECT_STREQ("NODE", uct_rc_gdr_topo_dist_name(UCT_RC_GDR_DIST_NODE));
}
