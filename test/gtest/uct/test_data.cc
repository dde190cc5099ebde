/*
 * Every put, get, active message and atomic flavour of rc_gdr through the
 * public UCT API, from a to b, at many sizes and offsets, checked byte for
 * byte. ucx_perftest moves data but never looks at it: these tests do.
 *
 * See file LICENSE for terms.
 */

#include "uct_rc_gdr_test.h"

#include <functional>
#include <inttypes.h>
#include <string.h>
#include <vector>


class data : public uct_rc_gdr_pair_test {
protected:
    static const uint8_t AM_ID    = 7;
    static const size_t  BUF_SIZE = 2u * 1024 * 1024;

    void SetUp() override;
    void TearDown() override;
    size_t pair_buf_size() const override;

    /* fn(length, offset) for every size at every offset that fits */
    void for_each_size_offset(const std::function<void(size_t, size_t)> &fn);

    /* Completes an operation (INPROGRESS and wc) and flushes a's endpoint */
    ucs_status_t wait_op(ucs_status_t status, uct_test_comp_t *wc);

    /* Progresses until an active message arrived, bounded */
    void am_wait(ucs_status_t status, int count);

    static ucs_status_t am_handler(void *arg, void *data, size_t length,
                                   unsigned flags);
    static size_t pack_cb(void *dest, void *arg);
    static void unpack_cb(void *arg, const void *data, size_t length);

    struct pack_arg {
        const void *src;
        size_t     length;
    };

    unsigned char *src = nullptr, *dst = nullptr;   /* a's and b's buffers */
    uct_rkey_bundle_t rkey;
    bool rkey_unpacked = false;
    unsigned seed = 1;

    /* what b (or a) received last */
    std::vector<unsigned char> am_data;
    size_t am_length = 0;
    int am_count     = 0;
};


void data::SetUp()
{
    uct_rc_gdr_pair_test::SetUp();
    if (IsSkipped() || HasFatalFailure()) {
        return;
    }

    am_data.resize(BUF_SIZE);
    for (uct_test_node_t *node : nodes) {
        ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(node->iface, AM_ID,
                                                   am_handler, this, 0));
    }

    ucs_status_t status = uct_rkey_unpack(a->component, wb.rkey, &rkey);
    ASSERT_EQ(UCS_OK, status) << "rkey unpack: " << ucs_status_string(status);
    rkey_unpacked = true;
    src           = (unsigned char*)a->buf;
    dst           = (unsigned char*)b->buf;
}

void data::TearDown()
{
    if ((a != nullptr) && (b != nullptr)) {
        UCT_TEST_EXPECT(!a->ep_error && !b->ep_error,
                        "no endpoint error during the data checks (a %s, b "
                        "%s)", ucs_status_string(a->ep_error_status),
                        ucs_status_string(b->ep_error_status));
    }
    if (rkey_unpacked) {
        uct_rkey_release(a->component, &rkey);
    }
    uct_rc_gdr_pair_test::TearDown();
}

size_t data::pair_buf_size() const
{
    return BUF_SIZE;
}

void data::for_each_size_offset(const std::function<void(size_t, size_t)> &fn)
{
    static const size_t sizes[]   = {1, 7, 8, 63, 64, 100, 127, 128, 129,
                                     4095, 4096, 8000, 8192, 65536,
                                     1048576 + 13};
    static const size_t offsets[] = {0, 1, 3, 4095};

    for (size_t length : sizes) {
        for (size_t offset : offsets) {
            if (offset + length <= BUF_SIZE) {
                fn(length, offset);
            }
        }
    }
}

ucs_status_t data::wait_op(ucs_status_t status, uct_test_comp_t *wc)
{
    status = uct_test_comp_wait(nodes, 2, status, wc);
    if (status != UCS_OK) {
        return status;
    }
    return uct_test_ep_flush(nodes, 2, a->ep);
}

void data::am_wait(ucs_status_t status, int count)
{
    double deadline = uct_test_now() + uct_test_timeout_s;

    while ((status == UCS_OK) && (am_count < count) &&
           (uct_test_now() < deadline)) {
        uct_test_progress(nodes, 2);
    }
}

ucs_status_t data::am_handler(void *arg, void *data, size_t length,
                              unsigned flags)
{
    class data *self = (class data*)arg;

    if (length <= self->am_data.size()) {
        memcpy(self->am_data.data(), data, length);
    }
    self->am_length = length;
    ++self->am_count;
    return UCS_OK;
}

size_t data::pack_cb(void *dest, void *arg)
{
    pack_arg *pa = (pack_arg*)arg;

    memcpy(dest, pa->src, pa->length);
    return pa->length;
}

void data::unpack_cb(void *arg, const void *data, size_t length)
{
    memcpy(arg, data, length);
}


TEST_F(data, put_short_sizes_offsets)
{
    for_each_size_offset([&](size_t length, size_t offset) {
        uct_test_comp_t wc;
        ucs_status_t status;

        if (length > a->iface_attr.cap.put.max_short) {
            return;
        }
        uct_test_fill(src + offset, length, ++seed);
        memset(dst, 0, BUF_SIZE);
        uct_test_comp_init(&wc);
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_put_short(a->ep, src + offset, length,
                                                 wb.buf + offset, rkey.rkey));
        status = wait_op(status, &wc);
        UCT_TEST_EXPECT((status == UCS_OK) &&
                        !memcmp(dst + offset, src + offset, length),
                        "put_short size %zu offset %zu (%s)", length, offset,
                        ucs_status_string(status));
    });
}

TEST_F(data, put_bcopy_sizes_offsets)
{
    for_each_size_offset([&](size_t length, size_t offset) {
        uct_test_comp_t wc;
        ucs_status_t status;
        pack_arg pa;
        ssize_t packed;

        if (length > a->iface_attr.cap.put.max_bcopy) {
            return;
        }
        uct_test_fill(src + offset, length, ++seed);
        memset(dst, 0, BUF_SIZE);
        pa.src    = src + offset;
        pa.length = length;
        uct_test_comp_init(&wc);
        packed    = UCT_TEST_RETRY(nodes, 2,
                                   uct_ep_put_bcopy(a->ep, pack_cb, &pa,
                                                    wb.buf + offset,
                                                    rkey.rkey));
        status    = wait_op((packed < 0) ? (ucs_status_t)packed : UCS_OK,
                            &wc);
        UCT_TEST_EXPECT((status == UCS_OK) && (packed == (ssize_t)length) &&
                        !memcmp(dst + offset, src + offset, length),
                        "put_bcopy size %zu offset %zu (%s, packed %zd)",
                        length, offset, ucs_status_string(status), packed);
    });
}

TEST_F(data, put_zcopy_sizes_offsets)
{
    for_each_size_offset([&](size_t length, size_t offset) {
        uct_test_comp_t wc;
        ucs_status_t status;
        uct_iov_t iov;

        uct_test_fill(src + offset, length, ++seed);
        memset(dst, 0, BUF_SIZE);
        uct_test_iov_init(&iov, src + offset, length, a->memh);
        uct_test_comp_init(&wc);
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_put_zcopy(a->ep, &iov, 1,
                                                 wb.buf + offset, rkey.rkey,
                                                 &wc.comp));
        status = wait_op(status, &wc);
        UCT_TEST_EXPECT((status == UCS_OK) &&
                        !memcmp(dst + offset, src + offset, length) &&
                        (dst[offset + length] == 0),
                        "put_zcopy size %zu offset %zu, nothing written "
                        "past its end (%s)", length, offset,
                        ucs_status_string(status));
    });
}

TEST_F(data, get_bcopy_sizes_offsets)
{
    std::vector<unsigned char> got(BUF_SIZE);

    for_each_size_offset([&](size_t length, size_t offset) {
        uct_test_comp_t wc;
        ucs_status_t status;

        if (length > a->iface_attr.cap.get.max_bcopy) {
            return;
        }
        uct_test_fill(dst + offset, length, ++seed);
        memset(got.data(), 0, length);
        uct_test_comp_init(&wc);
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_get_bcopy(a->ep, unpack_cb, got.data(),
                                                 length, wb.buf + offset,
                                                 rkey.rkey, &wc.comp));
        status = wait_op(status, &wc);
        UCT_TEST_EXPECT((status == UCS_OK) &&
                        !memcmp(got.data(), dst + offset, length),
                        "get_bcopy size %zu offset %zu (%s)", length, offset,
                        ucs_status_string(status));
    });
}

TEST_F(data, get_zcopy_sizes_offsets)
{
    for_each_size_offset([&](size_t length, size_t offset) {
        uct_test_comp_t wc;
        ucs_status_t status;
        uct_iov_t iov;

        uct_test_fill(dst + offset, length, ++seed);
        memset(src, 0, BUF_SIZE);
        uct_test_iov_init(&iov, src + offset, length, a->memh);
        uct_test_comp_init(&wc);
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_get_zcopy(a->ep, &iov, 1,
                                                 wb.buf + offset, rkey.rkey,
                                                 &wc.comp));
        status = wait_op(status, &wc);
        UCT_TEST_EXPECT((status == UCS_OK) &&
                        !memcmp(src + offset, dst + offset, length),
                        "get_zcopy size %zu offset %zu (%s)", length, offset,
                        ucs_status_string(status));
    });
}

/*
 * A get from memory registered for a local read only: UCP 1.13-1.16's
 * memory cache reuses an eager send's registration for a rendezvous peer's
 * get, without asking the md again (Open MPI's window set-up did, over real
 * GPU memory and a 4-byte host buffer).
 */
TEST_F(data, get_zcopy_from_memory_registered_for_local_read)
{
    const size_t length = 4;
    std::vector<unsigned char> rkey_buf(b->md_attr.rkey_packed_size);
    std::vector<unsigned char> peer(8192);
    unsigned char *target = peer.data() + 4096 + 4;
    uct_rkey_bundle_t local_read_rkey;
    uct_test_comp_t wc;
    ucs_status_t status;
    uct_mem_h memh;
    uct_iov_t iov;

    ASSERT_EQ(UCS_OK, uct_md_mem_reg(b->md, target, length,
                                     UCT_MD_MEM_ACCESS_LOCAL_READ, &memh));
    ASSERT_EQ(UCS_OK, uct_md_mkey_pack(b->md, memh, rkey_buf.data()));
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(a->component, rkey_buf.data(),
                                      &local_read_rkey));

    uct_test_fill(target, length, ++seed);
    memset(src, 0, length);
    uct_test_iov_init(&iov, src, length, a->memh);
    uct_test_comp_init(&wc);
    status = UCT_TEST_RETRY(nodes, 2,
                            uct_ep_get_zcopy(a->ep, &iov, 1,
                                             (uintptr_t)target,
                                             local_read_rkey.rkey,
                                             &wc.comp));
    status = wait_op(status, &wc);
    UCT_TEST_EXPECT((status == UCS_OK) && !memcmp(src, target, length),
                    "get_zcopy of %zu bytes from a local-read registration "
                    "(%s)", length, ucs_status_string(status));

    uct_rkey_release(a->component, &local_read_rkey);
    EXPECT_EQ(UCS_OK, uct_md_mem_dereg(b->md, memh));
}

/* Delivered to b's handler; an active message's max_short counts its
 * 8-byte header */
TEST_F(data, am_short_sizes_offsets)
{
    for_each_size_offset([&](size_t length, size_t offset) {
        uint64_t hdr = 0x1122334455667788ull ^ seed;
        uct_test_comp_t wc;
        ucs_status_t status;

        if (length + sizeof(uint64_t) > a->iface_attr.cap.am.max_short) {
            return;
        }
        uct_test_fill(src + offset, length, ++seed);
        am_count = 0;
        uct_test_comp_init(&wc);
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_am_short(a->ep, AM_ID, hdr,
                                                src + offset, length));
        status = wait_op(status, &wc);
        am_wait(status, 1);
        UCT_TEST_EXPECT((status == UCS_OK) && (am_count > 0) &&
                        (am_length == length + 8) &&
                        !memcmp(am_data.data(), &hdr, 8) &&
                        !memcmp(am_data.data() + 8, src + offset, length),
                        "am_short size %zu offset %zu (%s, %d arrived)",
                        length, offset, ucs_status_string(status), am_count);
    });
}

TEST_F(data, am_bcopy_sizes_offsets)
{
    for_each_size_offset([&](size_t length, size_t offset) {
        uct_test_comp_t wc;
        ucs_status_t status;
        pack_arg pa;
        ssize_t packed;

        if (length > a->iface_attr.cap.am.max_bcopy) {
            return;
        }
        uct_test_fill(src + offset, length, ++seed);
        am_count  = 0;
        pa.src    = src + offset;
        pa.length = length;
        uct_test_comp_init(&wc);
        packed    = UCT_TEST_RETRY(nodes, 2,
                                   uct_ep_am_bcopy(a->ep, AM_ID, pack_cb, &pa,
                                                   0));
        status    = wait_op((packed < 0) ? (ucs_status_t)packed : UCS_OK,
                            &wc);
        am_wait(status, 1);
        UCT_TEST_EXPECT((status == UCS_OK) && (am_count > 0) &&
                        (am_length == length) &&
                        !memcmp(am_data.data(), src + offset, length),
                        "am_bcopy size %zu offset %zu (%s, %d arrived)",
                        length, offset, ucs_status_string(status), am_count);
    });
}

TEST_F(data, am_zcopy_sizes_offsets)
{
    for_each_size_offset([&](size_t length, size_t offset) {
        char hdr16[16] = "rc_gdr-am-zcopy";
        uct_test_comp_t wc;
        ucs_status_t status;
        uct_iov_t iov;

        if (length + sizeof(hdr16) > a->iface_attr.cap.am.max_zcopy) {
            return;
        }
        uct_test_fill(src + offset, length, ++seed);
        am_count = 0;
        uct_test_iov_init(&iov, src + offset, length, a->memh);
        uct_test_comp_init(&wc);
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_am_zcopy(a->ep, AM_ID, hdr16,
                                                sizeof(hdr16), &iov, 1, 0,
                                                &wc.comp));
        status = wait_op(status, &wc);
        am_wait(status, 1);
        UCT_TEST_EXPECT((status == UCS_OK) && (am_count > 0) &&
                        (am_length == length + sizeof(hdr16)) &&
                        !memcmp(am_data.data(), hdr16, sizeof(hdr16)) &&
                        !memcmp(am_data.data() + sizeof(hdr16), src + offset,
                                length),
                        "am_zcopy size %zu offset %zu (%s, %d arrived)",
                        length, offset, ucs_status_string(status), am_count);
    });
}

/* More active messages in a row than the credit window: the peer must
 * return credits for the sender to go on */
TEST_F(data, am_credit_flow_control)
{
    ucs_status_t status = UCS_OK;
    uct_test_comp_t wc;
    int i;

    am_count = 0;
    for (i = 0; i < 1000; ++i) {
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_am_short(a->ep, AM_ID, i, NULL, 0));
        if (status != UCS_OK) {
            break;
        }
    }
    uct_test_comp_init(&wc);
    status = wait_op(status, &wc);
    am_wait(UCS_OK, 1000);
    UCT_TEST_EXPECT((status == UCS_OK) && (am_count == 1000),
                    "1000 active messages through credit flow control "
                    "(%d arrived, %s)", am_count, ucs_status_string(status));
}

/* Counts the replies a receives in the credit tests */
static ucs_status_t credit_reply_handler(void *arg, void *data, size_t length,
                                         unsigned flags)
{
    ++*(int*)arg;
    return UCS_OK;
}

/* The window these tests assume: FC_WND_SIZE's default */
static const int CREDIT_WND = 128;

static bool credit_wnd_is_default()
{
    const char *wnd = getenv("UCX_RC_GDR_FC_WND_SIZE");

    return (wnd == NULL) || (atoi(wnd) == CREDIT_WND);
}

/* A receiver that answers every half window, as ucx_perftest's am_bw does:
 * its answers carry the credits it owes, and no credit message of its own
 * goes out beside them (one did with each answer before). */
TEST_F(data, am_credits_ride_on_replies)
{
    const int rounds = 8, half = CREDIT_WND / 2, reply_id = AM_ID + 1;
    uct_test_iface_stats_t before, after;
    ucs_status_t status = UCS_OK;
    double deadline;
    int replies = 0, r, i;

    if (!credit_wnd_is_default()) {
        GTEST_SKIP() << "UCX_RC_GDR_FC_WND_SIZE is set";
    }
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(a->iface, reply_id,
                                               credit_reply_handler,
                                               &replies, 0));

    am_count = 0;
    before   = uct_test_iface_stats(b->iface);
    for (r = 1; (r <= rounds) && (status == UCS_OK); ++r) {
        for (i = 0; (i < half) && (status == UCS_OK); ++i) {
            status = UCT_TEST_RETRY(nodes, 2,
                                    uct_ep_am_short(a->ep, AM_ID, i, NULL, 0));
        }
        am_wait(status, r * half);
        if (status == UCS_OK) {
            status = UCT_TEST_RETRY(nodes, 2,
                                    uct_ep_am_short(b->ep, reply_id, r, NULL,
                                                    0));
        }
        deadline = uct_test_now() + uct_test_timeout_s;
        while ((status == UCS_OK) && (replies < r) &&
               (uct_test_now() < deadline)) {
            uct_test_progress(nodes, 2);
        }
    }
    after = uct_test_iface_stats(b->iface);

    UCT_TEST_EXPECT((status == UCS_OK) && (am_count == rounds * half) &&
                    (replies == rounds) &&
                    (after.credit_grants == before.credit_grants),
                    "%d rounds of %d messages and a reply: %d arrived, %d "
                    "replies, %" PRIu64 " credit messages besides (%s)",
                    rounds, half, am_count, replies,
                    after.credit_grants - before.credit_grants,
                    ucs_status_string(status));
}

/* Owed credits with no reply to carry them go back in a message of their
 * own once the receiver finds nothing more to receive: the sender then
 * has its whole window again. */
TEST_F(data, am_credits_return_when_receiver_idle)
{
    const int half = CREDIT_WND / 2;
    uct_test_iface_stats_t before, after, a_before;
    ucs_status_t status = UCS_OK;
    int i, sent = 0;
    double deadline;

    if (!credit_wnd_is_default()) {
        GTEST_SKIP() << "UCX_RC_GDR_FC_WND_SIZE is set";
    }

    am_count = 0;
    before   = uct_test_iface_stats(b->iface);
    for (i = 0; (i < half) && (status == UCS_OK); ++i) {
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_am_short(a->ep, AM_ID, i, NULL, 0));
    }
    am_wait(status, half);
    /* b idle, then a takes in what b sent (one message) */
    for (i = 0; i < 4; ++i) {
        uct_worker_progress(b->worker);
    }
    after    = uct_test_iface_stats(b->iface);
    a_before = uct_test_iface_stats(a->iface);
    deadline = uct_test_now() + uct_test_timeout_s;
    while ((uct_test_iface_stats(a->iface).rx_msgs == a_before.rx_msgs) &&
           (after.credit_grants > before.credit_grants) &&
           (uct_test_now() < deadline)) {
        uct_worker_progress(a->worker);
    }

    /* The whole window, without progress: no credit may be missing */
    while ((status == UCS_OK) && (sent < CREDIT_WND)) {
        status = uct_ep_am_short(a->ep, AM_ID, sent, NULL, 0);
        sent  += (status == UCS_OK);
    }
    am_wait(UCS_OK, half + sent);

    UCT_TEST_EXPECT((after.credit_grants == before.credit_grants + 1) &&
                    (sent == CREDIT_WND) && (am_count == half + sent),
                    "%" PRIu64 " credit messages after %d messages (1 "
                    "expected), then %d of %d sent without progress (%s), "
                    "%d arrived", after.credit_grants - before.credit_grants,
                    half, sent, CREDIT_WND, ucs_status_string(status),
                    am_count);
}

/* 64-bit atomics on b's buffer, one after the other on the same word */
TEST_F(data, atomics_64bit)
{
    uint64_t *word = (uint64_t*)(dst + 64);
    uint64_t result = 0;
    uct_test_comp_t wc;
    ucs_status_t status;

    if (!(a->iface_attr.cap.flags & UCT_IFACE_FLAG_ATOMIC_DEVICE)) {
        GTEST_SKIP() << "the device has no atomics";
    }

    *word = 40;
    uct_test_comp_init(&wc);
    status = UCT_TEST_RETRY(nodes, 2,
                            uct_ep_atomic64_fetch(a->ep, UCT_ATOMIC_OP_ADD, 2,
                                                  &result, wb.buf + 64,
                                                  rkey.rkey, &wc.comp));
    status = wait_op(status, &wc);
    UCT_TEST_EXPECT((status == UCS_OK) && (result == 40) && (*word == 42),
                    "atomic fetch-add (got %" PRIu64 ", now %" PRIu64 ", %s)",
                    result, *word, ucs_status_string(status));

    uct_test_comp_init(&wc);
    status = UCT_TEST_RETRY(nodes, 2,
                            uct_ep_atomic_cswap64(a->ep, 42, 7, wb.buf + 64,
                                                  rkey.rkey, &result,
                                                  &wc.comp));
    status = wait_op(status, &wc);
    UCT_TEST_EXPECT((status == UCS_OK) && (result == 42) && (*word == 7),
                    "atomic compare-swap (got %" PRIu64 ", now %" PRIu64
                    ", %s)", result, *word, ucs_status_string(status));

    uct_test_comp_init(&wc);
    status = UCT_TEST_RETRY(nodes, 2,
                            uct_ep_atomic64_post(a->ep, UCT_ATOMIC_OP_ADD, 5,
                                                 wb.buf + 64, rkey.rkey));
    status = wait_op(status, &wc);
    UCT_TEST_EXPECT((status == UCS_OK) && (*word == 12),
                    "atomic post add (now %" PRIu64 ", %s)", *word,
                    ucs_status_string(status));
}

TEST_F(data, atomic_unaligned_refused)
{
    ucs_status_t status;

    if (!(a->iface_attr.cap.flags & UCT_IFACE_FLAG_ATOMIC_DEVICE)) {
        GTEST_SKIP() << "the device has no atomics";
    }

    status = uct_ep_atomic64_post(a->ep, UCT_ATOMIC_OP_ADD, 1, wb.buf + 65,
                                  rkey.rkey);
    UCT_TEST_EXPECT(status == UCS_ERR_INVALID_PARAM,
                    "atomic on an unaligned address is refused (%s)",
                    ucs_status_string(status));
}
