/*
 * The fixtures of the UCT suites on real verbs devices (uct_rc_gdr_test.h).
 *
 * See file LICENSE for terms.
 */

#include "uct_rc_gdr_test.h"

#include <dlfcn.h>

#include <uct/ib_gdr/rc_gdr_cuda.h>

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static void uct_rc_gdr_test_die(const char *what, ucs_status_t status)
{
    throw uct_test_setup_error(uct_test_str("set-up failed: %s: %s", what,
                                            ucs_status_string(status)));
}

static const char *uct_rc_gdr_test_env(const char *name, const char *dflt)
{
    const char *value = getenv(name);

    return ((value != NULL) && (value[0] != '\0')) ? value : dflt;
}

const char *uct_rc_gdr_test::dev_a()
{
    return uct_rc_gdr_test_env("RC_GDR_DEV_A", "rxe0:1");
}

const char *uct_rc_gdr_test::dev_b()
{
    return uct_rc_gdr_test_env("RC_GDR_DEV_B", "rxe1:1");
}

bool uct_rc_gdr_test::has_device(const char *dev)
{
    uct_component_h component = uct_test_component_find();
    uct_tl_resource_desc_t *resources;
    uct_md_config_t *md_config;
    unsigned i, count;
    char md_name[64];
    bool found = false;
    uct_md_h md;

    if (component == NULL) {
        return false;
    }

    if (uct_md_config_read(component, NULL, NULL, &md_config) != UCS_OK) {
        return false;
    }

    snprintf(md_name, sizeof(md_name), "%s", dev);
    *strchrnul(md_name, ':') = '\0';
    if (uct_md_open(component, md_name, md_config, &md) == UCS_OK) {
        if (uct_md_query_tl_resources(md, &resources, &count) == UCS_OK) {
            for (i = 0; i < count; ++i) {
                found = found ||
                        (!strcmp(resources[i].tl_name, UCT_TEST_TL_NAME) &&
                         !strcmp(resources[i].dev_name, dev));
            }
            uct_release_tl_resource_list(resources);
        }
        uct_md_close(md);
    }
    uct_config_release(md_config);
    return found;
}

void uct_rc_gdr_test::SetUp()
{
    uct_test_set_die_hook(uct_rc_gdr_test_die);
    m_timeout_s = uct_test_timeout_s;
    if (uct_test_component_find() == NULL) {
        GTEST_SKIP() << "the rc_gdr component is not registered (module not"
                        " loaded: . contrib/env.sh)";
    }

    if (!has_device(dev_a()) || !has_device(dev_b())) {
        GTEST_SKIP() << "rc_gdr has no device " << dev_a() << " and "
                     << dev_b() << " here (RC_GDR_DEV_A, RC_GDR_DEV_B; the"
                        " soft-RoCE guest has rxe0:1 and rxe1:1)";
    }

    stand_in_nic_note();
}

void uct_rc_gdr_test::TearDown()
{
    while (!m_nodes.empty()) {
        node_close(m_nodes.back());
    }

    for (auto it = m_env.rbegin(); it != m_env.rend(); ++it) {
        setenv(it->first.c_str(), it->second.c_str(), 1);
    }
    for (const std::string &name : m_env_unset) {
        unsetenv(name.c_str());
    }
    m_env.clear();
    m_env_unset.clear();
    if (m_nic_spec) {
        ((void (*)())dlsym(RTLD_DEFAULT, "tnic_test_fault_clear"))();
        m_nic_spec = false;
    }
    uct_test_timeout_s = m_timeout_s;
}

uct_test_node_t *uct_rc_gdr_test::node_open(const char *dev, size_t buf_size)
{
    uct_test_node_t *node = new uct_test_node_t();

    try {
        uct_test_node_open(node, dev, buf_size);
    } catch (...) {
        delete node;  /* what opened before the failure is not closed */
        throw;
    }

    m_nodes.push_back(node);
    return node;
}

void uct_rc_gdr_test::node_close(uct_test_node_t *node)
{
    for (auto it = m_nodes.begin(); it != m_nodes.end(); ++it) {
        if (*it == node) {
            m_nodes.erase(it);
            uct_test_node_close(node);
            delete node;
            break;
        }
    }

    if (node == a) {
        a = nodes[0] = nullptr;
    } else if (node == b) {
        b = nodes[1] = nullptr;
    }
}

void uct_rc_gdr_test::pair_open(size_t buf_size)
{
    a        = node_open(dev_a(), buf_size);
    b        = node_open(dev_b(), buf_size);
    nodes[0] = a;
    nodes[1] = b;
    uct_test_node_connect_pair(a, b, &wa, &wb);
}

void uct_rc_gdr_test::emulated_gpu_note()
{
    uct_rc_gdr_cuda_driver_info_t info;

    if ((uct_rc_gdr_cuda_init() == UCS_OK) &&
        (uct_rc_gdr_cuda_driver_info(&info) == UCS_OK) && info.emulated) {
        printf("NOTE: EMULATED GPU: the CUDA driver is the project's "
               "stand-in (%s); \"GPU\" memory is host memory\n", info.library);
    }
}

void uct_rc_gdr_test::stand_in_nic_note()
{
    auto present = (int (*)(void))dlsym(RTLD_DEFAULT, "tnic_test_present");
    auto marker  = (const char *(*)(void))dlsym(RTLD_DEFAULT,
                                                "tnic_test_marker");

    if ((present != NULL) && (marker != NULL) && present()) {
        printf("NOTE: STAND-IN NIC: %s\n", marker());
    }
}

void uct_rc_gdr_test::env_set(const char *name, const char *value)
{
    const char *old = getenv(name);

    if (old != NULL) {
        m_env.emplace_back(name, old);
    } else {
        m_env_unset.emplace_back(name);
    }
    setenv(name, value, 1);
}

bool uct_rc_gdr_test::nic_spec_set(const char *spec)
{
    auto set = (int (*)(const char*))dlsym(RTLD_DEFAULT,
                                           "tnic_test_fault_set");

    if (set == nullptr) {
        return false;
    }
    EXPECT_EQ(0, set(spec)) << "stand-in NIC spec '" << spec << "'";
    m_nic_spec = true;
    return true;
}

bool uct_rc_gdr_test::stand_in_api(stand_in_api_t *api_p)
{
    auto present = (int (*)(void))dlsym(RTLD_DEFAULT, "tnic_test_present");
    stand_in_api_t api;

    api.fault_set   = (int (*)(const char*))dlsym(RTLD_DEFAULT,
                                                  "tnic_test_fault_set");
    api.fault_clear = (void (*)(void))dlsym(RTLD_DEFAULT,
                                            "tnic_test_fault_clear");
    api.counters    = (void (*)(tnic_test_counters_t*))dlsym(
                              RTLD_DEFAULT, "tnic_test_counters");
    api.mr_access   = (int (*)(uint32_t, int*))dlsym(RTLD_DEFAULT,
                                                     "tnic_test_mr_access");
    if ((present == nullptr) || !present() || (api.fault_set == nullptr) ||
        (api.fault_clear == nullptr) || (api.counters == nullptr) ||
        (api.mr_access == nullptr)) {
        return false;
    }
    *api_p = api;
    return true;
}

void uct_rc_gdr_pair_test::SetUp()
{
    uct_rc_gdr_test::SetUp();
    if (!IsSkipped()) {
        pair_open(pair_buf_size());
    }
}

size_t uct_rc_gdr_pair_test::pair_buf_size() const
{
    return 65536;
}

/* uct_test_watchdog.cc */
void uct_rc_gdr_test_watchdog_install();

int main(int argc, char **argv)
{
    /* A set-up wait is bounded too; line-buffered output survives a crash */
    uct_test_init("gtest_rc_gdr_uct", 30.0);
    testing::InitGoogleTest(&argc, argv);
    uct_rc_gdr_test_watchdog_install();
    return RUN_ALL_TESTS();
}
