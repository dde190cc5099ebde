/*
 * rc_gdr: the wire formats a peer sends us (device address, endpoint
 * address, packed remote key) and their validation.
 *
 * Everything here arrives from another process and is untrusted: the
 * unpackers check the magic, the version, the length and a checksum, and
 * answer with an error instead of a crash or a wrong QP.
 */

#ifndef UCT_RC_GDR_ADDR_H_
#define UCT_RC_GDR_ADDR_H_

#include <ucs/type/status.h>
#include <ucs/sys/compiler_def.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UCT_RC_GDR_ADDR_MAGIC        0xa0 /* high nibble of the first byte */
#define UCT_RC_GDR_ADDR_VERSION      2    /* low nibble; 2: the remote key
                                              carries token_hi */


/* Port identity: unpacked form of the device address. */
typedef struct uct_rc_gdr_dev_addr {
    uint8_t  is_roce;          /* 1: Ethernet link layer, address by GID */
    uint16_t lid;
    uint8_t  gid[16];
} uct_rc_gdr_dev_addr_t;


/* QP identity: unpacked form of the endpoint address. */
typedef struct uct_rc_gdr_ep_addr {
    uint32_t qp_num;           /* 24 bits on the wire */
    uint8_t  path_mtu;         /* enum ibv_mtu of the peer's port */
    uint8_t  flags;            /* none defined yet: must be 0 */
} uct_rc_gdr_ep_addr_t;


enum {
    UCT_RC_GDR_RKEY_FLAG_NIC        = UCS_BIT(0), /* a NIC key exists */
    UCT_RC_GDR_RKEY_FLAG_GPU        = UCS_BIT(1), /* target is GPU memory */
    UCT_RC_GDR_RKEY_FLAG_FLUSH_READ = UCS_BIT(2), /* target needs read-flush */
    /* The target's direction policy keeps its NIC from reading / writing
     * this memory: such accesses take the bounce lane, the NIC key then
     * doubling as the bounce token. */
    UCT_RC_GDR_RKEY_FLAG_NO_READ    = UCS_BIT(3),
    UCT_RC_GDR_RKEY_FLAG_NO_WRITE   = UCS_BIT(4)
};


#define UCT_RC_GDR_RKEY_FLAGS_ALL \
    (UCT_RC_GDR_RKEY_FLAG_NIC | UCT_RC_GDR_RKEY_FLAG_GPU | \
     UCT_RC_GDR_RKEY_FLAG_FLUSH_READ | UCT_RC_GDR_RKEY_FLAG_NO_READ | \
     UCT_RC_GDR_RKEY_FLAG_NO_WRITE)


/* Random bits a bounce token has above the 32 of the key (what uct_rkey_t
 * has room for beside the flags and the marker) */
#define UCT_RC_GDR_RKEY_TOKEN_HI_BITS 23
#define UCT_RC_GDR_RKEY_TOKEN_HI_MASK \
    ((1u << UCT_RC_GDR_RKEY_TOKEN_HI_BITS) - 1)


/* Remote key: unpacked form of the packed rkey. */
typedef struct uct_rc_gdr_rkey {
    uint32_t rkey;
    uint8_t  flags;            /* UCT_RC_GDR_RKEY_FLAG_xx */
    uint32_t token_hi;         /* the bounce token's bits above rkey: the
                                  target names memory by (token_hi, rkey),
                                  55 bits a peer cannot guess; 0 when no
                                  direction bounces */
} uct_rc_gdr_rkey_t;


/* What a peer names in bounce-lane requests for this key */
static inline uint64_t uct_rc_gdr_rkey_token(const uct_rc_gdr_rkey_t *rkey)
{
    return ((uint64_t)rkey->token_hi << 32) | rkey->rkey;
}


/* Whether the remote NIC lets ours write (or read) this memory directly;
 * when not, the target copies it (the bounce lane). */
static inline int uct_rc_gdr_rkey_nic_allows(const uct_rc_gdr_rkey_t *rkey,
                                             int is_write)
{
    return (rkey->flags & UCT_RC_GDR_RKEY_FLAG_NIC) &&
           !(rkey->flags & (is_write ? UCT_RC_GDR_RKEY_FLAG_NO_WRITE :
                                       UCT_RC_GDR_RKEY_FLAG_NO_READ));
}


size_t uct_rc_gdr_dev_addr_size(void);
void uct_rc_gdr_dev_addr_pack(const uct_rc_gdr_dev_addr_t *addr, void *buffer);
ucs_status_t uct_rc_gdr_dev_addr_unpack(const void *buffer, size_t length,
                                        uct_rc_gdr_dev_addr_t *addr_p);

size_t uct_rc_gdr_ep_addr_size(void);
void uct_rc_gdr_ep_addr_pack(const uct_rc_gdr_ep_addr_t *addr, void *buffer);
ucs_status_t uct_rc_gdr_ep_addr_unpack(const void *buffer, size_t length,
                                       uct_rc_gdr_ep_addr_t *addr_p);

size_t uct_rc_gdr_rkey_packed_size(void);
void uct_rc_gdr_rkey_pack(const uct_rc_gdr_rkey_t *rkey, void *buffer);
ucs_status_t uct_rc_gdr_rkey_unpack_buffer(const void *buffer, size_t length,
                                           uct_rc_gdr_rkey_t *rkey_p);

/*
 * The unpacked rkey travels inside UCT as one uct_rkey_t: the NIC key in the
 * low 32 bits, the flags above it, token_hi in bits 40..62, and a marker bit
 * so that a value that did not come from uct_rc_gdr_rkey_to_uct() is
 * recognised. Inline: every RMA decodes one.
 */
#define UCT_RC_GDR_RKEY_MARKER        (1ull << 63)
#define UCT_RC_GDR_RKEY_TOKEN_HI_SHIFT 40

static inline uint64_t uct_rc_gdr_rkey_to_uct(const uct_rc_gdr_rkey_t *rkey)
{
    return UCT_RC_GDR_RKEY_MARKER |
           ((uint64_t)(rkey->token_hi & UCT_RC_GDR_RKEY_TOKEN_HI_MASK) <<
            UCT_RC_GDR_RKEY_TOKEN_HI_SHIFT) |
           ((uint64_t)rkey->flags << 32) | rkey->rkey;
}


static inline ucs_status_t uct_rc_gdr_rkey_from_uct(uint64_t value,
                                                    uct_rc_gdr_rkey_t *rkey_p)
{
    /* the marker, and no bit above the key that is not a flag or token_hi */
    if ((value & ~((uint64_t)UCT_RC_GDR_RKEY_FLAGS_ALL << 32) &
         ~((uint64_t)UCT_RC_GDR_RKEY_TOKEN_HI_MASK <<
           UCT_RC_GDR_RKEY_TOKEN_HI_SHIFT) &
         ~(uint64_t)UINT32_MAX) != UCT_RC_GDR_RKEY_MARKER) {
        return UCS_ERR_INVALID_PARAM;
    }

    rkey_p->rkey     = (uint32_t)value;
    rkey_p->flags    = (uint8_t)(value >> 32);
    rkey_p->token_hi = (uint32_t)(value >> UCT_RC_GDR_RKEY_TOKEN_HI_SHIFT) &
                       UCT_RC_GDR_RKEY_TOKEN_HI_MASK;
    return UCS_OK;
}

#ifdef __cplusplus
}
#endif

#endif
