/*
 * A forked peer is killed with SIGKILL mid-transfer: the survivor's
 * operations end with an error, through its error handler, within a bound
 * that follows from the failure settings. The survivor is on dev_b(), the
 * peer on dev_a().
 *
 * See file LICENSE for terms.
 */

#include "uct_rc_gdr_test.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>


class peer_death : public uct_rc_gdr_test {
protected:
    static const uint8_t AM_ID    = 7;
    static const size_t  BUF_SIZE = 2u * 1024 * 1024;

    void TearDown() override;

    /* Forks the peer, transfers to it, kills it, and keeps transferring
     * (puts, or active messages and flushes) until an error: it must come
     * within bound_s seconds */
    void test_death(double bound_s, bool am);

    /* One transfer after the peer died, and whether it ended */
    ucs_status_t transfer(bool am, uct_iov_t *iov, uct_test_comp_t *wc,
                          double deadline);

    uct_test_node_t survivor;
    bool survivor_open = false;
    pid_t child        = -1;
    uct_test_wire_t wpeer;
    uct_rkey_bundle_t rkey;
};


void peer_death::TearDown()
{
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    if (survivor_open) {
        uct_rkey_release(survivor.component, &rkey);
        uct_test_node_close(&survivor);
    }
    uct_rc_gdr_test::TearDown();
}

/* A put, or an active message and a flush that waits for it (SENDs, which a
 * dead peer never acknowledges either) */
ucs_status_t peer_death::transfer(bool am, uct_iov_t *iov,
                                  uct_test_comp_t *wc, double deadline)
{
    uct_test_node_t *nodes[1] = {&survivor};
    ucs_status_t status;

    uct_test_comp_init(wc);
    if (am) {
        status = UCT_TEST_RETRY(nodes, 1,
                                uct_ep_am_short(survivor.ep, AM_ID, 0, NULL,
                                                0));
        if (status == UCS_OK) {
            status = UCT_TEST_RETRY(nodes, 1,
                                    uct_ep_flush(survivor.ep, 0, &wc->comp));
        }
    } else {
        status = UCT_TEST_RETRY(nodes, 1,
                                uct_ep_put_zcopy(survivor.ep, iov, 1,
                                                 wpeer.buf, rkey.rkey,
                                                 &wc->comp));
    }

    while ((status == UCS_INPROGRESS) && (wc->comp.count > 0) &&
           (uct_test_now() < deadline)) {
        uct_test_progress(nodes, 1);
    }
    if (status == UCS_INPROGRESS) {
        status = (wc->comp.count > 0) ? UCS_ERR_TIMED_OUT : wc->status;
    }
    return status;
}

void peer_death::test_death(double bound_s, bool am)
{
    uct_test_node_t *nodes[1] = {&survivor};
    ucs_status_t status       = UCS_OK;
    double t_kill, elapsed, deadline;
    uct_test_comp_t wc;
    uct_iov_t iov;
    int i;

    child         = uct_test_peer_fork(&survivor, dev_b(), dev_a(), BUF_SIZE,
                                       &wpeer, &rkey);
    survivor_open = true;
    uct_test_iov_init(&iov, survivor.buf, 65536, survivor.memh);

    for (i = 0; i < 20; ++i) {
        uct_test_comp_init(&wc);
        status = UCT_TEST_RETRY(nodes, 1,
                                uct_ep_put_zcopy(survivor.ep, &iov, 1,
                                                 wpeer.buf, rkey.rkey,
                                                 &wc.comp));
        status = uct_test_comp_wait(nodes, 1, status, &wc);
        if (status == UCS_OK) {
            status = uct_test_ep_flush(nodes, 1, survivor.ep);
        }
        if (status != UCS_OK) {
            break;
        }
    }
    ASSERT_TRUE(status == UCS_OK)
        << uct_test_str("transfers to a live peer succeed (%s)",
                        ucs_status_string(status));

    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    child    = -1;
    t_kill   = uct_test_now();
    deadline = t_kill + 3 * bound_s + 10;

    /* Keep transferring: every operation must end, with an error */
    while ((status == UCS_OK) && !survivor.ep_error &&
           (uct_test_now() < deadline)) {
        status = transfer(am, &iov, &wc, deadline);
    }
    elapsed = uct_test_now() - t_kill;

    printf("peer killed: survivor's %s saw %s%s after %.2f s (bound %.1f s)"
           "\n", am ? "active messages" : "puts",
           ucs_status_string(survivor.ep_error ? survivor.ep_error_status :
                             status),
           survivor.ep_error ? " through the error handler" : "", elapsed,
           bound_s);
    UCT_TEST_EXPECT((status != UCS_OK) && (status != UCS_ERR_TIMED_OUT) &&
                    (elapsed <= bound_s),
                    "peer death reported within %.1f s (%.2f s, %s)", bound_s,
                    elapsed, ucs_status_string(status));
    UCT_TEST_EXPECT(survivor.ep_error, "error handler called with %s",
                    ucs_status_string(survivor.ep_error_status));
}


/* The default UCX_RC_GDR_FAILURE_TIMEOUT (8s) */
TEST_F(peer_death, put_reported_within_10s)
{
    test_death(10.0, false);
}

TEST_F(peer_death, put_failure_timeout_2s_reported_within_3s)
{
    env_set("UCX_RC_GDR_FAILURE_TIMEOUT", "2s");
    test_death(3.0, false);
}

/* The transport's own timeout never fires (rxe retries forever at
 * RETRY_COUNT=7, as when a NIC loses its retry timer): the stall check
 * (UCX_RC_GDR_TX_STALL_TIMEOUT) reports the dead peer instead */
TEST_F(peer_death, put_retries_forever_stall_reported_within_8s)
{
    env_set("UCX_RC_GDR_RETRY_COUNT", "7");
    env_set("UCX_RC_GDR_TX_STALL_TIMEOUT", "4s");
    test_death(8.0, false);
}

/* The same with active messages and a flush: the survivor's SENDs to the
 * dead peer, which UCX's test_uct_peer_failure_multiple waits on (issue 10),
 * end with the stall check's error too */
TEST_F(peer_death, am_retries_forever_stall_reported_within_8s)
{
    env_set("UCX_RC_GDR_RETRY_COUNT", "7");
    env_set("UCX_RC_GDR_TX_STALL_TIMEOUT", "4s");
    test_death(8.0, true);
}
