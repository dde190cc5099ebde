/*
 * The fixtures of the UCT suites that run on real verbs devices (the
 * soft-RoCE guest, or a site's NICs): rc_gdr nodes opened on the devices
 * RC_GDR_DEV_A and RC_GDR_DEV_B name (default rxe0:1 and rxe1:1), closed
 * when the test ends. Without rc_gdr on both devices every test skips and
 * says why.
 *
 * A check is a gtest expectation; UCT_TEST_EXPECT adds a printf-style
 * description, so a failure says what was checked and with which values.
 * A set-up step that fails (uct_test_die) fails the test it ran in.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_RC_GDR_TEST_H_
#define UCT_RC_GDR_TEST_H_

#include "../../tnic/tnic_test.h"
#include "uct_test_util.h"
#include "../test_str.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>


#define UCT_TEST_EXPECT(_cond, ...) \
    EXPECT_TRUE(_cond) << uct_test_str(__VA_ARGS__)


/* What uct_test_die() throws in the suites */
class uct_test_setup_error : public std::runtime_error {
public:
    explicit uct_test_setup_error(const std::string &what) :
        std::runtime_error(what)
    {
    }
};


/*
 * Nodes on the devices under test. A test opens what it needs with
 * node_open() and may close a node early with node_close(); what is still
 * open is closed at TearDown, in reverse order.
 */
class uct_rc_gdr_test : public testing::Test {
public:
    static const char *dev_a();
    static const char *dev_b();

    /* Whether rc_gdr offers dev ("rxe0:1") in this process */
    static bool has_device(const char *dev);

protected:
    void SetUp() override;
    void TearDown() override;

    uct_test_node_t *node_open(const char *dev, size_t buf_size);
    void node_close(uct_test_node_t *node);

    /* Opens a on dev_a() and b on dev_b(), each with a registered buffer of
     * buf_size bytes, connected to each other */
    void pair_open(size_t buf_size);

    /* Says in the test's output that "GPU" memory is host memory, when the
     * CUDA driver is the project's stand-in (run.sh then marks the result
     * EMULATED GPU); every test on the stand-in calls it */
    static void emulated_gpu_note();

    /* Says in the test's output that the devices are the project's
     * stand-in NIC (test/tnic), when it is the libibverbs loaded (run.sh
     * then marks the result STAND-IN NIC); SetUp calls it */
    static void stand_in_nic_note();

    /* Sets a variable (UCX_RC_GDR_...) until the test ends; UCX reads its
     * configuration when an md or interface opens, so set it before */
    void env_set(const char *name, const char *value);

    /* On the stand-in NIC (test/tnic), applies one of its fault or
     * capability specs until the test ends; false on a real device */
    bool nic_spec_set(const char *spec);

    /* The stand-in NIC's test API (test/tnic/tnic_test.h), found with
     * dlsym: false, with *api_p unset, when it is not loaded */
    struct stand_in_api_t {
        int  (*fault_set)(const char*);
        void (*fault_clear)(void);
        void (*counters)(tnic_test_counters_t*);
        int  (*mr_access)(uint32_t, int*); /* the flags an MR asked for */
    };
    static bool stand_in_api(stand_in_api_t *api_p);

    uct_test_node_t *a = nullptr, *b = nullptr;
    uct_test_wire_t wa, wb;              /* their addresses, after pair_open */
    uct_test_node_t *nodes[2] = {nullptr, nullptr};

private:
    std::vector<uct_test_node_t*> m_nodes;
    std::vector<std::pair<std::string, std::string>> m_env;  /* to restore */
    std::vector<std::string> m_env_unset;
    bool m_nic_spec = false;
    double m_timeout_s = 0;
};


/* The two-node fixture: a and b open and connected before the test body */
class uct_rc_gdr_pair_test : public uct_rc_gdr_test {
protected:
    void SetUp() override;

    /* Bytes of each node's registered buffer */
    virtual size_t pair_buf_size() const;
};

#endif
