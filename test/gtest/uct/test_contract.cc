/*
 * The parts of the UCT contract that UCX's own transport suites
 * (test/gtest/uct of UCX) check and rc_gdr once broke, each reduced to the
 * smallest sequence that shows it, one test per regression:
 *
 *   cancel       flush(CANCEL) after writes that report nothing (completion
 *                moderation) completes, within the operation timeout
 *   pending      a pending callback may move its request to another
 *                endpoint's queue, or put it back on its own
 *   order        while a request waits in the pending queue a new operation
 *                is refused, so it cannot overtake the queued one
 *   zero-length  put/get of zero bytes succeed with any remote key,
 *                UCT_INVALID_RKEY included
 *   destroy      destroying an endpoint completes its outstanding operations
 *                before destroy returns
 *   limits       short operations one byte over max_short are refused, with
 *                an error that names the length; max_short itself passes
 *   alignment    invalid active-message alignment parameters are refused
 *   md           the memory domain reports a usable max_alloc
 *   tx-bufs      with few send buffers (TX_MAX_BUFS), a sender that ran out
 *                sends again after progress (completion moderation must
 *                report within the pool)
 *   keep         an active-message handler may keep the data
 *                (UCT_CB_PARAM_FLAG_DESC) and write into the rx_headroom
 *                before it (UCP does): with RX_MAX_BUFS kept the sender
 *                is held back (NO_RESOURCE), and after
 *                uct_iface_release_desc() it sends again, nothing lost
 *   invalidate   after uct_ep_invalidate an operation is still accepted
 *                (UCS_OK); the error reaches the user through flush and the
 *                error handler, once
 *
 * See file LICENSE for terms.
 */

#include "uct_rc_gdr_test.h"
#include "../test_log.h"

#include <ucs/debug/log_def.h>
#include <ucs/sys/math.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>


/* The contract's nodes: a and b with a buffer each, an active-message
 * handler on b that records the headers it receives, b's key for a */
class contract : public uct_rc_gdr_test {
protected:
    static constexpr uint8_t AM_ID    = 3;
    static constexpr size_t  BUF_SIZE = 65536;
    static constexpr int     MAX_SEEN = 16;

    void SetUp() override;
    void TearDown() override;

    /* Opens a and b (connected, if connect), b's handler and key */
    void contract_pair_open(bool connect);

    static ucs_status_t am_handler(void *arg, void *data, size_t length,
                                   unsigned flags);

    uint64_t          m_seen[MAX_SEEN] = {}; /* headers received, in order */
    volatile int      m_num_seen       = 0;
    uct_rkey_bundle_t m_rkey;                /* b's buffer, for a */
    bool              m_have_rkey      = false;
};


void contract::SetUp()
{
    uct_rc_gdr_test::SetUp();
    /* UCX's suites bound an operation by 30 s */
    uct_test_timeout_s = 30.0;
}

void contract::TearDown()
{
    if (m_have_rkey) {
        uct_rkey_release(a->component, &m_rkey);
        m_have_rkey = false;
    }
    uct_test_rx_headroom = 0;
    uct_rc_gdr_test::TearDown();
}

ucs_status_t contract::am_handler(void *arg, void *data, size_t length,
                                  unsigned flags)
{
    contract *self = static_cast<contract*>(arg);

    if ((self->m_num_seen < MAX_SEEN) && (length >= sizeof(uint64_t))) {
        memcpy(&self->m_seen[self->m_num_seen], data, sizeof(uint64_t));
    }
    ++self->m_num_seen;
    return UCS_OK;
}

void contract::contract_pair_open(bool connect)
{
    ucs_status_t status;

    a        = node_open(dev_a(), BUF_SIZE);
    b        = node_open(dev_b(), BUF_SIZE);
    nodes[0] = a;
    nodes[1] = b;
    uct_iface_set_am_handler(b->iface, AM_ID, am_handler, this, 0);
    if (connect) {
        uct_test_node_connect_pair(a, b, &wa, &wb);
    }

    status = uct_rkey_unpack(a->component, b->rkey_buf, &m_rkey);
    if (status != UCS_OK) {
        uct_test_die("uct_rkey_unpack", status);
    }
    m_have_rkey = true;
    m_num_seen  = 0;
}

static size_t pack_none(void *dest, void *arg)
{
    return 0;
}

static void unpack_none(void *arg, const void *data, size_t length)
{
}

static void progress_until(uct_test_node_t **nodes, int count,
                           volatile int *flag, int value)
{
    double deadline = uct_test_now() + uct_test_timeout_s;

    while ((*flag < value) && (uct_test_now() < deadline)) {
        uct_test_progress(nodes, count);
    }
}


/* -------------------------------------------------------------- cancel -- */

TEST_F(contract, cancel_after_unsignaled_writes_completes)
{
    uint64_t value      = 0x1234;
    ucs_status_t status = UCS_OK;
    uct_test_comp_t comp;
    int i;

    contract_pair_open(true);

    /* Fewer than the moderation interval: none of them reports. */
    for (i = 0; i < 8; ++i) {
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_put_short(a->ep, &value, sizeof(value),
                                                 (uintptr_t)b->buf,
                                                 m_rkey.rkey));
        if (status != UCS_OK) {
            break;
        }
    }
    UCT_TEST_EXPECT(status == UCS_OK, "cancel: 8 writes posted (%s)",
                    ucs_status_string(status));

    /* Let the NIC finish them, unsignaled, before the cancel. */
    for (i = 0; i < 1000; ++i) {
        uct_test_progress(nodes, 2);
    }

    uct_test_comp_init(&comp);
    status = UCT_TEST_RETRY(nodes, 2, uct_ep_flush(a->ep, UCT_FLUSH_FLAG_CANCEL,
                                                   &comp.comp));
    status = uct_test_comp_wait(nodes, 2, status, &comp);
    UCT_TEST_EXPECT(status != UCS_ERR_TIMED_OUT,
                    "cancel: flush(CANCEL) after unsignaled writes completes "
                    "(%s)", ucs_status_string(status));
}


/* ------------------------------------------------------------- pending -- */

struct contract_req {
    uct_pending_req_t req;
    contract          *test;
    uct_ep_h          ep;         /* where it sends */
    uct_ep_h          other;      /* where it moves itself when that is full */
    uint64_t          hdr;
    int               calls;
    int               sent;
    int               inprogress; /* answers INPROGRESS this many times */
};

static contract_req *contract_req_init(contract_req *r, uint64_t hdr,
                                       int inprogress)
{
    memset(r, 0, sizeof(*r));
    r->hdr        = hdr;
    r->inprogress = inprogress;
    return r;
}

static ucs_status_t req_send(uct_pending_req_t *self)
{
    contract_req *r = ucs_container_of(self, contract_req, req);
    ucs_status_t status;

    ++r->calls;
    if (r->inprogress > 0) {
        --r->inprogress;
        return UCS_INPROGRESS;
    }

    status  = uct_ep_am_short(r->ep, 3, r->hdr, NULL, 0);
    r->sent = (status == UCS_OK);
    return status;
}

/* Sends on another endpoint; when that one has no resources, queues itself
 * there and reports done here (UCP's rendezvous over two lanes does so). */
static ucs_status_t req_move(uct_pending_req_t *self)
{
    contract_req *r = ucs_container_of(self, contract_req, req);
    ucs_status_t status;

    ++r->calls;
    status = uct_ep_am_short(r->other, 3, r->hdr, NULL, 0);
    if (status == UCS_ERR_NO_RESOURCE) {
        r->req.func = req_send;
        r->ep       = r->other;
        status      = uct_ep_pending_add(r->other, &r->req, 0);
        return (status == UCS_OK) ? UCS_OK : UCS_ERR_NO_RESOURCE;
    }
    r->sent = (status == UCS_OK);
    return status;
}

/* Queues itself again on the first call, sends on the second. */
static ucs_status_t req_requeue(uct_pending_req_t *self)
{
    contract_req *r = ucs_container_of(self, contract_req, req);

    if (r->calls == 0) {
        ++r->calls;
        return (uct_ep_pending_add(r->ep, &r->req, 0) == UCS_OK) ? UCS_OK :
               UCS_ERR_NO_RESOURCE;
    }
    return req_send(self);
}

static void purge_count(uct_pending_req_t *self, void *arg)
{
    ++*(int*)arg;
}

TEST_F(contract, pending_request_moves_or_requeues_itself)
{
    contract_req move, again;
    int purged_here = 0, purged_there = 0;
    uct_ep_params_t ep_params;
    uct_ep_h spare; /* never connected: never has resources */
    ucs_status_t status;
    double deadline;

    contract_req_init(&move, 1, 0);
    contract_req_init(&again, 2, 0);
    contract_pair_open(false);
    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    ep_params.iface      = a->iface;
    status               = uct_ep_create(&ep_params, &spare);
    ASSERT_EQ(UCS_OK, status) << "uct_ep_create: " << ucs_status_string(status);

    move.req.func  = req_move;
    move.other     = spare;
    again.req.func = req_requeue;
    again.ep       = a->ep;
    UCT_TEST_EXPECT((uct_ep_pending_add(a->ep, &move.req, 0) == UCS_OK) &&
                    (uct_ep_pending_add(a->ep, &again.req, 0) == UCS_OK),
                    "pending: two requests queued before the connection");

    uct_test_node_connect_pair(a, b, &wa, &wb);
    deadline = uct_test_now() + uct_test_timeout_s;
    while (!again.sent && (uct_test_now() < deadline)) {
        uct_test_progress(nodes, 2);
    }
    progress_until(nodes, 2, &m_num_seen, 1);

    UCT_TEST_EXPECT((move.calls == 1) && !move.sent,
                    "pending: the first moved itself to another endpoint "
                    "(calls %d)", move.calls);
    UCT_TEST_EXPECT(again.sent && (m_num_seen == 1) && (m_seen[0] == 2),
                    "pending: the second queued itself again, then sent "
                    "(sent %d, received %d)", again.sent, m_num_seen);

    uct_ep_pending_purge(a->ep, purge_count, &purged_here);
    uct_ep_pending_purge(spare, purge_count, &purged_there);
    UCT_TEST_EXPECT((purged_here == 0) && (purged_there == 1),
                    "pending: the queues hold what they should (%d here, "
                    "%d on the other endpoint)", purged_here, purged_there);

    uct_ep_destroy(spare);
}


/* --------------------------------------------------------------- order -- */

TEST_F(contract, order_queued_request_not_overtaken)
{
    contract_req queued, behind;
    ucs_status_t status;

    contract_req_init(&queued, 1, 2);
    contract_req_init(&behind, 3, 0);
    contract_pair_open(false);
    queued.req.func = req_send;
    queued.ep       = a->ep;
    behind.req.func = req_send;
    behind.ep       = a->ep;
    UCT_TEST_EXPECT(uct_ep_pending_add(a->ep, &queued.req, 0) == UCS_OK,
                    "order: a request queued before the connection");

    uct_test_node_connect_pair(a, b, &wa, &wb);
    progress_until(nodes, 1, &queued.calls, 1); /* its turn, not yet done */

    status = uct_ep_am_short(a->ep, AM_ID, 2, NULL, 0);
    UCT_TEST_EXPECT(status == UCS_ERR_NO_RESOURCE,
                    "order: a new send while it waits is refused (%s)",
                    ucs_status_string(status));

    /* ... and queueing behind it is accepted: BUSY ("send it now") would
     * make a caller that retries on BUSY spin (UCP does). */
    status = uct_ep_pending_add(a->ep, &behind.req, 0);
    UCT_TEST_EXPECT(status == UCS_OK, "order: a request behind it is queued, "
                    "not BUSY (%s)", ucs_status_string(status));

    status = UCT_TEST_RETRY(nodes, 2, uct_ep_am_short(a->ep, AM_ID, 2, NULL,
                                                      0));
    progress_until(nodes, 2, &m_num_seen, 3);
    UCT_TEST_EXPECT((status == UCS_OK) && queued.sent && behind.sent &&
                    (m_num_seen == 3) && (m_seen[0] == 1) &&
                    (m_seen[1] == 3) && (m_seen[2] == 2),
                    "order: the queued messages arrive first, in their order "
                    "(received %d: %" PRIu64 ", %" PRIu64 ", %" PRIu64 ")",
                    m_num_seen, m_seen[0], m_seen[1], m_seen[2]);
}


/* --------------------------------------------------------- zero-length -- */

TEST_F(contract, zero_length_with_any_rkey)
{
    uint64_t value = 0xfeedf00dcafe;
    uct_test_comp_t comp;
    ucs_status_t status;
    ssize_t packed;
    uct_iov_t iov;

    contract_pair_open(true);

    status = UCT_TEST_RETRY(nodes, 2, uct_ep_put_short(a->ep, NULL, 0, 0,
                                                       UCT_INVALID_RKEY));
    UCT_TEST_EXPECT(status == UCS_OK, "zero-length: put_short (%s)",
                    ucs_status_string(status));

    packed = UCT_TEST_RETRY(nodes, 2, uct_ep_put_bcopy(a->ep, pack_none, NULL,
                                                       0, UCT_INVALID_RKEY));
    UCT_TEST_EXPECT(packed == 0, "zero-length: put_bcopy (%zd)", packed);

    uct_test_iov_init(&iov, a->buf, 0, a->memh);
    uct_test_comp_init(&comp);
    status = UCT_TEST_RETRY(nodes, 2, uct_ep_put_zcopy(a->ep, &iov, 1, 0,
                                                       UCT_INVALID_RKEY,
                                                       &comp.comp));
    status = uct_test_comp_wait(nodes, 2, status, &comp);
    UCT_TEST_EXPECT(status == UCS_OK, "zero-length: put_zcopy (%s)",
                    ucs_status_string(status));

    uct_test_comp_init(&comp);
    status = UCT_TEST_RETRY(nodes, 2, uct_ep_get_zcopy(a->ep, &iov, 1, 0,
                                                       UCT_INVALID_RKEY,
                                                       &comp.comp));
    status = uct_test_comp_wait(nodes, 2, status, &comp);
    UCT_TEST_EXPECT(status == UCS_OK, "zero-length: get_zcopy (%s)",
                    ucs_status_string(status));

    uct_test_comp_init(&comp);
    status = UCT_TEST_RETRY(nodes, 2, uct_ep_get_bcopy(a->ep, unpack_none,
                                                       NULL, 0, 0,
                                                       UCT_INVALID_RKEY,
                                                       &comp.comp));
    status = uct_test_comp_wait(nodes, 2, status, &comp);
    UCT_TEST_EXPECT(status == UCS_OK, "zero-length: get_bcopy (%s)",
                    ucs_status_string(status));

    /* The endpoint is healthy afterwards: real data still arrives. */
    status = UCT_TEST_RETRY(nodes, 2, uct_ep_put_short(a->ep, &value,
                                                       sizeof(value),
                                                       (uintptr_t)b->buf,
                                                       m_rkey.rkey));
    if (status == UCS_OK) {
        status = uct_test_ep_flush(nodes, 2, a->ep);
    }
    UCT_TEST_EXPECT((status == UCS_OK) && !a->ep_error &&
                    !memcmp(b->buf, &value, sizeof(value)),
                    "zero-length: the endpoint still writes data (%s)",
                    ucs_status_string(status));
}


/* ------------------------------------------------------------- destroy -- */

TEST_F(contract, destroy_completes_outstanding_operations)
{
    uct_test_comp_t comp;
    ucs_status_t status;
    uct_iov_t iov;
    int i, posted = 0;

    contract_pair_open(true);
    uct_test_comp_init(&comp);
    comp.comp.count = 0;
    uct_test_iov_init(&iov, a->buf, 4096, a->memh);
    for (i = 0; i < 8; ++i) {
        status = uct_ep_put_zcopy(a->ep, &iov, 1, (uintptr_t)b->buf,
                                  m_rkey.rkey, &comp.comp);
        if (status == UCS_INPROGRESS) {
            ++comp.comp.count;
            ++posted;
        }
    }

    /* No progress on the initiator: nothing has reported yet. */
    uct_ep_destroy(a->ep);
    a->ep = NULL;
    UCT_TEST_EXPECT((posted > 0) && (comp.comp.count == 0),
                    "destroy: %d outstanding writes completed by destroy "
                    "(%d left)", posted, comp.comp.count);
    uct_test_progress(nodes, 2);
}


/* ---------------------------------------------------------------- keep -- */

/* b's handler keeps the descriptors while m_keep is set, and writes into
 * the headroom before them */
class contract_keep : public contract {
protected:
    static constexpr int    KEEP_MAX_BUFS = 64;
    static constexpr size_t KEEP_HEADROOM = 24;

    static ucs_status_t keep_handler(void *arg, void *data, size_t length,
                                     unsigned flags);

    ucs_status_t keep_send(uint64_t *seq, double timeout);

    void     *m_kept[KEEP_MAX_BUFS * 2];
    int      m_num_kept   = 0;
    int      m_keep       = 0; /* handler keeps descriptors while set */
    int      m_no_desc    = 0; /* messages offered without a descriptor */
    uint64_t m_next_seq   = 0; /* the sequence number expected next */
    int      m_seq_errors = 0;
};

ucs_status_t contract_keep::keep_handler(void *arg, void *data, size_t length,
                                         unsigned flags)
{
    contract_keep *self = static_cast<contract_keep*>(arg);
    uint64_t seq;

    memcpy(&seq, data, sizeof(seq));
    self->m_seq_errors += (seq != self->m_next_seq++);
    if (!(flags & UCT_CB_PARAM_FLAG_DESC)) {
        ++self->m_no_desc;
        return UCS_OK;
    }
    if (!self->m_keep ||
        (self->m_num_kept == (int)ucs_static_array_size(self->m_kept))) {
        return UCS_OK;
    }
    /* the headroom is the user's, as UCP's receive descriptor */
    memset(UCS_PTR_BYTE_OFFSET(data, -(ptrdiff_t)KEEP_HEADROOM), 0xa5,
           KEEP_HEADROOM);
    self->m_kept[self->m_num_kept++] = data;
    return UCS_INPROGRESS;
}

ucs_status_t contract_keep::keep_send(uint64_t *seq, double timeout)
{
    double deadline = uct_test_now() + timeout;
    ucs_status_t status;

    do {
        status = uct_ep_am_short(a->ep, AM_ID, *seq, NULL, 0);
        uct_test_progress(nodes, 2);
    } while ((status == UCS_ERR_NO_RESOURCE) && (uct_test_now() < deadline));
    *seq += (status == UCS_OK);
    return status;
}

TEST_F(contract_keep, kept_descriptors_hold_sender_until_released)
{
    char max_bufs[16];
    ucs_status_t status;
    uint64_t seq = 0;
    int i, kept;

    snprintf(max_bufs, sizeof(max_bufs), "%d", KEEP_MAX_BUFS);
    env_set("UCX_RC_GDR_RX_MAX_BUFS", max_bufs);
    env_set("UCX_RC_GDR_RX_BUFS_GROW", "16");
    env_set("UCX_RC_GDR_RX_QUEUE_LEN", "16");
    uct_test_rx_headroom = KEEP_HEADROOM;
    contract_pair_open(true);
    uct_test_rx_headroom = 0;
    uct_iface_set_am_handler(b->iface, AM_ID, keep_handler, this, 0);
    m_keep = 1;

    /* Sends until the receiver, with every buffer kept, holds it back. */
    do {
        status = keep_send(&seq, 3.0);
    } while ((status == UCS_OK) && (seq < 100000));
    kept = m_num_kept;
    UCT_TEST_EXPECT((status == UCS_ERR_NO_RESOURCE) && (m_no_desc == 0) &&
                    (kept > 0) && (kept <= KEEP_MAX_BUFS),
                    "keep: the receiver kept %d of at most %d buffers, %d "
                    "offered without a descriptor; the sender was held back "
                    "after %" PRIu64 " (%s)", kept, KEEP_MAX_BUFS, m_no_desc,
                    seq, ucs_status_string(status));

    /* The kept data is intact until released. */
    for (i = 0; i < kept; ++i) {
        uint64_t value;

        memcpy(&value, m_kept[i], sizeof(value));
        m_seq_errors += (value != (uint64_t)i);
        uct_iface_release_desc(UCS_PTR_BYTE_OFFSET(m_kept[i],
                                                   -(ptrdiff_t)KEEP_HEADROOM));
    }
    m_num_kept = 0;
    m_keep     = 0;

    /* Released: the sender goes on, and every message arrives in order. */
    for (i = 0; (i < 256) && (status != UCS_ERR_TIMED_OUT); ++i) {
        status = keep_send(&seq, 10.0);
        status = (status == UCS_ERR_NO_RESOURCE) ? UCS_ERR_TIMED_OUT : status;
    }
    if (status == UCS_OK) {
        status = uct_test_ep_flush(nodes, 2, a->ep);
    }
    for (i = 0; (m_next_seq < seq) && (i < 100000); ++i) {
        uct_test_progress(nodes, 2);
    }
    UCT_TEST_EXPECT((status == UCS_OK) && (m_next_seq == seq) &&
                    (m_seq_errors == 0),
                    "keep: after release %" PRIu64 " of %" PRIu64 " messages "
                    "arrived, %d out of order or changed (%s)", m_next_seq,
                    seq, m_seq_errors, ucs_status_string(status));
}


/* ---------------------------------------------------------- invalidate -- */

TEST_F(contract, invalidate_error_reported_through_flush)
{
    ucs_status_t status;

    contract_pair_open(true);
    status = uct_test_ep_invalidate(a->ep);
    UCT_TEST_EXPECT(status == UCS_OK, "invalidate: uct_ep_invalidate (%s)",
                    ucs_status_string(status));

    /* UCX's test_uct_peer_failure.peer_failure: accepted, fails later. */
    status = uct_ep_put_short(a->ep, NULL, 0, 0, 0);
    UCT_TEST_EXPECT(status == UCS_OK, "invalidate: put_short accepted before "
                    "the error is reported (%s)", ucs_status_string(status));

    status = uct_test_ep_flush(nodes, 2, a->ep);
    UCT_TEST_EXPECT((status != UCS_ERR_TIMED_OUT) && a->ep_error &&
                    (a->ep_error_status != UCS_OK),
                    "invalidate: flush ends (%s) and the error handler ran "
                    "(%d, %s)", ucs_status_string(status), a->ep_error,
                    ucs_status_string(a->ep_error_status));

    /* Reported: now operations are refused with the endpoint's error. */
    status = uct_ep_put_short(a->ep, NULL, 0, 0, 0);
    UCT_TEST_EXPECT(UCS_STATUS_IS_ERR(status) &&
                    (status != UCS_ERR_NO_RESOURCE),
                    "invalidate: put_short refused once reported (%s)",
                    ucs_status_string(status));
}


/* -------------------------------------------------------------- limits -- */

TEST_F(contract, limits_over_max_short_refused_naming_length)
{
    size_t am_max, put_max;
    ucs_status_t status;

    contract_pair_open(true);
    am_max  = a->iface_attr.cap.am.max_short;  /* header included */
    put_max = a->iface_attr.cap.put.max_short;
    std::vector<uint8_t> data(ucs_max(am_max, put_max) + 1, 0);

    status = UCT_TEST_RETRY(nodes, 2, uct_ep_am_short(a->ep, AM_ID, 0,
                                                      data.data(),
                                                      am_max -
                                                      sizeof(uint64_t)));
    UCT_TEST_EXPECT(status == UCS_OK, "limits: am_short of max_short %zu "
                    "bytes (%s)", am_max, ucs_status_string(status));

    {
        log_capture log(UCS_LOG_LEVEL_ERROR); /* the expected error */

        status = uct_ep_am_short(a->ep, AM_ID, 0, data.data(),
                                 am_max + 1 - sizeof(uint64_t));
        UCT_TEST_EXPECT((status == UCS_ERR_INVALID_PARAM) &&
                        (captured_log_count("length") == 1),
                        "limits: am_short of max_short + 1 refused, naming "
                        "the length (%s, %zu errors)",
                        ucs_status_string(status), captured_log.size());
    }

    {
        log_capture log(UCS_LOG_LEVEL_ERROR);

        status = uct_ep_put_short(a->ep, data.data(), put_max + 1,
                                  (uintptr_t)b->buf, m_rkey.rkey);
        UCT_TEST_EXPECT((status == UCS_ERR_INVALID_PARAM) &&
                        (captured_log_count("length") == 1),
                        "limits: put_short of max_short + 1 refused, naming "
                        "the length (%s, %zu errors)",
                        ucs_status_string(status), captured_log.size());
    }

    uct_test_ep_flush(nodes, 2, a->ep);
}


/* ----------------------------------------------------------- alignment -- */

static ucs_status_t iface_try_open(uct_test_node_t *node, const char *dev,
                                   uint64_t fields, size_t align,
                                   size_t offset)
{
    uct_iface_config_t *config;
    uct_iface_params_t params;
    ucs_status_t status;
    uct_iface_h iface;

    status = uct_md_iface_config_read(node->md, UCT_TEST_TL_NAME, NULL, NULL,
                                      &config);
    if (status != UCS_OK) {
        uct_test_die("uct_md_iface_config_read", status);
    }

    memset(&params, 0, sizeof(params));
    params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                  UCT_IFACE_PARAM_FIELD_DEVICE | fields;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = UCT_TEST_TL_NAME;
    params.mode.device.dev_name = dev;
    params.am_alignment         = align;
    params.am_align_offset      = offset;

    {
        log_capture log(UCS_LOG_LEVEL_ERROR); /* the expected errors */

        status = uct_iface_open(node->md, node->worker, &params, config,
                                &iface);
    }
    uct_config_release(config);
    if (status == UCS_OK) {
        uct_iface_close(iface);
    }
    return status;
}

TEST_F(contract, alignment_invalid_parameters_refused)
{
    static const struct {
        uint64_t     fields;
        size_t       align, offset;
        ucs_status_t expect;
    } cases[] = {
        {UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT, 0, 0, UCS_ERR_INVALID_PARAM},
        {UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT, 3, 0, UCS_ERR_INVALID_PARAM},
        {UCT_IFACE_PARAM_FIELD_AM_ALIGN_OFFSET, 0, 11, UCS_ERR_INVALID_PARAM},
        {UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT |
         UCT_IFACE_PARAM_FIELD_AM_ALIGN_OFFSET, 8, 8, UCS_ERR_INVALID_PARAM},
        {UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT |
         UCT_IFACE_PARAM_FIELD_AM_ALIGN_OFFSET, 64, 3, UCS_OK},
        {UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT, 4096, 0, UCS_OK}
    };
    uct_test_node_t *node = node_open(dev_a(), 0);
    ucs_status_t status;
    size_t i;

    for (i = 0; i < ucs_static_array_size(cases); ++i) {
        status = iface_try_open(node, dev_a(), cases[i].fields,
                                cases[i].align, cases[i].offset);
        UCT_TEST_EXPECT(status == cases[i].expect,
                        "alignment: %zu, offset %zu%s -> %s (expected %s)",
                        cases[i].align, cases[i].offset,
                        (cases[i].fields &
                         UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT) ? "" :
                        " (no alignment)", ucs_status_string(status),
                        ucs_status_string(cases[i].expect));
    }
}


/* ------------------------------------------------------------- tx-bufs -- */

static size_t pack_seg(void *dest, void *arg)
{
    memset(dest, 0x5a, 1024);
    return 1024;
}

TEST_F(contract, tx_bufs_sender_resumes_after_progress)
{
    ssize_t packed;
    double deadline;
    int sent = 0;

    env_set("UCX_RC_GDR_TX_MAX_BUFS", "32");
    env_set("UCX_RC_GDR_TX_BUFS_GROW", "32");
    contract_pair_open(true);

    /* the receiver progresses, the sender does not: it runs out */
    do {
        packed = uct_ep_am_bcopy(a->ep, AM_ID, pack_seg, NULL, 0);
        sent  += (packed >= 0);
        uct_test_progress(&nodes[1], 1);
    } while ((packed >= 0) && (sent < 10000));

    deadline = uct_test_now() + 5.0;
    do {
        uct_test_progress(&nodes[0], 1);
        uct_test_progress(&nodes[1], 1);
        packed = uct_ep_am_bcopy(a->ep, AM_ID, pack_seg, NULL, 0);
    } while ((packed == UCS_ERR_NO_RESOURCE) && (uct_test_now() < deadline));
    UCT_TEST_EXPECT(packed >= 0, "tx-bufs: after %d sends ran out of 32 "
                    "buffers, progress gives one back (%s)", sent,
                    (packed >= 0) ? "sent" :
                    ucs_status_string((ucs_status_t)packed));
    uct_test_ep_flush(nodes, 2, a->ep);
}


/* ------------------------------------------------------------------ md -- */

TEST_F(contract, md_max_alloc_not_below_max_reg)
{
    uct_test_node_t *node = node_open(dev_a(), 0);

    UCT_TEST_EXPECT(node->md_attr.cap.max_alloc >= node->md_attr.cap.max_reg,
                    "md: max_alloc %zu is not below max_reg %zu (0 hides "
                    "every size from users that size by it)",
                    node->md_attr.cap.max_alloc, node->md_attr.cap.max_reg);
}
