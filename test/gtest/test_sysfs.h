/**
 * A synthetic sysfs tree for unit tests (topology, gate, md), built at run
 * time below a temporary root so each tree reads in the test that uses it.
 */

#ifndef RC_GDR_TEST_SYSFS_H_
#define RC_GDR_TEST_SYSFS_H_

#include <gtest/gtest.h>

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>


/*
 * A sysfs tree below a temporary root. PCI functions are added by their path
 * below devices/ ("pci0000:00/0000:00:01.0/0000:01:00.0"); every function on
 * the way gets its bus/pci/devices link, as the kernel makes them.
 */
class rc_gdr_sysfs {
public:
    rc_gdr_sysfs()
    {
        char tmpl[] = "/tmp/rc_gdr_sysfs.XXXXXX";
        EXPECT_TRUE(mkdtemp(tmpl) != NULL);
        m_root = tmpl;
        mkdirs("bus/pci/devices");
    }

    ~rc_gdr_sysfs()
    {
        nftw(m_root.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    }

    const char *root() const
    {
        return m_root.c_str();
    }

    void mkdirs(const std::string &rel)
    {
        std::string path = m_root;
        size_t pos       = 0;

        while (pos != std::string::npos) {
            size_t next = rel.find('/', pos);
            path = m_root + "/" + rel.substr(0, next);
            mkdir(path.c_str(), 0755);
            pos = (next == std::string::npos) ? next : next + 1;
        }
    }

    void write(const std::string &rel, const std::string &content)
    {
        FILE *file = fopen((m_root + "/" + rel).c_str(), "w");
        ASSERT_TRUE(file != NULL) << rel;
        fwrite(content.data(), 1, content.size(), file);
        fclose(file);
    }

    void link(const std::string &target, const std::string &rel)
    {
        ASSERT_EQ(0, symlink(target.c_str(), (m_root + "/" + rel).c_str()))
                << rel;
    }

    /* Add the functions of a path; the last one gets @a numa */
    void add_pci(const std::string &path, int numa,
                 const char *vendor = "0x15b3", const char *cls = "0x020700")
    {
        size_t pos = path.find('/');

        while (pos != std::string::npos) {
            size_t next     = path.find('/', pos + 1);
            std::string dir = path.substr(0, next);
            std::string bdf = dir.substr(dir.rfind('/') + 1);
            std::string dev = "devices/" + dir;

            if (access((m_root + "/" + dev).c_str(), F_OK) != 0) {
                bool leaf = (next == std::string::npos);
                mkdirs(dev);
                link("../../../" + dev, "bus/pci/devices/" + bdf);
                write(dev + "/numa_node", std::to_string(numa) + "\n");
                write(dev + "/vendor", std::string(leaf ? vendor : "0x8086") +
                                               "\n");
                write(dev + "/class", std::string(leaf ? cls : "0x060400") +
                                              "\n");
            }
            pos = next;
        }
    }

    /* A verbs device on a PCI function, linked as the kernel does */
    void add_ib(const std::string &name, const std::string &pci_path)
    {
        std::string dir = "devices/" + pci_path + "/infiniband/" + name;
        std::string bdf = pci_path.substr(pci_path.rfind('/') + 1);

        mkdirs(dir);
        link("../../../" + bdf, dir + "/device");
        mkdirs("class/infiniband");
        link("../../" + dir, "class/infiniband/" + name);
    }

    /* rxe/siw: the ib device hangs off devices/virtual, no device link;
     * rxe names the netdev it sits on in "parent" */
    void add_virtual_ib(const std::string &name,
                        const std::string &parent = "")
    {
        mkdirs("devices/virtual/infiniband/" + name);
        mkdirs("class/infiniband");
        link("../../devices/virtual/infiniband/" + name,
             "class/infiniband/" + name);
        if (!parent.empty()) {
            write("devices/virtual/infiniband/" + name + "/parent",
                  parent + "\n");
        }
    }

    /* A network device of a PCI function (class/net/<name>/device) */
    void add_netdev(const std::string &name, const std::string &pci_path)
    {
        std::string dir = "devices/" + pci_path + "/net/" + name;
        std::string bdf = pci_path.substr(pci_path.rfind('/') + 1);

        mkdirs(dir);
        link("../../../" + bdf, dir + "/device");
        mkdirs("class/net");
        link("../../" + dir, "class/net/" + name);
    }

    /*
     * Config space of a bridge: 4 KiB with an AER capability at 0x100 that
     * chains to ACS at 0x148 (control word at 0x14e), like real switches.
     */
    void set_config_acs(const std::string &bdf, uint16_t acs_ctrl)
    {
        std::string cfg(4096, '\0');

        put32(cfg, 0x100, 0x0001 | (1u << 16) | (0x148u << 20)); /* AER */
        put32(cfg, 0x148, 0x000d | (1u << 16));                 /* ACS */
        put32(cfg, 0x14c, 0x005f | ((uint32_t)acs_ctrl << 16));
        write("bus/pci/devices/" + bdf + "/config", cfg);
    }

    /* Extended config space without ACS */
    void set_config_no_acs(const std::string &bdf)
    {
        std::string cfg(4096, '\0');

        put32(cfg, 0x100, 0x0001 | (1u << 16));
        write("bus/pci/devices/" + bdf + "/config", cfg);
    }

    /* What an unprivileged reader gets: the first 64 bytes */
    void set_config_unprivileged(const std::string &bdf)
    {
        write("bus/pci/devices/" + bdf + "/config", std::string(64, '\0'));
    }

    void set_iommu_group(const std::string &bdf, int group,
                         const std::string &type)
    {
        std::string dir = "kernel/iommu_groups/" + std::to_string(group);

        mkdirs("class/iommu/dmar0");
        mkdirs(dir);
        write(dir + "/type", type + "\n");
        link(m_root + "/" + dir, "bus/pci/devices/" + bdf + "/iommu_group");
    }

private:
    static int remove_entry(const char *path, const struct stat *st, int flag,
                            struct FTW *ftw)
    {
        return remove(path);
    }

    static void put32(std::string &buf, size_t offset, uint32_t value)
    {
        for (int i = 0; i < 4; ++i) {
            buf[offset + i] = (char)((value >> (8 * i)) & 0xff);
        }
    }

    std::string m_root;
};

#endif
