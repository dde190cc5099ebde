/**
 * A stand-in for the verbs calls of the rc_gdr memory domain, for unit tests
 * on machines without an RDMA device.
 *
 * Linked into a test program, whose dynamic symbol table exports the ibv_*
 * functions (test/mocks/mock_verbs.dynlist): the module, loaded later with
 * dlopen, binds its verbs calls to these. One device, "mock_verbs0", port 1
 * ACTIVE on Ethernet. Memory registrations are recorded with their access
 * flags and can be made to fail; DMA-BUF registration is refused
 * (EOPNOTSUPP), so GPU memory of the stand-in CUDA driver takes peermem.
 *
 * See file LICENSE for terms.
 */

#ifndef RC_GDR_MOCK_VERBS_H_
#define RC_GDR_MOCK_VERBS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOCK_VERBS_DEVICE_NAME "mock_verbs0"


/* One memory registration the device holds */
typedef struct {
    uintptr_t address;
    size_t    length;
    int       access;   /* ibv_access_flags */
    uint32_t  lkey;
    uint32_t  rkey;
} mock_verbs_mr_t;


/* Forget every registration and counter; fail nothing */
void mock_verbs_reset(void);

/* Registrations made (ibv_reg_mr and friends, successful) and released */
unsigned mock_verbs_reg_count(void);
unsigned mock_verbs_dereg_count(void);

/* Registrations held now */
unsigned mock_verbs_live_count(void);

/* The registration held now that starts at @a address: 1 and *mr_p, or 0 */
int mock_verbs_find(uintptr_t address, mock_verbs_mr_t *mr_p);

/* The next @a count registrations fail with @a err (errno) */
void mock_verbs_fail_reg(unsigned count, int err);

#ifdef __cplusplus
}
#endif

#endif
