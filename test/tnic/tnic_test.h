/*
 * The stand-in NIC's test API. Tests find it with dlsym(RTLD_DEFAULT, ...)
 * and skip when it is absent (a real libibverbs is loaded): every symbol
 * here is exported by the stand-in's libibverbs.so.1 under TNIC_TEST_1.0.
 */

#ifndef TNIC_TEST_H_
#define TNIC_TEST_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tnic_test_counters {
    long     pds;
    long     mrs;
    long     cqs;
    long     srqs;
    long     qps;
    long     ahs;
    long     wrs;        /* posted and not yet completed, send and receive */
    uint64_t reg_bytes;  /* bytes under live registrations */
} tnic_test_counters_t;

/* 1: this process runs on the stand-in NIC */
int tnic_test_present(void);

/* "rc_gdr stand-in NIC (test/tnic)": a line a tool can print */
const char *tnic_test_marker(void);

/* The access flags an MR was registered with, by its lkey or rkey;
 * ENOENT when no live MR has that key */
int tnic_test_mr_access(uint32_t key, int *access_p);

void tnic_test_counters(tnic_test_counters_t *counters);

/* The specs of RC_GDR_TNIC_FAULT (README.md); EINVAL on a bad spec */
int tnic_test_fault_set(const char *spec);
void tnic_test_fault_clear(void);

/* Claims a cell in the inbox of the process that owns QP qpn and leaves
 * it empty, as a process killed while writing it does (the owner must pass
 * over it once this process is dead); EAGAIN when that inbox is full */
int tnic_test_inbox_abandon_cell(uint32_t qpn);

#ifdef __cplusplus
}
#endif

#endif
