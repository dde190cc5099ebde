/*
 * Interface events of rc_gdr through the public UCT API, and UCP's blocking
 * progress on top of them:
 *
 *   event      event fd and arm: quiet while nothing happens, woken by an
 *              active message (RECV, RECV_SIG for signaled ones) and by a
 *              put's completion (SEND_COMP), BUSY until progress took what
 *              woke it, BUSY for a completion that came before the arm and
 *              for a request that became dispatchable; progress takes
 *              messages first and leaves the send queue for the next call
 *              (arm BUSY meanwhile) unless it is short of room
 *   event_ucp  ucp_worker_get_efd / arm / wait: a worker blocked in
 *              ucp_worker_wait wakes for a tag message, with the data on
 *              rc_gdr (UCX_TLS=rc_gdr,ud_verbs:aux,self)
 *
 * Every wait is bounded.
 *
 * See file LICENSE for terms.
 */

#include "ucp_pair.h"
#include "uct_rc_gdr_test.h"
#include "../test_log.h"

#include <ucp/api/ucp.h>
#include <ucs/config/global_opts.h>
#include <ucs/debug/log_def.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>


#define EVENT_AM_ID          5
#define EVENT_BUF_SIZE       4096
#define EVENT_WAKE_TIMEOUT_S 10.0  /* an event must arrive within this */
#define EVENT_QUIET_S        1.0   /* and none while nothing happens */
#define EVENT_BUSY_TRIES     3


/* 1 when fd is readable within timeout_s, 0 when not; *elapsed_p seconds */
static int event_fd_wait(int fd, double timeout_s, double *elapsed_p)
{
    struct pollfd pfd;
    double start = uct_test_now();
    int ret;

    pfd.fd      = fd;
    pfd.events  = POLLIN;
    pfd.revents = 0;
    do {
        ret = poll(&pfd, 1, (int)(timeout_s * 1000));
    } while ((ret < 0) && (errno == EINTR));

    if (elapsed_p != NULL) {
        *elapsed_p = uct_test_now() - start;
    }
    return ret > 0;
}


/*
 * Two nodes with an active message handler that counts what arrived (and
 * remembers its header), opened in SetUp. A test connects them with
 * event_connect(): one queues a request before.
 */
class event : public uct_rc_gdr_test {
protected:
    void SetUp() override;
    void TearDown() override;

    /* Connects a and b, unpacks b's key at a, and gets the event fds */
    void event_connect();

    static ucs_status_t am_handler(void *arg, void *data, size_t length,
                                   unsigned flags);

    /* UCT's idiom: progress until nothing is left, arm, again while BUSY */
    ucs_status_t arm_until_ok(uct_test_node_t *node, unsigned events);

    /* Progresses node until *counter reaches target, bounded */
    bool progress_until(uct_test_node_t *node, volatile int *counter,
                        int target);

    /* EVENT_BUSY_TRIES arms without progress: each must answer BUSY */
    bool arm_stays_busy(uct_test_node_t *node, unsigned events,
                        ucs_status_t *last_p);

    /* An active message from a, posted without progressing b */
    ucs_status_t send_am(uint64_t hdr);

    /* Connects; puts from a (completing comp) and a message from b, both
     * in a's queues, a not progressed */
    void fill_both_queues(uct_test_comp_t *comp, unsigned puts);

    /* fill_both_queues, then one progress of a; *count_p: the messages
     * before. false when the queues could not be filled (failed there) */
    bool progress_once_after_fill(uct_test_comp_t *comp, unsigned puts,
                                  int *count_p);

    volatile int m_am_count = 0;
    uint64_t m_am_hdr       = 0;
    int m_fd_a              = -1;
    int m_fd_b              = -1;
    uct_rkey_bundle_t m_rkey = {};       /* b's buffer, unpacked at a */
    bool m_rkey_unpacked    = false;
};


void event::SetUp()
{
    ucs_status_t status;
    int i;

    uct_rc_gdr_test::SetUp();
    if (IsSkipped()) {
        return;
    }

    a        = node_open(dev_a(), EVENT_BUF_SIZE);
    b        = node_open(dev_b(), EVENT_BUF_SIZE);
    nodes[0] = a;
    nodes[1] = b;
    for (i = 0; i < 2; ++i) {
        status = uct_iface_set_am_handler(nodes[i]->iface, EVENT_AM_ID,
                                          am_handler, this, 0);
        if (status != UCS_OK) {
            uct_test_die("uct_iface_set_am_handler", status);
        }
    }
}

void event::TearDown()
{
    if (m_rkey_unpacked) {
        uct_rkey_release(a->component, &m_rkey);
        m_rkey_unpacked = false;
    }
    uct_rc_gdr_test::TearDown();
}

ucs_status_t event::am_handler(void *arg, void *data, size_t length,
                               unsigned flags)
{
    event *self = (event*)arg;

    if (length >= sizeof(self->m_am_hdr)) {
        memcpy(&self->m_am_hdr, data, sizeof(self->m_am_hdr));
    }
    ++self->m_am_count;
    return UCS_OK;
}

void event::event_connect()
{
    ucs_status_t status;

    uct_test_node_wire(a, &wa);
    uct_test_node_wire(b, &wb);
    uct_test_node_connect(a, &wb);
    uct_test_node_connect(b, &wa);

    status = uct_rkey_unpack(a->component, wb.rkey, &m_rkey);
    if (status != UCS_OK) {
        uct_test_die("uct_rkey_unpack", status);
    }
    m_rkey_unpacked = true;

    status = uct_iface_event_fd_get(a->iface, &m_fd_a);
    if (status == UCS_OK) {
        status = uct_iface_event_fd_get(b->iface, &m_fd_b);
    }
    if (status != UCS_OK) {
        uct_test_die("uct_iface_event_fd_get", status);
    }
}

ucs_status_t event::arm_until_ok(uct_test_node_t *node, unsigned events)
{
    double deadline = uct_test_now() + uct_test_timeout_s;
    ucs_status_t status;
    unsigned count;

    do {
        count  = uct_worker_progress(node->worker);
        status = uct_iface_event_arm(node->iface, events);
    } while (((status == UCS_ERR_BUSY) || (count != 0)) &&
             (uct_test_now() < deadline));
    return status;
}

bool event::progress_until(uct_test_node_t *node, volatile int *counter,
                           int target)
{
    double deadline = uct_test_now() + uct_test_timeout_s;

    while ((*counter < target) && (uct_test_now() < deadline)) {
        uct_worker_progress(node->worker);
    }
    return *counter >= target;
}

bool event::arm_stays_busy(uct_test_node_t *node, unsigned events,
                           ucs_status_t *last_p)
{
    int i;

    for (i = 0; i < EVENT_BUSY_TRIES; ++i) {
        *last_p = uct_iface_event_arm(node->iface, events);
        if (*last_p != UCS_ERR_BUSY) {
            return false;
        }
    }
    return true;
}

ucs_status_t event::send_am(uint64_t hdr)
{
    uct_test_node_t *nodes_a[1] = {a};

    return UCT_TEST_RETRY(nodes_a, 1, uct_ep_am_short(a->ep, EVENT_AM_ID, hdr,
                                                      NULL, 0));
}


TEST_F(event, flags_and_fd_advertised)
{
    const uint64_t flags = UCT_IFACE_FLAG_EVENT_SEND_COMP |
                           UCT_IFACE_FLAG_EVENT_RECV |
                           UCT_IFACE_FLAG_EVENT_RECV_SIG |
                           UCT_IFACE_FLAG_EVENT_FD;
    int fd_a, fd_b;
    ucs_status_t status;

    UCT_TEST_EXPECT((a->iface_attr.cap.event_flags & flags) == flags,
                    "event flags SEND_COMP|RECV|RECV_SIG|FD advertised (0x%"
                    PRIx64 ")", (uint64_t)a->iface_attr.cap.event_flags);

    status = uct_iface_event_fd_get(a->iface, &fd_a);
    if (status == UCS_OK) {
        status = uct_iface_event_fd_get(b->iface, &fd_b);
    }
    ASSERT_EQ(UCS_OK, status) << "event fd of each interface: "
                              << ucs_status_string(status);

    UCT_TEST_EXPECT((fcntl(fd_b, F_GETFL) & O_NONBLOCK) &&
                    !event_fd_wait(fd_b, 0, NULL),
                    "event fd non-blocking, not readable before any arm");
}


typedef struct {
    uct_pending_req_t req;
    uct_ep_h          ep;
    volatile int      done;
} event_pending_am_t;

static ucs_status_t event_pending_am_send(uct_pending_req_t *self)
{
    event_pending_am_t *p = ucs_container_of(self, event_pending_am_t, req);
    ucs_status_t status   = uct_ep_am_short(p->ep, EVENT_AM_ID, 0x9e9d, NULL,
                                            0);

    p->done = (status == UCS_OK);
    return status;
}

/* A request queued before the connection becomes dispatchable with no
 * completion: arm must send the caller to progress first */
TEST_F(event, arm_busy_while_pending_request_can_go)
{
    event_pending_am_t pending;
    ucs_status_t status;
    bool ok;

    pending.ep       = a->ep;
    pending.req.func = event_pending_am_send;
    pending.done     = 0;
    status           = uct_ep_pending_add(a->ep, &pending.req, 0);
    ASSERT_EQ(UCS_OK, status) << "uct_ep_pending_add before connecting: "
                              << ucs_status_string(status);
    event_connect();

    status = uct_iface_event_arm(a->iface, UCT_EVENT_SEND_COMP);
    UCT_TEST_EXPECT(status == UCS_ERR_BUSY,
                    "arm BUSY while a pending request can go (%s)",
                    ucs_status_string(status));
    m_am_count = 0;
    ok         = progress_until(a, &pending.done, 1) &&
                 progress_until(b, &m_am_count, 1);
    UCT_TEST_EXPECT(ok, "progress sent the pending request (sent %d, arrived "
                    "%d)", pending.done, m_am_count);
    if (!pending.done) {
        /* the request lives on this stack: take it back before it goes */
        uct_ep_pending_purge(a->ep, NULL, NULL);
    }
}

TEST_F(event, recv_quiet_without_messages)
{
    uct_test_node_t *nodes_a[1] = {a};
    uct_test_comp_t comp;
    ucs_status_t status;
    uct_iov_t iov;

    event_connect();
    status = arm_until_ok(b, UCT_EVENT_RECV);
    UCT_TEST_EXPECT(status == UCS_OK, "arm RECV once idle (%s)",
                    ucs_status_string(status));
    UCT_TEST_EXPECT(!event_fd_wait(m_fd_b, EVENT_QUIET_S, NULL),
                    "no event while nothing is sent (%.1f s)", EVENT_QUIET_S);

    /* an RDMA write is no receive at its target */
    uct_test_comp_init(&comp);
    uct_test_iov_init(&iov, a->buf, 64, a->memh);
    status = UCT_TEST_RETRY(nodes_a, 1,
                            uct_ep_put_zcopy(a->ep, &iov, 1, wb.buf,
                                             m_rkey.rkey, &comp.comp));
    status = uct_test_comp_wait(nodes_a, 1, status, &comp);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    !event_fd_wait(m_fd_b, EVENT_QUIET_S / 2, NULL),
                    "a put raises no receive event at its target (%s)",
                    ucs_status_string(status));
}

TEST_F(event, recv_woken_by_message_busy_until_progress)
{
    uct_test_node_t *nodes_a[1] = {a};
    uct_test_comp_t comp;
    ucs_status_t status;
    double elapsed;
    uct_iov_t iov;
    int count;
    bool ok;

    event_connect();
    status = arm_until_ok(b, UCT_EVENT_RECV);
    ASSERT_EQ(UCS_OK, status) << "arm RECV once idle: "
                              << ucs_status_string(status);

    count  = m_am_count;
    status = send_am(0xa1);
    ok     = event_fd_wait(m_fd_b, EVENT_WAKE_TIMEOUT_S, &elapsed);
    UCT_TEST_EXPECT((status == UCS_OK) && ok,
                    "an active message wakes the receiver's fd (%.3f s)",
                    elapsed);
    ok = arm_stays_busy(b, UCT_EVENT_RECV, &status);
    UCT_TEST_EXPECT(ok && (m_am_count == count),
                    "arm BUSY until progress took the message (%d tries, "
                    "last %s)", EVENT_BUSY_TRIES, ucs_status_string(status));
    ok = progress_until(b, &m_am_count, count + 1);
    UCT_TEST_EXPECT(ok && (m_am_count == count + 1) && (m_am_hdr == 0xa1),
                    "progress ran the handler once (%d messages, header 0x%"
                    PRIx64 ")", m_am_count - count, m_am_hdr);
    status = arm_until_ok(b, UCT_EVENT_RECV);
    UCT_TEST_EXPECT(status == UCS_OK, "arm RECV again (%s)",
                    ucs_status_string(status));

    /* A message that arrives while the queue is not armed (the event of
     * the last arm was taken) and before the next arm: no event announces
     * it, the arm must find it (else the receiver sleeps on it). */
    count  = m_am_count;
    status = send_am(0xa2);
    ok     = event_fd_wait(m_fd_b, EVENT_WAKE_TIMEOUT_S, NULL) &&
             (uct_iface_event_arm(b->iface, UCT_EVENT_RECV) ==
              UCS_ERR_BUSY) &&
             progress_until(b, &m_am_count, count + 1);
    UCT_TEST_EXPECT((status == UCS_OK) && ok,
                    "second message: woken, BUSY, delivered");

    count = m_am_count;
    uct_test_comp_init(&comp);
    uct_test_iov_init(&iov, a->buf, 8, a->memh);
    *(uint64_t*)a->buf = 0xa3;
    status = UCT_TEST_RETRY(nodes_a, 1,
                            uct_ep_am_zcopy(a->ep, EVENT_AM_ID, NULL, 0, &iov,
                                            1, 0, &comp.comp));
    /* delivered at the target once the sender's completion is there */
    status = uct_test_comp_wait(nodes_a, 1, status, &comp);
    usleep(200000);
    status = (status == UCS_OK) ?
             uct_iface_event_arm(b->iface, UCT_EVENT_RECV) : status;
    UCT_TEST_EXPECT((status == UCS_ERR_BUSY) && (m_am_count == count),
                    "arm BUSY for a message that came before it (%s)",
                    ucs_status_string(status));
    ok = progress_until(b, &m_am_count, count + 1);
    UCT_TEST_EXPECT(ok && (m_am_hdr == 0xa3),
                    "that message is delivered by progress (header 0x%"
                    PRIx64 ")", m_am_hdr);
}

static size_t event_pack_hdr(void *dest, void *arg)
{
    memcpy(dest, arg, sizeof(uint64_t));
    return sizeof(uint64_t);
}

/* UCT_EVENT_RECV_SIG: only signaled messages wake */
TEST_F(event, recv_sig_woken_only_by_signaled_message)
{
    uct_test_node_t *nodes_a[1] = {a};
    uint64_t hdr = 0xb2;
    ucs_status_t status;
    ssize_t packed;
    double elapsed;
    int count;
    bool ok;

    /* A queue armed for every message stays so until a completion fires
     * it (verbs cannot take an arm back), so one message goes first,
     * whatever it wakes. */
    event_connect();
    count  = m_am_count;
    status = arm_until_ok(b, UCT_EVENT_RECV_SIG);
    if (status == UCS_OK) {
        status = send_am(0xb0);
    }
    event_fd_wait(m_fd_b, EVENT_QUIET_S, NULL);
    ok = progress_until(b, &m_am_count, count + 1);
    UCT_TEST_EXPECT((status == UCS_OK) && ok,
                    "a message clears what earlier arms left (%s)",
                    ucs_status_string(status));

    status = arm_until_ok(b, UCT_EVENT_RECV_SIG);
    UCT_TEST_EXPECT(status == UCS_OK, "arm RECV_SIG once idle (%s)",
                    ucs_status_string(status));
    count  = m_am_count;
    status = send_am(0xb1);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    !event_fd_wait(m_fd_b, EVENT_QUIET_S, NULL),
                    "an unsignaled message does not wake RECV_SIG (%s)",
                    ucs_status_string(status));
    ok     = progress_until(b, &m_am_count, count + 1);
    status = arm_until_ok(b, UCT_EVENT_RECV_SIG);
    UCT_TEST_EXPECT(ok && (status == UCS_OK),
                    "it is delivered by progress, arm again (%s)",
                    ucs_status_string(status));
    packed = UCT_TEST_RETRY(nodes_a, 1,
                            uct_ep_am_bcopy(a->ep, EVENT_AM_ID, event_pack_hdr,
                                            &hdr, UCT_SEND_FLAG_SIGNALED));
    ok     = event_fd_wait(m_fd_b, EVENT_WAKE_TIMEOUT_S, &elapsed);
    UCT_TEST_EXPECT((packed == sizeof(uint64_t)) && ok,
                    "a message sent with UCT_SEND_FLAG_SIGNALED wakes it "
                    "(%.3f s)", elapsed);
    ok = progress_until(b, &m_am_count, count + 2);
    UCT_TEST_EXPECT(ok && (m_am_hdr == 0xb2), "and is delivered by progress "
                    "(header 0x%" PRIx64 ")", m_am_hdr);
}

/* UCT_EVENT_SEND_COMP; then both sides flushed, and the interfaces closed
 * with events got but not yet acked */
TEST_F(event, send_comp_woken_by_put_completion)
{
    uct_test_node_t *nodes_a[1] = {a};
    uct_test_comp_t comp;
    ucs_status_t status;
    double elapsed;
    uct_iov_t iov;
    bool ok;

    event_connect();
    status = arm_until_ok(a, UCT_EVENT_SEND_COMP);
    UCT_TEST_EXPECT(status == UCS_OK, "arm SEND_COMP once idle (%s)",
                    ucs_status_string(status));
    UCT_TEST_EXPECT(!event_fd_wait(m_fd_a, EVENT_QUIET_S, NULL),
                    "no event while nothing is sent (%.1f s)", EVENT_QUIET_S);

    uct_test_fill(a->buf, EVENT_BUF_SIZE, 77);
    memset(b->buf, 0, EVENT_BUF_SIZE);
    uct_test_comp_init(&comp);
    uct_test_iov_init(&iov, a->buf, EVENT_BUF_SIZE, a->memh);
    status = uct_ep_put_zcopy(a->ep, &iov, 1, wb.buf, m_rkey.rkey,
                              &comp.comp);
    ok     = event_fd_wait(m_fd_a, EVENT_WAKE_TIMEOUT_S, &elapsed);
    UCT_TEST_EXPECT((status == UCS_INPROGRESS) && ok,
                    "put_zcopy's completion wakes the sender's fd (%s, "
                    "%.3f s)", ucs_status_string(status), elapsed);
    ok = arm_stays_busy(a, UCT_EVENT_SEND_COMP, &status);
    UCT_TEST_EXPECT(ok && (comp.comp.count == 1),
                    "arm BUSY until progress took the completion (%d tries, "
                    "last %s)", EVENT_BUSY_TRIES, ucs_status_string(status));
    status = uct_test_comp_wait(nodes_a, 1, UCS_INPROGRESS, &comp);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    !memcmp(a->buf, b->buf, EVENT_BUF_SIZE),
                    "progress completes the put, data in place (%s)",
                    ucs_status_string(status));
    status = arm_until_ok(a, UCT_EVENT_SEND_COMP);
    UCT_TEST_EXPECT(status == UCS_OK, "arm SEND_COMP again (%s)",
                    ucs_status_string(status));

    status = uct_test_ep_flush(nodes, 2, a->ep);
    UCT_TEST_EXPECT(status == UCS_OK, "flush (%s)",
                    ucs_status_string(status));

    uct_rkey_release(a->component, &m_rkey);
    m_rkey_unpacked = false;
    node_close(a);
    node_close(b);
}


/*
 * Progress polls the receive queue first and the send queue only when no
 * message came, so that a completion it finds is returned with no other
 * poll behind it (rc_gdr_iface.c). Both queues are filled before a's one
 * progress, each proved by its event: the put's completion, then b's
 * message.
 */
void event::fill_both_queues(uct_test_comp_t *comp, unsigned puts)
{
    uct_test_node_t *nodes_b[1] = {b};
    ucs_status_t status;
    uct_iov_t iov;
    unsigned i;

    event_connect();
    ASSERT_EQ(UCS_OK, arm_until_ok(a, UCT_EVENT_SEND_COMP))
        << "arm SEND_COMP (both queues) once idle";

    uct_test_comp_init(comp);
    comp->comp.count = puts;
    uct_test_iov_init(&iov, a->buf, 64, a->memh);
    for (i = 0; i < puts; ++i) {
        status = uct_ep_put_zcopy(a->ep, &iov, 1, wb.buf, m_rkey.rkey,
                                  &comp->comp);
        ASSERT_EQ(UCS_INPROGRESS, status) << "put " << i;
    }
    ASSERT_TRUE(event_fd_wait(m_fd_a, EVENT_WAKE_TIMEOUT_S, NULL))
        << "a put's completion raises the send queue's event";
    /* takes that event; the receive queue stays armed */
    ASSERT_EQ(UCS_ERR_BUSY, uct_iface_event_arm(a->iface, UCT_EVENT_RECV));

    status = UCT_TEST_RETRY(nodes_b, 1,
                            uct_ep_am_short(b->ep, EVENT_AM_ID, 0xc1, NULL,
                                            0));
    ASSERT_EQ(UCS_OK, status) << "b's message";
    ASSERT_TRUE(event_fd_wait(m_fd_a, EVENT_WAKE_TIMEOUT_S, NULL))
        << "b's message raises the receive queue's event";
    ASSERT_EQ((int)puts, (int)comp->comp.count)
        << "no put completed: a was not progressed";
}

bool event::progress_once_after_fill(uct_test_comp_t *comp, unsigned puts,
                                     int *count_p)
{
    *count_p = m_am_count;
    fill_both_queues(comp, puts);
    if (HasFatalFailure()) {
        return false;
    }
    uct_iface_progress(a->iface);
    return true;
}

TEST_F(event, progress_takes_messages_first_arm_busy_until_sends)
{
    uct_test_node_t *nodes_a[1] = {a};
    uct_test_comp_t comp;
    ucs_status_t status;
    int count;

    if (!progress_once_after_fill(&comp, 1, &count)) {
        return;
    }
    UCT_TEST_EXPECT((m_am_count == count + 1) && (comp.comp.count == 1),
                    "one progress: the message delivered (%d), the put's "
                    "completion left for the next (count %d)",
                    m_am_count - count, (int)comp.comp.count);

    /* the first arm takes the message's event; then the send queue left
     * behind must keep the caller progressing, even armed for RECV only */
    status = uct_iface_event_arm(a->iface, UCT_EVENT_RECV);
    status = (status == UCS_ERR_BUSY) ?
             uct_iface_event_arm(a->iface, UCT_EVENT_RECV) : status;
    UCT_TEST_EXPECT(status == UCS_ERR_BUSY,
                    "arm BUSY while the send queue waits for progress (%s)",
                    ucs_status_string(status));

    uct_iface_progress(a->iface);
    UCT_TEST_EXPECT((comp.comp.count == 0) && (comp.status == UCS_OK),
                    "the next progress completes the put (count %d, %s)",
                    (int)comp.comp.count, ucs_status_string(comp.status));
    status = arm_until_ok(a, UCT_EVENT_RECV);
    UCT_TEST_EXPECT(status == UCS_OK, "arm RECV once idle (%s)",
                    ucs_status_string(status));
    status = uct_test_ep_flush(nodes_a, 1, a->ep);
    UCT_TEST_EXPECT(status == UCS_OK, "flush (%s)",
                    ucs_status_string(status));
}

/* With a send queue short of room (TX_CQ_LEN=4, 3 puts outstanding: less
 * than half left) progress polls it behind messages too */
class event_short_cq : public event {
protected:
    void SetUp() override
    {
        env_set("UCX_RC_GDR_TX_CQ_LEN", "4");
        event::SetUp();
    }
};

TEST_F(event_short_cq, progress_polls_send_queue_behind_messages)
{
    uct_test_node_t *nodes_a[1] = {a};
    uct_test_comp_t comp;
    ucs_status_t status;
    int count;

    if (!progress_once_after_fill(&comp, 3, &count)) {
        return;
    }
    UCT_TEST_EXPECT((m_am_count == count + 1) && (comp.comp.count < 3),
                    "one progress: the message delivered (%d) and the put "
                    "completion that raised the event (%d of 3 left)",
                    m_am_count - count, (int)comp.comp.count);
    status = uct_test_comp_wait(nodes_a, 1, UCS_INPROGRESS, &comp);
    UCT_TEST_EXPECT(status == UCS_OK, "the puts complete (%s)",
                    ucs_status_string(status));
}


/* ------------------------------------------------------------- UCP -- */

/* The captured log lines that match the extended regex */
static std::vector<std::string> event_log_grep(const char *pattern)
{
    std::vector<std::string> found;
    regex_t re;

    if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0) {
        return found;
    }
    for (const std::string &line : captured_log) {
        if (regexec(&re, line.c_str(), 0, NULL, 0) == 0) {
            found.push_back(line);
        }
    }
    regfree(&re);
    return found;
}


class event_ucp : public uct_rc_gdr_test {
protected:
    void SetUp() override;
    void TearDown() override;

public:
    uct_rc_gdr_ucp_pair m_ucp;
};


typedef struct {
    event_ucp    *test;
    double       delay_s;
    uint64_t     value;
    ucs_status_t status;
} event_ucp_sender_t;


static void event_ucp_send_cb(void *request, ucs_status_t status,
                              void *user_data)
{
}

static void event_ucp_recv_cb(void *request, ucs_status_t status,
                              const ucp_tag_recv_info_t *info,
                              void *user_data)
{
}

static void event_ucp_watchdog(int sig)
{
    static const char msg[] = "FAIL ucp_worker_wait did not return within "
                              "the watchdog's time\n";

    if (write(STDOUT_FILENO, msg, sizeof(msg) - 1) < 0) {
        /* nothing more to do */
    }
    _exit(1);
}


void event_ucp::SetUp()
{
    uct_rc_gdr_test::SetUp();
    if (IsSkipped()) {
        return;
    }

    /* the data on rc_gdr, wire-up through ud_verbs */
    env_set("UCX_TLS", "rc_gdr,ud_verbs:aux,self");
}

void event_ucp::TearDown()
{
    m_ucp.close();
    uct_rc_gdr_test::TearDown();
}

static void *event_ucp_sender_thread(void *arg)
{
    event_ucp_sender_t *s = (event_ucp_sender_t*)arg;
    ucp_request_param_t param;

    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
    param.cb.send      = event_ucp_send_cb;
    usleep((useconds_t)(s->delay_s * 1e6));
    s->status = s->test->m_ucp.wait(ucp_tag_send_nbx(s->test->m_ucp.eps[0],
                                                     &s->value,
                                                     sizeof(s->value), 1,
                                                     &param),
                                    0);
    return NULL;
}

/*
 * ucp_worker_get_efd / arm / wait: a worker blocked in ucp_worker_wait (no
 * timeout) wakes for a tag message another thread sends after a delay;
 * the rc_gdr interfaces carried work requests (the module's INFO line when
 * they close, captured).
 */
TEST_F(event_ucp, worker_wait_wakes_for_tag_message)
{
    static const char *closed_re =
            "^rc_gdr: [^ ]+ closed: [1-9][0-9]* work requests";
    ucp_worker_h *workers = m_ucp.workers;
    ucp_request_param_t sparam, rparam;
    event_ucp_sender_t sender;
    std::vector<std::string> closed;
    ucs_status_t status, wstatus;
    uint64_t value, got = 0;
    double start, elapsed;
    const char *what = "";
    pthread_t thread;
    int efd, i, waits;
    void *req;

    sparam.op_attr_mask  = UCP_OP_ATTR_FIELD_CALLBACK;
    sparam.cb.send       = event_ucp_send_cb;
    rparam.op_attr_mask  = UCP_OP_ATTR_FIELD_CALLBACK;
    rparam.cb.recv       = event_ucp_recv_cb;
    memset(&sender, 0, sizeof(sender));
    sender.test          = this;
    sender.delay_s       = 0.5;
    sender.value         = 0x5e4d;

    {
        log_capture log(UCS_LOG_LEVEL_INFO);

        /* WAKEUP needs lanes with events: without them UCP finds no
         * transport for its active messages. Serialized, not single:
         * worker 0 is set up here and then used by the sender thread, and
         * newer UCX asserts a single worker's owner. */
        status = m_ucp.open(UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP, &what,
                            UCS_THREAD_MODE_SERIALIZED);
        ASSERT_EQ(UCS_OK, status) << what << " with UCP_FEATURE_WAKEUP: "
                                  << ucs_status_string(status);

        /* wire-up, both ways, both workers progressing */
        for (i = 0; i < 2; ++i) {
            value  = i;
            req    = ucp_tag_recv_nbx(workers[1 - i], &got, sizeof(got), 0,
                                      0, &rparam);
            status = m_ucp.wait(ucp_tag_send_nbx(m_ucp.eps[i], &value,
                                                 sizeof(value), 0, &sparam));
            if (status == UCS_OK) {
                status = m_ucp.wait(req);
            }
            ASSERT_EQ(UCS_OK, status) << "ucp wire-up message: "
                                      << ucs_status_string(status);
        }

        status = ucp_worker_get_efd(workers[1], &efd);
        ASSERT_EQ(UCS_OK, status) << "ucp_worker_get_efd: "
                                  << ucs_status_string(status);

        /* the receiver: the idiom of ucp_worker_arm's documentation */
        got = 0;
        req = ucp_tag_recv_nbx(workers[1], &got, sizeof(got), 1,
                               (ucp_tag_t)-1, &rparam);
        ASSERT_FALSE(UCS_PTR_IS_ERR(req)) << "ucp_tag_recv_nbx: "
                << ucs_status_string(UCS_PTR_STATUS(req));
        start = uct_test_now();
        do {
            while (ucp_worker_progress(workers[1]) != 0) {
            }
            status = ucp_worker_arm(workers[1]);
        } while ((status == UCS_ERR_BUSY) &&
                 (uct_test_now() < start + uct_test_timeout_s));
        UCT_TEST_EXPECT(status == UCS_OK, "ucp_worker_arm once idle (%s)",
                        ucs_status_string(status));
        UCT_TEST_EXPECT(!event_fd_wait(efd, EVENT_QUIET_S, NULL),
                        "worker fd quiet while nothing is sent (%.1f s)",
                        EVENT_QUIET_S);

        /* the sender posts after a delay, from its own thread and worker */
        ASSERT_EQ(0, pthread_create(&thread, NULL, event_ucp_sender_thread,
                                    &sender));

        signal(SIGALRM, event_ucp_watchdog);
        alarm((unsigned)(2 * EVENT_WAKE_TIMEOUT_S));
        start   = uct_test_now();
        waits   = 0;
        wstatus = UCS_OK;
        while ((ucp_request_check_status(req) == UCS_INPROGRESS) &&
               (uct_test_now() < start + EVENT_WAKE_TIMEOUT_S) &&
               (wstatus == UCS_OK)) {
            while (ucp_worker_progress(workers[1]) != 0) {
            }
            if (ucp_request_check_status(req) != UCS_INPROGRESS) {
                break;
            }
            wstatus = ucp_worker_wait(workers[1]); /* blocks: no timeout */
            ++waits;
        }
        elapsed = uct_test_now() - start;
        alarm(0);
        signal(SIGALRM, SIG_DFL);
        pthread_join(thread, NULL);

        status = ucp_request_check_status(req);
        UCT_TEST_EXPECT((wstatus == UCS_OK) && (status == UCS_OK) &&
                        (sender.status == UCS_OK) && (got == sender.value),
                        "ucp_worker_wait wakes for a message (%.2f s, %d "
                        "waits, wait %s, recv %s, send %s)", elapsed, waits,
                        ucs_status_string(wstatus), ucs_status_string(status),
                        ucs_status_string(sender.status));
        if (status != UCS_INPROGRESS) {
            ucp_request_free(req);
        }

        /* closed here, while the log is captured */
        m_ucp.close();
        closed = event_log_grep(closed_re);
    }

    UCT_TEST_EXPECT(!closed.empty(), "an rc_gdr interface closed with work "
                    "requests posted (INFO line '%s')", closed_re);
}
