/*
 * Wire formats a peer sends (device address, endpoint address, remote key):
 * they round-trip, and every corruption (random bytes, truncation, another
 * version, a flipped bit, foreign uct_rkey_t values) is refused, never
 * crashes. The same cases run under AddressSanitizer in fuzz_addr.
 */

#include <gtest/gtest.h>

extern "C" {
#include <uct/ib_gdr/rc_gdr_addr.h>
#include <ucs/algorithm/crc.h>
#include <ucs/debug/log_def.h>
}

#include <random>
#include <vector>


namespace {

/* The unpackers log what they refuse; thousands of refusals stay quiet. */
ucs_log_func_rc_t silence(const char*, unsigned, const char*, ucs_log_level_t,
                          const ucs_log_component_config_t*, const char*,
                          va_list)
{
    return UCS_LOG_FUNC_RC_STOP;
}

class test_rc_gdr_addr : public ::testing::Test {
protected:
    void SetUp() override { ucs_log_push_handler(silence); }
    void TearDown() override { ucs_log_pop_handler(); }

    template <typename Unpack>
    unsigned refused_random(size_t size, Unpack unpack, unsigned cases)
    {
        std::mt19937 rng(12345);
        std::vector<uint8_t> blob(size);
        unsigned refused = 0;

        for (unsigned i = 0; i < cases; ++i) {
            for (auto &b : blob) {
                b = (uint8_t)rng();
            }
            refused += (unpack(blob.data(), blob.size()) != UCS_OK);
        }
        return refused;
    }
};

uct_rc_gdr_dev_addr_t sample_dev_addr()
{
    uct_rc_gdr_dev_addr_t addr = {};

    addr.is_roce = 1;
    addr.lid     = 0x1234;
    for (unsigned i = 0; i < sizeof(addr.gid); ++i) {
        addr.gid[i] = (uint8_t)(0xfe + i * 3);
    }
    return addr;
}

} // namespace


TEST_F(test_rc_gdr_addr, dev_addr_round_trip)
{
    uct_rc_gdr_dev_addr_t in = sample_dev_addr(), out;
    std::vector<uint8_t> blob(uct_rc_gdr_dev_addr_size());

    uct_rc_gdr_dev_addr_pack(&in, blob.data());
    ASSERT_EQ(UCS_OK, uct_rc_gdr_dev_addr_unpack(blob.data(), blob.size(),
                                                 &out));
    EXPECT_EQ(in.is_roce, out.is_roce);
    EXPECT_EQ(in.lid, out.lid);
    EXPECT_EQ(0, memcmp(in.gid, out.gid, sizeof(in.gid)));
}

TEST_F(test_rc_gdr_addr, ep_addr_round_trip)
{
    uct_rc_gdr_ep_addr_t in = {0xabcdef, 5, 0};
    uct_rc_gdr_ep_addr_t out;
    std::vector<uint8_t> blob(uct_rc_gdr_ep_addr_size());

    uct_rc_gdr_ep_addr_pack(&in, blob.data());
    ASSERT_EQ(UCS_OK, uct_rc_gdr_ep_addr_unpack(blob.data(), blob.size(),
                                                &out));
    EXPECT_EQ(in.qp_num, out.qp_num);
    EXPECT_EQ(in.path_mtu, out.path_mtu);
    EXPECT_EQ(in.flags, out.flags);
}

TEST_F(test_rc_gdr_addr, rkey_round_trip_and_uct_value)
{
    uct_rc_gdr_rkey_t in = {0xdeadbeef, UCT_RC_GDR_RKEY_FLAG_NIC |
                                        UCT_RC_GDR_RKEY_FLAG_FLUSH_READ,
                            UCT_RC_GDR_RKEY_TOKEN_HI_MASK - 5};
    uct_rc_gdr_rkey_t out, back;
    std::vector<uint8_t> blob(uct_rc_gdr_rkey_packed_size());

    uct_rc_gdr_rkey_pack(&in, blob.data());
    ASSERT_EQ(UCS_OK, uct_rc_gdr_rkey_unpack_buffer(blob.data(), blob.size(),
                                                    &out));
    EXPECT_EQ(in.rkey, out.rkey);
    EXPECT_EQ(in.flags, out.flags);
    EXPECT_EQ(in.token_hi, out.token_hi);

    ASSERT_EQ(UCS_OK, uct_rc_gdr_rkey_from_uct(uct_rc_gdr_rkey_to_uct(&out),
                                               &back));
    EXPECT_EQ(in.rkey, back.rkey);
    EXPECT_EQ(in.flags, back.flags);
    EXPECT_EQ(in.token_hi, back.token_hi);
    EXPECT_EQ(((uint64_t)in.token_hi << 32) | in.rkey,
              uct_rc_gdr_rkey_token(&back));
}

/* The bounce token's high bits are 23: a blob claiming more is refused */
TEST_F(test_rc_gdr_addr, rkey_token_wider_than_23_bits_refused)
{
    uct_rc_gdr_rkey_t in = {7, 0, UCT_RC_GDR_RKEY_TOKEN_HI_MASK}, out;
    std::vector<uint8_t> blob(uct_rc_gdr_rkey_packed_size());

    uct_rc_gdr_rkey_pack(&in, blob.data());
    blob[8] |= 0x80; /* bit 23 of token_hi, then a valid checksum */
    uint16_t crc = ucs_crc16(blob.data(), blob.size() - 2);
    blob[blob.size() - 2] = (uint8_t)crc;
    blob[blob.size() - 1] = (uint8_t)(crc >> 8);
    EXPECT_NE(UCS_OK, uct_rc_gdr_rkey_unpack_buffer(blob.data(), blob.size(),
                                                    &out));
}

/* A key that sends some access to the bounce lane names its token there:
 * without token_hi it has none (every token has one), and is refused at
 * unpack instead of at the target after a round trip */
TEST_F(test_rc_gdr_addr, rkey_bouncing_without_token_refused)
{
    const uint8_t bouncing[] = {
        0, UCT_RC_GDR_RKEY_FLAG_GPU,
        UCT_RC_GDR_RKEY_FLAG_NIC | UCT_RC_GDR_RKEY_FLAG_NO_READ,
        UCT_RC_GDR_RKEY_FLAG_NIC | UCT_RC_GDR_RKEY_FLAG_NO_WRITE
    };
    std::vector<uint8_t> blob(uct_rc_gdr_rkey_packed_size());
    uct_rc_gdr_rkey_t out;

    for (uint8_t flags : bouncing) {
        uct_rc_gdr_rkey_t in = {0x8a800018, flags, 0};

        uct_rc_gdr_rkey_pack(&in, blob.data());
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_rc_gdr_rkey_unpack_buffer(blob.data(), blob.size(),
                                                &out)) << (int)flags;
        in.token_hi = 1;
        uct_rc_gdr_rkey_pack(&in, blob.data());
        EXPECT_EQ(UCS_OK, uct_rc_gdr_rkey_unpack_buffer(blob.data(),
                                                        blob.size(), &out))
                << (int)flags;
    }

    /* A NIC key for every access needs no token */
    uct_rc_gdr_rkey_t nic = {0x8a800018, UCT_RC_GDR_RKEY_FLAG_NIC, 0};
    uct_rc_gdr_rkey_pack(&nic, blob.data());
    EXPECT_EQ(UCS_OK, uct_rc_gdr_rkey_unpack_buffer(blob.data(), blob.size(),
                                                    &out));
}

/* Thousands of random blobs: every one refused (a random blob passing the
 * magic, the version and a 16-bit checksum would take ~2^20 tries). */
TEST_F(test_rc_gdr_addr, random_blobs_refused)
{
    const unsigned cases = 20000;

    EXPECT_EQ(cases, refused_random(uct_rc_gdr_dev_addr_size(),
                                    [](const void *b, size_t l) {
                                        uct_rc_gdr_dev_addr_t a;
                                        return uct_rc_gdr_dev_addr_unpack(b, l,
                                                                          &a);
                                    }, cases));
    EXPECT_EQ(cases, refused_random(uct_rc_gdr_ep_addr_size(),
                                    [](const void *b, size_t l) {
                                        uct_rc_gdr_ep_addr_t a;
                                        return uct_rc_gdr_ep_addr_unpack(b, l,
                                                                         &a);
                                    }, cases));
    EXPECT_EQ(cases, refused_random(uct_rc_gdr_rkey_packed_size(),
                                    [](const void *b, size_t l) {
                                        uct_rc_gdr_rkey_t k;
                                        return uct_rc_gdr_rkey_unpack_buffer(
                                                b, l, &k);
                                    }, cases));
}

/* Every shorter copy of a valid blob is refused, down to nothing. */
TEST_F(test_rc_gdr_addr, truncated_refused)
{
    uct_rc_gdr_dev_addr_t dev = sample_dev_addr(), dev_out;
    uct_rc_gdr_rkey_t rkey    = {7, UCT_RC_GDR_RKEY_FLAG_NIC}, rkey_out;
    std::vector<uint8_t> d(uct_rc_gdr_dev_addr_size());
    std::vector<uint8_t> r(uct_rc_gdr_rkey_packed_size());

    uct_rc_gdr_dev_addr_pack(&dev, d.data());
    uct_rc_gdr_rkey_pack(&rkey, r.data());
    for (size_t len = 0; len < d.size(); ++len) {
        EXPECT_NE(UCS_OK, uct_rc_gdr_dev_addr_unpack(d.data(), len, &dev_out))
                << len;
    }
    for (size_t len = 0; len < r.size(); ++len) {
        EXPECT_NE(UCS_OK, uct_rc_gdr_rkey_unpack_buffer(r.data(), len,
                                                        &rkey_out)) << len;
    }
    EXPECT_NE(UCS_OK, uct_rc_gdr_rkey_unpack_buffer(NULL, r.size(),
                                                    &rkey_out));
}

/* Any single flipped bit is caught: the header by its checks, the body and
 * the checksum by the checksum. */
TEST_F(test_rc_gdr_addr, every_bit_flip_refused)
{
    uct_rc_gdr_ep_addr_t ep = {0x123456, 5, 0}, ep_out;
    std::vector<uint8_t> blob(uct_rc_gdr_ep_addr_size());

    uct_rc_gdr_ep_addr_pack(&ep, blob.data());
    for (size_t bit = 0; bit < blob.size() * 8; ++bit) {
        std::vector<uint8_t> copy = blob;
        copy[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        EXPECT_NE(UCS_OK, uct_rc_gdr_ep_addr_unpack(copy.data(), copy.size(),
                                                    &ep_out)) << bit;
    }
}

TEST_F(test_rc_gdr_addr, other_version_refused)
{
    uct_rc_gdr_rkey_t rkey = {7, UCT_RC_GDR_RKEY_FLAG_NIC}, out;
    std::vector<uint8_t> blob(uct_rc_gdr_rkey_packed_size());

    uct_rc_gdr_rkey_pack(&rkey, blob.data());
    blob[0] = (blob[0] & 0xf0) | ((UCT_RC_GDR_ADDR_VERSION + 1) & 0x0f);
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              uct_rc_gdr_rkey_unpack_buffer(blob.data(), blob.size(), &out));
}

/* A uct_rkey_t that rc_gdr did not make (another transport's, garbage). */
TEST_F(test_rc_gdr_addr, foreign_uct_rkey_refused)
{
    uct_rc_gdr_rkey_t out;

    EXPECT_NE(UCS_OK, uct_rc_gdr_rkey_from_uct(0, &out));
    EXPECT_NE(UCS_OK, uct_rc_gdr_rkey_from_uct(0x12345678, &out));
    EXPECT_NE(UCS_OK, uct_rc_gdr_rkey_from_uct(UINT64_MAX, &out));
}
