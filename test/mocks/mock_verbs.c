/**
 * A stand-in for the verbs calls of the rc_gdr memory domain (see
 * mock_verbs.h). Only what the md and its probe call is here; the calls
 * keep their libibverbs signatures, the macros of verbs.h kept out by
 * parentheses around the names.
 *
 * See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "mock_verbs.h"

#include <infiniband/verbs.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define MOCK_VERBS_MAX_MRS 4096


typedef struct {
    struct ibv_mr mr;
    int           access;
    int           used;
} mock_verbs_slot_t;


static struct {
    pthread_mutex_t    lock;
    struct ibv_device  device;
    struct ibv_device  *list[2];
    mock_verbs_slot_t  mrs[MOCK_VERBS_MAX_MRS];
    unsigned           regs;
    unsigned           deregs;
    unsigned           fail_skip;
    unsigned           fail_count;
    int                fail_errno;
    unsigned           max_mrs;
    uint64_t           max_mr_size;
    unsigned           fork_inits;
    int                fork_init_errno;
    int                refused_access;
    uint32_t           next_key;
} mock_verbs = {
    .lock        = PTHREAD_MUTEX_INITIALIZER,
    .max_mr_size = UINT64_MAX
};


void mock_verbs_reset(void)
{
    pthread_mutex_lock(&mock_verbs.lock);
    memset(mock_verbs.mrs, 0, sizeof(mock_verbs.mrs));
    mock_verbs.regs       = 0;
    mock_verbs.deregs     = 0;
    mock_verbs.fail_skip  = 0;
    mock_verbs.fail_count = 0;
    mock_verbs.max_mrs    = 0;
    mock_verbs.max_mr_size = UINT64_MAX;
    mock_verbs.fork_inits = 0;
    mock_verbs.fork_init_errno = 0;
    mock_verbs.refused_access  = 0;
    pthread_mutex_unlock(&mock_verbs.lock);
    mock_verbs_set_ibdev_path(NULL);
}

void mock_verbs_set_max_mr_size(uint64_t max)
{
    mock_verbs.max_mr_size = max;
}

unsigned mock_verbs_reg_count(void)
{
    return mock_verbs.regs;
}

unsigned mock_verbs_dereg_count(void)
{
    return mock_verbs.deregs;
}

unsigned mock_verbs_live_count(void)
{
    unsigned i, count = 0;

    pthread_mutex_lock(&mock_verbs.lock);
    for (i = 0; i < MOCK_VERBS_MAX_MRS; ++i) {
        count += mock_verbs.mrs[i].used;
    }
    pthread_mutex_unlock(&mock_verbs.lock);
    return count;
}

int mock_verbs_find(uintptr_t address, mock_verbs_mr_t *mr_p)
{
    mock_verbs_slot_t *slot;
    int found = 0;
    unsigned i;

    pthread_mutex_lock(&mock_verbs.lock);
    for (i = 0; i < MOCK_VERBS_MAX_MRS; ++i) {
        slot = &mock_verbs.mrs[i];
        if (slot->used && ((uintptr_t)slot->mr.addr == address)) {
            mr_p->address = (uintptr_t)slot->mr.addr;
            mr_p->length  = slot->mr.length;
            mr_p->access  = slot->access;
            mr_p->lkey    = slot->mr.lkey;
            mr_p->rkey    = slot->mr.rkey;
            found         = 1;
            break;
        }
    }
    pthread_mutex_unlock(&mock_verbs.lock);
    return found;
}

void mock_verbs_fail_reg(unsigned count, int err)
{
    mock_verbs_fail_reg_after(0, count, err);
}

void mock_verbs_fail_reg_after(unsigned skip, unsigned count, int err)
{
    pthread_mutex_lock(&mock_verbs.lock);
    mock_verbs.fail_skip  = skip;
    mock_verbs.fail_count = count;
    mock_verbs.fail_errno = err;
    pthread_mutex_unlock(&mock_verbs.lock);
}

void mock_verbs_set_max_mrs(unsigned max)
{
    pthread_mutex_lock(&mock_verbs.lock);
    mock_verbs.max_mrs = max;
    pthread_mutex_unlock(&mock_verbs.lock);
}

void mock_verbs_refuse_access(int access)
{
    pthread_mutex_lock(&mock_verbs.lock);
    mock_verbs.refused_access = access;
    pthread_mutex_unlock(&mock_verbs.lock);
}

unsigned mock_verbs_fork_init_count(void)
{
    return mock_verbs.fork_inits;
}

void mock_verbs_fail_fork_init(int err)
{
    pthread_mutex_lock(&mock_verbs.lock);
    mock_verbs.fork_init_errno = err;
    pthread_mutex_unlock(&mock_verbs.lock);
}

int ibv_fork_init(void)
{
    int err;

    pthread_mutex_lock(&mock_verbs.lock);
    ++mock_verbs.fork_inits;
    err = mock_verbs.fork_init_errno;
    pthread_mutex_unlock(&mock_verbs.lock);
    return err;
}


static void mock_verbs_device_init(void)
{
    struct ibv_device *dev = &mock_verbs.device;

    if (dev->name[0] != '\0') {
        return;
    }

    strcpy(dev->name, MOCK_VERBS_DEVICE_NAME);
    strcpy(dev->dev_name, "uverbs_mock");
    strcpy(dev->dev_path, "/nonexistent/uverbs_mock");
    strcpy(dev->ibdev_path, "/nonexistent/" MOCK_VERBS_DEVICE_NAME);
    dev->node_type      = IBV_NODE_CA;
    dev->transport_type = IBV_TRANSPORT_IB;
    mock_verbs.list[0]  = dev;
    mock_verbs.list[1]  = NULL;
}

void mock_verbs_set_ibdev_path(const char *path)
{
    struct ibv_device *dev = &mock_verbs.device;

    mock_verbs_device_init();
    snprintf(dev->ibdev_path, sizeof(dev->ibdev_path), "%s",
             (path != NULL) ? path : "/nonexistent/" MOCK_VERBS_DEVICE_NAME);
}

struct ibv_device **(ibv_get_device_list)(int *num_devices)
{
    struct ibv_device **list = malloc(sizeof(mock_verbs.list));

    if (list == NULL) {
        errno = ENOMEM;
        return NULL;
    }

    pthread_mutex_lock(&mock_verbs.lock);
    mock_verbs_device_init();
    memcpy(list, mock_verbs.list, sizeof(mock_verbs.list));
    pthread_mutex_unlock(&mock_verbs.lock);
    if (num_devices != NULL) {
        *num_devices = 1;
    }
    return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
    return device->name;
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    /* abi_compat 0: verbs.h's inline wrappers call the exported functions
       below instead of a provider's ops */
    struct ibv_context *context = calloc(1, sizeof(*context));

    if (context == NULL) {
        errno = ENOMEM;
        return NULL;
    }

    context->device = device;
    pthread_mutex_init(&context->mutex, NULL);
    return context;
}

int ibv_close_device(struct ibv_context *context)
{
    pthread_mutex_destroy(&context->mutex);
    free(context);
    return 0;
}

int ibv_query_device(struct ibv_context *context,
                     struct ibv_device_attr *device_attr)
{
    memset(device_attr, 0, sizeof(*device_attr));
    strcpy(device_attr->fw_ver, "mock");
    device_attr->max_mr_size     = mock_verbs.max_mr_size;
    device_attr->page_size_cap   = 4096;
    device_attr->max_qp          = 1024;
    device_attr->max_qp_wr       = 4096;
    device_attr->max_sge         = 8;
    device_attr->max_cq          = 1024;
    device_attr->max_cqe         = 65536;
    device_attr->max_mr          = MOCK_VERBS_MAX_MRS;
    device_attr->max_pd          = 64;
    device_attr->max_qp_rd_atom  = 16;
    device_attr->max_srq         = 64;
    device_attr->max_srq_wr      = 4096;
    device_attr->max_srq_sge     = 8;
    device_attr->atomic_cap      = IBV_ATOMIC_HCA;
    device_attr->phys_port_cnt   = 1;
    return 0;
}

int (ibv_query_port)(struct ibv_context *context, uint8_t port_num,
                     struct _compat_ibv_port_attr *compat_attr)
{
    struct ibv_port_attr *port_attr = (struct ibv_port_attr*)compat_attr;

    if (port_num != 1) {
        return EINVAL;
    }

    port_attr->state      = IBV_PORT_ACTIVE;
    port_attr->max_mtu    = IBV_MTU_4096;
    port_attr->active_mtu = IBV_MTU_1024;
    port_attr->gid_tbl_len = 1;
    port_attr->link_layer = IBV_LINK_LAYER_ETHERNET;
    return 0;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    struct ibv_pd *pd = calloc(1, sizeof(*pd));

    if (pd == NULL) {
        errno = ENOMEM;
        return NULL;
    }

    pd->context = context;
    pd->handle  = 1;
    return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
    free(pd);
    return 0;
}

static struct ibv_mr *mock_verbs_reg(struct ibv_pd *pd, void *addr,
                                     size_t length, int access)
{
    mock_verbs_slot_t *slot = NULL;
    unsigned i, live = 0;

    pthread_mutex_lock(&mock_verbs.lock);
    if ((mock_verbs.fail_count > 0) && (mock_verbs.fail_skip == 0)) {
        --mock_verbs.fail_count;
        errno = mock_verbs.fail_errno;
        goto err;
    }

    /* Longer than the device registers at all */
    if (length > mock_verbs.max_mr_size) {
        errno = EINVAL;
        goto err;
    }

    /* The NIC's MR count limit */
    for (i = 0; i < MOCK_VERBS_MAX_MRS; ++i) {
        live += mock_verbs.mrs[i].used;
    }
    if ((mock_verbs.max_mrs > 0) && (live >= mock_verbs.max_mrs)) {
        errno = ENOMEM;
        goto err;
    }

    /* A flag the library or device does not take */
    if (access & mock_verbs.refused_access) {
        errno = EINVAL;
        goto err;
    }

    /* What a real device checks first */
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE)) {
        errno = EINVAL;
        goto err;
    }

    for (i = 0; i < MOCK_VERBS_MAX_MRS; ++i) {
        if (!mock_verbs.mrs[i].used) {
            slot = &mock_verbs.mrs[i];
            break;
        }
    }
    if (slot == NULL) {
        errno = ENOMEM;
        goto err;
    }

    memset(slot, 0, sizeof(*slot));
    slot->used       = 1;
    slot->access     = access;
    slot->mr.context = pd->context;
    slot->mr.pd      = pd;
    slot->mr.addr    = addr;
    slot->mr.length  = length;
    slot->mr.handle  = i;
    slot->mr.lkey    = 0x1000 + (++mock_verbs.next_key);
    slot->mr.rkey    = 0x80000000u + mock_verbs.next_key;
    ++mock_verbs.regs;
    if (mock_verbs.fail_skip > 0) {
        --mock_verbs.fail_skip;
    }
    pthread_mutex_unlock(&mock_verbs.lock);
    return &slot->mr;

err:
    pthread_mutex_unlock(&mock_verbs.lock);
    return NULL;
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length,
                            int access)
{
    return mock_verbs_reg(pd, addr, length, access);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
                                uint64_t iova, unsigned int access)
{
    return mock_verbs_reg(pd, addr, length, (int)access);
}

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
                                 size_t length, uint64_t iova, int fd,
                                 int access)
{
    errno = EOPNOTSUPP;
    return NULL;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
    mock_verbs_slot_t *slot = (mock_verbs_slot_t*)mr;

    pthread_mutex_lock(&mock_verbs.lock);
    if ((slot < mock_verbs.mrs) || (slot >= mock_verbs.mrs + MOCK_VERBS_MAX_MRS) ||
        !slot->used) {
        pthread_mutex_unlock(&mock_verbs.lock);
        return EINVAL;
    }

    slot->used = 0;
    ++mock_verbs.deregs;
    pthread_mutex_unlock(&mock_verbs.lock);
    return 0;
}
