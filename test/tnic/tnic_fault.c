/*
 * Faults on demand. The same specs come from RC_GDR_TNIC_FAULT (read at the
 * first device open) and from tnic_test_fault_set() at run time; several
 * specs are separated by ','. README.md lists them:
 *
 *   wc_error:after=N:status=rem_access|retry_exceeded|rnr_retry|...
 *   qp_error:after=N
 *   reg_fail:budget=BYTES      reg_fail:errno=EFAULT|ENOMEM|EOPNOTSUPP
 *   delay:us=N                 cq:max=N
 *   drop  drop:pid=N  drop:lid=N
 *   dup  dup:pct=N
 *   rnr                        (a receiver that posts no receives)
 *   peermem:off  dmabuf:off    (the GPU memory mechanisms; both on by default)
 *   relaxed_order:off|drop     (a device without PCIe relaxed ordering)
 */

#include "tnic.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

tnic_fault_t tnic_fault;

void tnic_fault_reset(void)
{
    memset(&tnic_fault, 0, sizeof(tnic_fault));
    tnic_fault.wc_error_after  = -1;
    tnic_fault.qp_error_after  = -1;
    tnic_fault.reg_errno_after = 0;
    /* a NIC with the peer-memory client loaded and DMA-BUF in its driver */
    tnic_fault.peermem         = 1;
    tnic_fault.dmabuf          = 1;
    tnic_fault.relaxed_order   = TNIC_RELAXED_ORDER_TAKE;
}

static const struct {
    const char         *name;
    enum ibv_wc_status status;
} tnic_fault_statuses[] = {
    {"rem_access",     IBV_WC_REM_ACCESS_ERR},
    {"retry_exceeded", IBV_WC_RETRY_EXC_ERR},
    {"retry_exc",      IBV_WC_RETRY_EXC_ERR},
    {"rnr_retry",      IBV_WC_RNR_RETRY_EXC_ERR},
    {"loc_prot",       IBV_WC_LOC_PROT_ERR},
    {"loc_len",        IBV_WC_LOC_LEN_ERR},
    {"rem_inv_req",    IBV_WC_REM_INV_REQ_ERR},
    {"rem_op",         IBV_WC_REM_OP_ERR},
    {"general",        IBV_WC_GENERAL_ERR},
    {NULL, 0}
};

static const struct {
    const char *name;
    int        value;
} tnic_fault_errnos[] = {
    {"EFAULT", EFAULT}, {"ENOMEM", ENOMEM}, {"EOPNOTSUPP", EOPNOTSUPP},
    {"EINVAL", EINVAL}, {"EACCES", EACCES}, {NULL, 0}
};

/* value of 'key=' in the ':'-separated fields of one spec, or NULL */
static const char *tnic_fault_field(char *const *fields, int n,
                                    const char *key)
{
    size_t len = strlen(key);
    int i;

    for (i = 1; i < n; ++i) {
        if (!strncmp(fields[i], key, len) && (fields[i][len] == '=')) {
            return fields[i] + len + 1;
        }
    }
    return NULL;
}

static int tnic_fault_parse_one(char *spec)
{
    char *fields[8], *save = NULL, *tok;
    const char *v;
    int n = 0, i;

    for (tok = strtok_r(spec, ":", &save); (tok != NULL) && (n < 8);
         tok = strtok_r(NULL, ":", &save)) {
        fields[n++] = tok;
    }
    if (n == 0) {
        return 0;
    }

    if (!strcmp(fields[0], "none")) {
        tnic_fault_reset();
    } else if (!strcmp(fields[0], "wc_error")) {
        v = tnic_fault_field(fields, n, "after");
        tnic_fault.wc_error_after  = v ? strtol(v, NULL, 0) : 0;
        tnic_fault.wc_error_status = IBV_WC_REM_ACCESS_ERR;
        v = tnic_fault_field(fields, n, "status");
        if (v != NULL) {
            for (i = 0; tnic_fault_statuses[i].name != NULL; ++i) {
                if (!strcmp(v, tnic_fault_statuses[i].name)) {
                    break;
                }
            }
            if (tnic_fault_statuses[i].name == NULL) {
                return EINVAL;
            }
            tnic_fault.wc_error_status = tnic_fault_statuses[i].status;
        }
    } else if (!strcmp(fields[0], "qp_error")) {
        v = tnic_fault_field(fields, n, "after");
        tnic_fault.qp_error_after = v ? strtol(v, NULL, 0) : 0;
    } else if (!strcmp(fields[0], "reg_fail")) {
        v = tnic_fault_field(fields, n, "budget");
        if (v != NULL) {
            tnic_fault.reg_budget = strtoull(v, NULL, 0);
        }
        v = tnic_fault_field(fields, n, "errno");
        if (v != NULL) {
            for (i = 0; tnic_fault_errnos[i].name != NULL; ++i) {
                if (!strcmp(v, tnic_fault_errnos[i].name)) {
                    break;
                }
            }
            if (tnic_fault_errnos[i].name == NULL) {
                return EINVAL;
            }
            tnic_fault.reg_errno = tnic_fault_errnos[i].value;
            v = tnic_fault_field(fields, n, "after");
            tnic_fault.reg_errno_after = v ? strtol(v, NULL, 0) : 0;
        }
    } else if (!strcmp(fields[0], "delay")) {
        v = tnic_fault_field(fields, n, "us");
        tnic_fault.delay_ns = v ? strtoull(v, NULL, 0) * 1000ull : 0;
    } else if (!strcmp(fields[0], "cq")) {
        v = tnic_fault_field(fields, n, "max");
        tnic_fault.cq_max = v ? strtoul(v, NULL, 0) : 0;
    } else if (!strcmp(fields[0], "dmabuf")) {
        tnic_fault.dmabuf = (n < 2) || strcmp(fields[1], "off");
    } else if (!strcmp(fields[0], "peermem")) {
        tnic_fault.peermem = (n < 2) || strcmp(fields[1], "off");
    } else if (!strcmp(fields[0], "relaxed_order")) {
        if ((n < 2) || !strcmp(fields[1], "on")) {
            tnic_fault.relaxed_order = TNIC_RELAXED_ORDER_TAKE;
        } else if (!strcmp(fields[1], "off")) {
            tnic_fault.relaxed_order = TNIC_RELAXED_ORDER_REFUSE;
        } else if (!strcmp(fields[1], "drop")) {
            tnic_fault.relaxed_order = TNIC_RELAXED_ORDER_DROP;
        } else {
            return EINVAL;
        }
    } else if (!strcmp(fields[0], "drop")) {
        v = tnic_fault_field(fields, n, "pid");
        if (v != NULL) {
            tnic_fault.drop_pid = strtol(v, NULL, 0);
        }
        v = tnic_fault_field(fields, n, "lid");
        if (v != NULL) {
            tnic_fault.drop_lid = strtol(v, NULL, 0);
        }
        tnic_fault.drop_all = (n == 1);
    } else if (!strcmp(fields[0], "rnr")) {
        tnic_fault.rnr_all = 1;
    } else if (!strcmp(fields[0], "dup")) {
        v = tnic_fault_field(fields, n, "pct");
        tnic_fault.dup_pct = v ? strtoul(v, NULL, 0) : 100;
    } else {
        return EINVAL;
    }
    return 0;
}

int tnic_fault_parse(const char *spec)
{
    char *copy, *save = NULL, *tok;
    int ret = 0;

    if (spec == NULL) {
        return 0;
    }
    copy = strdup(spec);
    if (copy == NULL) {
        return ENOMEM;
    }
    for (tok = strtok_r(copy, ",", &save); (tok != NULL) && (ret == 0);
         tok = strtok_r(NULL, ",", &save)) {
        ret = tnic_fault_parse_one(tok);
    }
    free(copy);
    if (ret != 0) {
        TNIC_LOG("bad fault spec '%s'", spec);
    }
    return ret;
}

int tnic_fault_on_post(int *status_p, int *qp_error_p)
{
    int hit = 0;

    if (tnic_fault.wc_error_after >= 0) {
        if (tnic_fault.wc_error_after-- == 0) {
            *status_p = tnic_fault.wc_error_status;
            hit       = 1;
        }
    }
    if (tnic_fault.qp_error_after >= 0) {
        if (tnic_fault.qp_error_after-- == 0) {
            *qp_error_p = 1;
            hit         = 1;
        }
    }
    return hit;
}

int tnic_fault_drop(uint32_t slot, uint16_t src_lid, uint16_t dst_lid)
{
    if (tnic_fault.drop_all) {
        return 1;
    }
    if ((tnic_fault.drop_pid != 0) &&
        ((tnic_fabric_slot_pid(slot) == tnic_fault.drop_pid))) {
        return 1;
    }
    return (tnic_fault.drop_lid != 0) &&
           ((src_lid == tnic_fault.drop_lid) ||
            (dst_lid == tnic_fault.drop_lid));
}

/* Whether the fabric delivers this RC request twice (the dup fault); a
 * generator of its own, so that the application's rand() is not moved */
int tnic_fault_dup(void)
{
    if (tnic_fault.dup_pct == 0) {
        return 0;
    } else if (tnic_fault.dup_pct >= 100) {
        return 1;
    }
    tnic_fault.dup_seed = tnic_fault.dup_seed * 1103515245u + 12345u;
    return ((tnic_fault.dup_seed >> 16) % 100) < tnic_fault.dup_pct;
}
