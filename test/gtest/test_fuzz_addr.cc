/*
 * fuzz_addr: the unpackers of everything a peer sends, under
 * AddressSanitizer and UBSan (built with -fsanitize=address,undefined):
 * mutated copies of valid blobs (bit flips, byte changes, truncations) and
 * random bytes, each decoded from an exactly sized heap copy so that any
 * read past the end is caught. A mutant that still decodes must have been
 * a no-op mutation. One test per unpacker; results through googletest.
 */

#include <uct/ib_gdr/rc_gdr_addr.h>
#include <ucs/debug/log_def.h>

#include <gtest/gtest.h>

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>


#define ITERATIONS 100000


static ucs_log_func_rc_t
fuzz_silence(const char *file, unsigned line, const char *function,
             ucs_log_level_t level, const ucs_log_component_config_t *conf,
             const char *message, va_list ap)
{
    return UCS_LOG_FUNC_RC_STOP;
}


typedef ucs_status_t (*unpack_func_t)(const void *buf, size_t len);

static ucs_status_t unpack_dev(const void *buf, size_t len)
{
    uct_rc_gdr_dev_addr_t addr;
    return uct_rc_gdr_dev_addr_unpack(buf, len, &addr);
}

static ucs_status_t unpack_ep(const void *buf, size_t len)
{
    uct_rc_gdr_ep_addr_t addr;
    return uct_rc_gdr_ep_addr_unpack(buf, len, &addr);
}

static ucs_status_t unpack_rkey(const void *buf, size_t len)
{
    uct_rc_gdr_rkey_t rkey;
    return uct_rc_gdr_rkey_unpack_buffer(buf, len, &rkey);
}


/* Returns the number of mutants that decoded although they differ from the
 * valid blob: each one is a failure of the checks. */
static unsigned fuzz(const unsigned char *valid, size_t size,
                     unpack_func_t unpack)
{
    unsigned accepted = 0, i;
    unsigned char *copy;
    size_t len, pos;

    for (i = 0; i < ITERATIONS; ++i) {
        len  = (rand() % 4 == 0) ? (size_t)rand() % (size + 1) : size;
        copy = (unsigned char*)malloc(len ? len : 1);
        memcpy(copy, valid, len);
        switch (rand() % 3) {
        case 0: /* a few flipped bits */
            for (pos = 0; pos < 1 + (size_t)rand() % 3; ++pos) {
                if (len > 0) {
                    copy[rand() % len] ^= (unsigned char)(1u << (rand() % 8));
                }
            }
            break;
        case 1: /* random bytes */
            for (pos = 0; pos < len; ++pos) {
                copy[pos] = (unsigned char)rand();
            }
            break;
        default: /* truncated only */
            break;
        }

        if ((unpack(copy, len) == UCS_OK) &&
            ((len != size) || memcmp(copy, valid, size))) {
            ++accepted;
        }
        free(copy);
    }

    return accepted;
}


/* The unpackers log what they refuse: 100,000 refusals stay quiet. One
 * seed for the suite, so that a run in order mutates as it always did. */
class fuzz_addr : public testing::Test {
protected:
    static void SetUpTestSuite()
    {
        ucs_log_push_handler(fuzz_silence);
        srand(2026);
    }

    static void TearDownTestSuite()
    {
        ucs_log_pop_handler();
    }
};


TEST_F(fuzz_addr, device_address)
{
    uct_rc_gdr_dev_addr_t dev = {1, 0x1234, {0xfe, 0x80, 1, 2, 3}};
    unsigned char blob[64];

    uct_rc_gdr_dev_addr_pack(&dev, blob);
    EXPECT_EQ(0u, fuzz(blob, uct_rc_gdr_dev_addr_size(), unpack_dev))
            << "mutants of " << ITERATIONS << " wrongly accepted";
}

TEST_F(fuzz_addr, endpoint_address)
{
    uct_rc_gdr_ep_addr_t ep = {0xabcdef, 5, 0};
    unsigned char blob[64];

    uct_rc_gdr_ep_addr_pack(&ep, blob);
    EXPECT_EQ(0u, fuzz(blob, uct_rc_gdr_ep_addr_size(), unpack_ep))
            << "mutants of " << ITERATIONS << " wrongly accepted";
}

TEST_F(fuzz_addr, remote_key)
{
    uct_rc_gdr_rkey_t rkey = {0xdeadbeef, UCT_RC_GDR_RKEY_FLAG_NIC};
    unsigned char blob[64];

    uct_rc_gdr_rkey_pack(&rkey, blob);
    EXPECT_EQ(0u, fuzz(blob, uct_rc_gdr_rkey_packed_size(), unpack_rkey))
            << "mutants of " << ITERATIONS << " wrongly accepted";
}
