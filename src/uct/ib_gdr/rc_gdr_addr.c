/*
 * rc_gdr: packing and validation of addresses and remote keys.
 *
 * Layout of every blob: [magic|version] [fields, little endian] [crc16].
 * The checksum is over everything before it, so random bytes, a truncated
 * copy and a blob of another version are all refused.
 */

#include "rc_gdr_addr.h"

#include <ucs/algorithm/crc.h>
#include <ucs/debug/log.h>

#include <string.h>


#define UCT_RC_GDR_ADDR_HEADER \
    (UCT_RC_GDR_ADDR_MAGIC | UCT_RC_GDR_ADDR_VERSION)

/* Field sizes on the wire, after the header byte and before the crc. */
#define UCT_RC_GDR_DEV_ADDR_BODY 19  /* flags(1) lid(2) gid(16) */
#define UCT_RC_GDR_EP_ADDR_BODY  5   /* qpn(3) mtu(1) flags(1) */
#define UCT_RC_GDR_RKEY_BODY     8   /* rkey(4) flags(1) token_hi(3) */


static void uct_rc_gdr_put_le(uint8_t *p, uint64_t value, unsigned bytes)
{
    unsigned i;

    for (i = 0; i < bytes; ++i) {
        p[i] = (uint8_t)(value >> (8 * i));
    }
}


static uint64_t uct_rc_gdr_get_le(const uint8_t *p, unsigned bytes)
{
    uint64_t value = 0;
    unsigned i;

    for (i = 0; i < bytes; ++i) {
        value |= (uint64_t)p[i] << (8 * i);
    }
    return value;
}


static void uct_rc_gdr_blob_seal(uint8_t *blob, size_t body)
{
    blob[0] = UCT_RC_GDR_ADDR_HEADER;
    uct_rc_gdr_put_le(blob + 1 + body, ucs_crc16(blob, 1 + body), 2);
}


/* Checks the frame of a blob; the body is then safe to read. */
static ucs_status_t uct_rc_gdr_blob_check(const uint8_t *blob, size_t length,
                                          size_t body, const char *what)
{
    if ((blob == NULL) || (length < 1 + body + 2)) {
        ucs_error("rc_gdr: %s is %zu bytes, expected %zu", what, length,
                  1 + body + 2);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((blob[0] & 0xf0) != UCT_RC_GDR_ADDR_MAGIC) {
        ucs_error("rc_gdr: %s does not come from rc_gdr (header 0x%02x)",
                  what, blob[0]);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((blob[0] & 0x0f) != UCT_RC_GDR_ADDR_VERSION) {
        ucs_error("rc_gdr: %s has format version %u, this peer speaks %u",
                  what, blob[0] & 0x0f, UCT_RC_GDR_ADDR_VERSION);
        return UCS_ERR_UNSUPPORTED;
    }

    if (uct_rc_gdr_get_le(blob + 1 + body, 2) != ucs_crc16(blob, 1 + body)) {
        ucs_error("rc_gdr: %s is corrupt (checksum mismatch)", what);
        return UCS_ERR_INVALID_PARAM;
    }

    return UCS_OK;
}


size_t uct_rc_gdr_dev_addr_size(void)
{
    return 1 + UCT_RC_GDR_DEV_ADDR_BODY + 2;
}


void uct_rc_gdr_dev_addr_pack(const uct_rc_gdr_dev_addr_t *addr, void *buffer)
{
    uint8_t *p = buffer;

    p[1] = addr->is_roce ? 1 : 0;
    uct_rc_gdr_put_le(p + 2, addr->lid, 2);
    memcpy(p + 4, addr->gid, sizeof(addr->gid));
    uct_rc_gdr_blob_seal(p, UCT_RC_GDR_DEV_ADDR_BODY);
}


ucs_status_t uct_rc_gdr_dev_addr_unpack(const void *buffer, size_t length,
                                        uct_rc_gdr_dev_addr_t *addr_p)
{
    const uint8_t *p = buffer;
    ucs_status_t status;

    status = uct_rc_gdr_blob_check(p, length, UCT_RC_GDR_DEV_ADDR_BODY,
                                   "device address");
    if (status != UCS_OK) {
        return status;
    }

    if (p[1] > 1) {
        ucs_error("rc_gdr: device address has unknown flags 0x%x", p[1]);
        return UCS_ERR_INVALID_PARAM;
    }

    addr_p->is_roce = p[1];
    addr_p->lid     = (uint16_t)uct_rc_gdr_get_le(p + 2, 2);
    memcpy(addr_p->gid, p + 4, sizeof(addr_p->gid));
    return UCS_OK;
}


size_t uct_rc_gdr_ep_addr_size(void)
{
    return 1 + UCT_RC_GDR_EP_ADDR_BODY + 2;
}


void uct_rc_gdr_ep_addr_pack(const uct_rc_gdr_ep_addr_t *addr, void *buffer)
{
    uint8_t *p = buffer;

    uct_rc_gdr_put_le(p + 1, addr->qp_num, 3);
    p[4] = addr->path_mtu;
    p[5] = addr->flags;
    uct_rc_gdr_blob_seal(p, UCT_RC_GDR_EP_ADDR_BODY);
}


ucs_status_t uct_rc_gdr_ep_addr_unpack(const void *buffer, size_t length,
                                       uct_rc_gdr_ep_addr_t *addr_p)
{
    const uint8_t *p = buffer;
    ucs_status_t status;

    status = uct_rc_gdr_blob_check(p, length, UCT_RC_GDR_EP_ADDR_BODY,
                                   "endpoint address");
    if (status != UCS_OK) {
        return status;
    }

    /* IBV_MTU_256 .. IBV_MTU_4096 are 1..5 */
    if ((p[4] < 1) || (p[4] > 5) ||
        (p[5] != 0)) {
        ucs_error("rc_gdr: endpoint address has invalid mtu %u or flags 0x%x",
                  p[4], p[5]);
        return UCS_ERR_INVALID_PARAM;
    }

    addr_p->qp_num   = (uint32_t)uct_rc_gdr_get_le(p + 1, 3);
    addr_p->path_mtu = p[4];
    addr_p->flags    = p[5];
    return UCS_OK;
}


size_t uct_rc_gdr_rkey_packed_size(void)
{
    return 1 + UCT_RC_GDR_RKEY_BODY + 2;
}


void uct_rc_gdr_rkey_pack(const uct_rc_gdr_rkey_t *rkey, void *buffer)
{
    uint8_t *p = buffer;

    uct_rc_gdr_put_le(p + 1, rkey->rkey, 4);
    p[5] = rkey->flags;
    uct_rc_gdr_put_le(p + 6, rkey->token_hi & UCT_RC_GDR_RKEY_TOKEN_HI_MASK,
                      3);
    uct_rc_gdr_blob_seal(p, UCT_RC_GDR_RKEY_BODY);
}


ucs_status_t uct_rc_gdr_rkey_unpack_buffer(const void *buffer, size_t length,
                                           uct_rc_gdr_rkey_t *rkey_p)
{
    const uint8_t *p = buffer;
    ucs_status_t status;

    status = uct_rc_gdr_blob_check(p, length, UCT_RC_GDR_RKEY_BODY,
                                   "remote key");
    if (status != UCS_OK) {
        return status;
    }

    if (p[5] & ~UCT_RC_GDR_RKEY_FLAGS_ALL) {
        ucs_error("rc_gdr: remote key has unknown flags 0x%x", p[5]);
        return UCS_ERR_INVALID_PARAM;
    }

    if (uct_rc_gdr_get_le(p + 6, 3) & ~(uint64_t)UCT_RC_GDR_RKEY_TOKEN_HI_MASK) {
        ucs_error("rc_gdr: remote key has a token wider than %u bits",
                  32 + UCT_RC_GDR_RKEY_TOKEN_HI_BITS);
        return UCS_ERR_INVALID_PARAM;
    }

    rkey_p->rkey     = (uint32_t)uct_rc_gdr_get_le(p + 1, 4);
    rkey_p->flags    = p[5];
    rkey_p->token_hi = (uint32_t)uct_rc_gdr_get_le(p + 6, 3);

    /* Every token has bits above the key (rc_gdr_md_token.c): a key that
     * sends some access to the bounce lane without one would only be
     * refused there, after a round trip */
    if ((rkey_p->token_hi == 0) &&
        (!uct_rc_gdr_rkey_nic_allows(rkey_p, 0) ||
         !uct_rc_gdr_rkey_nic_allows(rkey_p, 1))) {
        ucs_error("rc_gdr: remote key 0x%x (flags 0x%x) sends accesses to "
                  "the bounce lane but carries no bounce token",
                  rkey_p->rkey, rkey_p->flags);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}
