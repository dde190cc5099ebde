/*
 * Corrupt endpoint and device addresses and remote keys are refused, and
 * an endpoint that was handed them still works afterwards.
 *
 * See file LICENSE for terms.
 */

#include "uct_rc_gdr_test.h"

#include <stdlib.h>
#include <string.h>


class bad_address : public uct_rc_gdr_test {
protected:
    void SetUp() override;

    /* a's own addresses with one byte changed */
    ucs_status_t connect_corrupt_ep();
    ucs_status_t connect_corrupt_dev();

    unsigned char blob[64];
};


void bad_address::SetUp()
{
    uct_rc_gdr_test::SetUp();
    if (IsSkipped()) {
        return;
    }

    a        = node_open(dev_a(), 4096);
    nodes[0] = a;
    uct_test_node_wire(a, &wa);
}

ucs_status_t bad_address::connect_corrupt_ep()
{
    memcpy(blob, wa.ep, sizeof(blob));
    blob[2] ^= 0x40; /* a flipped QP number bit */
    return uct_ep_connect_to_ep(a->ep, (uct_device_addr_t*)wa.dev,
                                (uct_ep_addr_t*)blob);
}

ucs_status_t bad_address::connect_corrupt_dev()
{
    memcpy(blob, wa.dev, sizeof(blob));
    blob[5] ^= 0xff;
    return uct_ep_connect_to_ep(a->ep, (uct_device_addr_t*)blob,
                                (uct_ep_addr_t*)wa.ep);
}


/* Random bytes as remote keys */
TEST_F(bad_address, random_rkeys_refused)
{
    uct_rkey_bundle_t rkey;
    int refused = 0, cases;
    size_t i;

    srand(7);
    for (cases = 0; cases < 500; ++cases) {
        for (i = 0; i < sizeof(blob); ++i) {
            blob[i] = rand();
        }
        if (uct_rkey_unpack(a->component, blob, &rkey) != UCS_OK) {
            ++refused;
        } else {
            uct_rkey_release(a->component, &rkey);
        }
    }
    UCT_TEST_EXPECT(refused == cases, "random remote keys refused (%d of %d)",
                    refused, cases);
}

TEST_F(bad_address, rkey_of_another_version_refused)
{
    uct_rkey_bundle_t rkey;
    ucs_status_t status;

    memcpy(blob, wa.rkey, sizeof(blob));
    blob[0] ^= 0x01; /* another format version */
    status = uct_rkey_unpack(a->component, blob, &rkey);
    if (status == UCS_OK) {
        uct_rkey_release(a->component, &rkey);
    }
    UCT_TEST_EXPECT(status != UCS_OK, "remote key of another version refused");
}

TEST_F(bad_address, corrupt_ep_address_refused)
{
    ucs_status_t status = connect_corrupt_ep();

    UCT_TEST_EXPECT(status != UCS_OK, "corrupt endpoint address refused (%s)",
                    ucs_status_string(status));
}

TEST_F(bad_address, corrupt_device_address_refused)
{
    ucs_status_t status = connect_corrupt_dev();

    UCT_TEST_EXPECT(status != UCS_OK, "corrupt device address refused (%s)",
                    ucs_status_string(status));
    UCT_TEST_EXPECT(!uct_iface_is_reachable(a->iface,
                                            (uct_device_addr_t*)blob, NULL),
                    "corrupt device address is not reachable");
}

/* Refused addresses leave the endpoint as it was: connected to itself
 * afterwards, it moves data */
TEST_F(bad_address, endpoint_works_after_refused_addresses)
{
    uint64_t value = 0x5a5a5a5a, *dst = (uint64_t*)a->buf;
    uct_rkey_bundle_t rkey;
    uct_test_comp_t wc;
    ucs_status_t status;

    status = connect_corrupt_ep();
    UCT_TEST_EXPECT(status != UCS_OK, "corrupt endpoint address refused (%s)",
                    ucs_status_string(status));
    status = connect_corrupt_dev();
    UCT_TEST_EXPECT(status != UCS_OK, "corrupt device address refused (%s)",
                    ucs_status_string(status));

    uct_test_node_connect(a, &wa);
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(a->component, wa.rkey, &rkey));
    uct_test_comp_init(&wc);
    status = UCT_TEST_RETRY(nodes, 1,
                            uct_ep_put_short(a->ep, &value, sizeof(value),
                                             wa.buf, rkey.rkey));
    status = uct_test_comp_wait(nodes, 1, status, &wc);
    if (status == UCS_OK) {
        status = uct_test_ep_flush(nodes, 1, a->ep);
    }
    uct_rkey_release(a->component, &rkey);
    UCT_TEST_EXPECT((status == UCS_OK) && (*dst == value),
                    "endpoint works after refused addresses (%s)",
                    ucs_status_string(status));
}
