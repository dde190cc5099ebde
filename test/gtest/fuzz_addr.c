/*
 * fuzz_addr: the unpackers of everything a peer sends, under
 * AddressSanitizer and UBSan (built with -fsanitize=address,undefined):
 * mutated copies of valid blobs (bit flips, byte changes, truncations) and
 * random bytes, each decoded from an exactly sized heap copy so that any
 * read past the end is caught. A mutant that still decodes must have been
 * a no-op mutation. Prints "N passed, N failed".
 */

#include <uct/ib_gdr/rc_gdr_addr.h>
#include <ucs/debug/log_def.h>

#include <stdarg.h>
#include <stdio.h>
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
static unsigned fuzz(const char *name, const unsigned char *valid, size_t size,
                     unpack_func_t unpack)
{
    unsigned accepted = 0, i;
    unsigned char *copy;
    size_t len, pos;

    for (i = 0; i < ITERATIONS; ++i) {
        len  = (rand() % 4 == 0) ? (size_t)rand() % (size + 1) : size;
        copy = malloc(len ? len : 1);
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

    printf("%s %s: %d mutants, %u wrongly accepted\n",
           accepted ? "FAIL" : "PASS", name, ITERATIONS, accepted);
    return accepted;
}


int main(void)
{
    uct_rc_gdr_dev_addr_t dev = {1, 0x1234, {0xfe, 0x80, 1, 2, 3}};
    uct_rc_gdr_ep_addr_t ep   = {0xabcdef, 5, 0};
    uct_rc_gdr_rkey_t rkey    = {0xdeadbeef, UCT_RC_GDR_RKEY_FLAG_NIC};
    unsigned char dev_blob[64], ep_blob[64], rkey_blob[64];
    int failed = 0;

    ucs_log_push_handler(fuzz_silence);
    srand(2026);
    uct_rc_gdr_dev_addr_pack(&dev, dev_blob);
    uct_rc_gdr_ep_addr_pack(&ep, ep_blob);
    uct_rc_gdr_rkey_pack(&rkey, rkey_blob);

    failed += !!fuzz("device address", dev_blob, uct_rc_gdr_dev_addr_size(),
                     unpack_dev);
    failed += !!fuzz("endpoint address", ep_blob, uct_rc_gdr_ep_addr_size(),
                     unpack_ep);
    failed += !!fuzz("remote key", rkey_blob, uct_rc_gdr_rkey_packed_size(),
                     unpack_rkey);

    printf("%d passed, %d failed\n", 3 - failed, failed);
    return failed ? 1 : 0;
}
