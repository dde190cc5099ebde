/*
 * A request queued before the endpoint is connected (UCP does this during
 * wire-up) goes out once it is, although no completion follows to wake the
 * endpoint up.
 *
 * See file LICENSE for terms.
 */

#include "uct_rc_gdr_test.h"

#include <string.h>


class pending : public uct_rc_gdr_test {
protected:
    static const uint8_t AM_ID = 7;

    struct pending_am {
        uct_pending_req_t req;
        uct_ep_h          ep;
        int               done;
    };

    /* a and b opened, not connected, counting the messages they receive */
    void SetUp() override;

    static ucs_status_t am_handler(void *arg, void *data, size_t length,
                                   unsigned flags);
    static ucs_status_t pending_am_send(uct_pending_req_t *self);

    int am_count       = 0;
    pending_am request = {};  /* outlives the test body, queued or not */
};


void pending::SetUp()
{
    uct_rc_gdr_test::SetUp();
    if (IsSkipped()) {
        return;
    }

    a        = node_open(dev_a(), 4096);
    b        = node_open(dev_b(), 4096);
    nodes[0] = a;
    nodes[1] = b;
    for (uct_test_node_t *node : nodes) {
        ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(node->iface, AM_ID,
                                                   am_handler, this, 0));
    }
}

ucs_status_t pending::am_handler(void *arg, void *data, size_t length,
                                 unsigned flags)
{
    ++((pending*)arg)->am_count;
    return UCS_OK;
}

ucs_status_t pending::pending_am_send(uct_pending_req_t *self)
{
    pending_am *p       = ucs_container_of(self, pending_am, req);
    ucs_status_t status = uct_ep_am_short(p->ep, AM_ID, 0x5eed, NULL, 0);

    p->done = (status == UCS_OK);
    return status;
}


TEST_F(pending, request_before_connect_sent_after)
{
    ucs_status_t status;
    double deadline;

    request.ep       = a->ep;
    request.req.func = pending_am_send;

    status = uct_ep_am_short(a->ep, AM_ID, 0, NULL, 0);
    UCT_TEST_EXPECT(status == UCS_ERR_NO_RESOURCE,
                    "an endpoint not yet connected has no resources (%s)",
                    ucs_status_string(status));
    status = uct_ep_pending_add(a->ep, &request.req, 0);
    ASSERT_TRUE(status == UCS_OK)
        << uct_test_str("the request is queued (%s)",
                        ucs_status_string(status));

    uct_test_node_wire(a, &wa);
    uct_test_node_wire(b, &wb);
    uct_test_node_connect(a, &wb);
    uct_test_node_connect(b, &wa);

    am_count = 0;
    deadline = uct_test_now() + 10.0;
    while ((!request.done || (am_count == 0)) &&
           (uct_test_now() < deadline)) {
        uct_test_progress(nodes, 2);
    }
    UCT_TEST_EXPECT(request.done && (am_count == 1),
                    "after connecting, progress sends it (sent %d, arrived "
                    "%d)", request.done, am_count);
}
