/**
 * A stand-in for the verbs calls of the rc_gdr memory domain, for unit tests
 * on machines without an RDMA device.
 *
 * Linked into a test program, whose dynamic symbol table exports the ibv_*
 * functions (test/mocks/mock_verbs.dynlist): the module, loaded later with
 * dlopen, binds its verbs calls to these. One device, "mock_verbs0", port 1
 * ACTIVE on Ethernet. Memory registrations are recorded with their access
 * flags, can be refused for an access flag, and can be made to fail (the Nth
 * one, with an errno, or at an MR count limit); DMA-BUF registration is
 * refused (EOPNOTSUPP), so GPU memory of the stand-in CUDA driver takes
 * peermem. Its sysfs place (ibdev_path) can be set to a synthetic tree.
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

/* After @a skip more successful registrations, the next @a count fail with
 * @a err: "the Nth registration fails" is (N - 1, 1, err) */
void mock_verbs_fail_reg_after(unsigned skip, unsigned count, int err);

/* The device's MR count limit: a registration while @a max are held fails
 * with ENOMEM, as at a real NIC's max_mr; 0: only the table's size */
void mock_verbs_set_max_mrs(unsigned max);

/* The device's largest registration (max_mr_size, UINT64_MAX after a
 * reset): a longer one fails with EINVAL */
void mock_verbs_set_max_mr_size(uint64_t max);

/* Calls of ibv_fork_init, and whether it fails (errno, 0: succeeds) */
unsigned mock_verbs_fork_init_count(void);
void mock_verbs_fail_fork_init(int err);

/* Registrations asking for any of @a access (ibv_access_flags) fail with
 * EINVAL, as at a device or library that does not take the flag, e.g.
 * IBV_ACCESS_RELAXED_ORDERING; 0: every flag taken (after
 * mock_verbs_reset()) */
void mock_verbs_refuse_access(int access);

/* Where the device says it is in sysfs (ibv_device's ibdev_path, whose
 * "device" link leads to its PCI function): a synthetic tree's
 * class/infiniband/<name>; NULL: nowhere, as after mock_verbs_reset() */
void mock_verbs_set_ibdev_path(const char *path);

#ifdef __cplusplus
}
#endif

#endif
