/*
 * A request queued before the endpoint is connected (UCP does this during
 * wire-up) goes out once it is, although no completion follows to wake the
 * endpoint up. And what a stuck endpoint shows on UCX_RC_GDR_STATE_SIGNAL.
 *
 * See file LICENSE for terms.
 */

#include "uct_rc_gdr_test.h"
#include "../test_log.h"

#include <signal.h>
#include <stdio.h>
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


/*
 * UCX_RC_GDR_STATE_SIGNAL: on the signal, each interface logs its counters
 * and every endpoint's flow control, queues and QP state at its next
 * progress. Here an endpoint out of credits, one request queued behind
 * them (its peer is never progressed, so no credit comes back).
 */
class state_signal : public uct_rc_gdr_test {
protected:
    static ucs_status_t am_handler(void *arg, void *data, size_t length,
                                   unsigned flags)
    {
        return UCS_OK;
    }

    static ucs_status_t am_send(uct_pending_req_t *self)
    {
        return UCS_ERR_NO_RESOURCE; /* stays queued */
    }
};


TEST_F(state_signal, logs_credits_and_pending_at_next_progress)
{
    uct_pending_req_t req = {};
    int i;

    env_set("UCX_RC_GDR_STATE_SIGNAL", "SIGUSR2");
    env_set("UCX_RC_GDR_FC_WND_SIZE", "2");
    pair_open(4096);
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(b->iface, 7, am_handler,
                                               NULL, 0));

    for (i = 0; i < 2; ++i) {
        ASSERT_EQ(UCS_OK, uct_ep_am_short(a->ep, 7, 0, NULL, 0));
    }
    ASSERT_EQ(UCS_ERR_NO_RESOURCE, uct_ep_am_short(a->ep, 7, 0, NULL, 0));
    req.func = am_send;
    ASSERT_EQ(UCS_OK, uct_ep_pending_add(a->ep, &req, 0));

    {
        log_capture capture(UCS_LOG_LEVEL_WARN);

        /* nothing before the signal */
        for (i = 0; i < 1000; ++i) {
            uct_test_progress(&a, 1);
        }
        UCT_TEST_EXPECT(!captured_log_has("state:"), "no state logged "
                        "without the signal (%zu lines)",
                        captured_log.size());

        raise(SIGUSR2);
        for (i = 0; i < 1000; ++i) {
            uct_test_progress(&a, 1);
        }
        for (const std::string &line : captured_log) {
            printf("%s\n", line.c_str());
        }
        UCT_TEST_EXPECT(captured_log_count("state: rx_posted") == 1,
                        "the interface's counters, once: %u",
                        captured_log_count("state: rx_posted"));
        UCT_TEST_EXPECT(captured_log_has("fc_credits 0 fc_to_return 0 "
                                         "pending 1") &&
                        captured_log_has("QP state RTS"),
                        "the endpoint out of credits, one request queued, "
                        "its QP ready to send");
    }

    uct_ep_pending_purge(a->ep, NULL, NULL);
}
