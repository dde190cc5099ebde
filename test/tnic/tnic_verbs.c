/*
 * The stand-in NIC's verbs: every entry point libibverbs.so.1 exports that
 * UCX, librdmacm and ibverbs-utils use, and the objects they make. The data
 * path (post, poll, arm) reaches this file through the ops table of the
 * struct verbs_context each open device gets, as verbs.h's static inlines
 * dispatch through it; the execution of requests is tnic_engine.c's.
 *
 * Checks are those of a device: wrong QP transitions and attribute masks are
 * EINVAL, a full send queue is ENOMEM, unknown keys and missing access are
 * completion errors at the side that checks them.
 */

#define _GNU_SOURCE
#include "tnic.h"
#include "tnic_test.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* verbs.h maps these names to static inlines; the library defines them */
#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_query_port
#undef ibv_get_device_list

tnic_proc_t tnic_proc = {
    .lock = PTHREAD_MUTEX_INITIALIZER
};

static pthread_once_t tnic_once = PTHREAD_ONCE_INIT;

/* Marker that a tool runs on the stand-in, environment-free */
const char tnic_marker[] = "rc_gdr stand-in NIC (test/tnic)";

void tnic_log(const char *file, int line, const char *fmt, ...)
{
    char buf[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "[tnic %d] %s:%d %s\n", (int)getpid(), file, line, buf);
}

uint64_t tnic_time_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

uint32_t tnic_rand32(void)
{
    /* xorshift64*: keys must not be small sequential numbers */
    uint64_t x = tnic_proc.rand_state;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    tnic_proc.rand_state = x;
    return (uint32_t)((x * 0x2545f4914f6cdd1dull) >> 32);
}

static void tnic_atfork_child(void)
{
    /* A child has none of its parent's devices (as after fork() without
     * fork support): it opens its own, on a slot of its own. */
    pthread_mutex_init(&tnic_proc.lock, NULL);
    tnic_proc.pid            = getpid();
    tnic_proc.thread_started = 0;
    tnic_proc.qps            = NULL;
    tnic_proc.qp_list        = NULL;
    tnic_proc.mrs            = NULL;
    tnic_proc.mr_cap         = 0;
    memset(&tnic_proc.counters, 0, sizeof(tnic_proc.counters));
    tnic_fabric_fork_child();
}

static void tnic_atfork_prepare(void)
{
    pthread_mutex_lock(&tnic_proc.lock);
}

static void tnic_atfork_parent(void)
{
    pthread_mutex_unlock(&tnic_proc.lock);
}

static void tnic_sysfs_dir(tnic_device_t *dev)
{
    char path[256];
    int fd;

    /* ibdev_path: a directory the device "has", with a numa_node file */
    snprintf(path, sizeof(path), "/tmp/rc_gdr_tnic-%u", (unsigned)getuid());
    mkdir(path, 0700);
    snprintf(dev->ibdev.ibdev_path, sizeof(dev->ibdev.ibdev_path),
             "%.200s/%.40s", path, dev->ibdev.name);
    mkdir(dev->ibdev.ibdev_path, 0700);
    snprintf(path, sizeof(path), "%s/numa_node", dev->ibdev.ibdev_path);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
        if (write(fd, "0\n", 2) != 2) {
            /* optional file */
        }
        close(fd);
    }
}

static void tnic_proc_init_once(void)
{
    const char *env;
    tnic_device_t *dev;
    int i, n;

    tnic_proc.pid = getpid();
    if (getrandom(&tnic_proc.rand_state, sizeof(tnic_proc.rand_state),
                  0) != sizeof(tnic_proc.rand_state)) {
        tnic_proc.rand_state = tnic_time_ns() ^ ((uint64_t)getpid() << 32);
    }
    tnic_proc.rand_state |= 1;

    env = getenv("RC_GDR_TNIC_DEVICES");
    n   = env ? atoi(env) : TNIC_DEFAULT_DEVICES;
    if (n < 0) {
        n = 0;
    } else if (n > TNIC_MAX_DEVICES) {
        n = TNIC_MAX_DEVICES;
    }
    tnic_proc.num_devices = n;
    /* the directory that path goes through (README.md: needs root once) */
    mkdir("/dev/infiniband", 0755);
    for (i = 0; i < n; ++i) {
        dev = &tnic_proc.devices[i];
        memset(dev, 0, sizeof(*dev));
        dev->index                = i;
        dev->lid                  = (uint16_t)(i + 1);
        dev->guid                 = TNIC_GUID_BASE | (uint64_t)(i + 1);
        dev->ibdev.node_type      = IBV_NODE_CA;
        dev->ibdev.transport_type = IBV_TRANSPORT_IB;
        snprintf(dev->ibdev.name, sizeof(dev->ibdev.name), "tnic%d", i);
        /* UCX lists a device only when /dev/infiniband/<dev_name> is a
         * character device it may open: /dev/infiniband/../null is one */
        snprintf(dev->ibdev.dev_name, sizeof(dev->ibdev.dev_name),
                 "../null");
        snprintf(dev->ibdev.dev_path, sizeof(dev->ibdev.dev_path),
                 "/dev/null");
        tnic_sysfs_dir(dev);
    }

    tnic_fault_reset();
    tnic_fault_parse(getenv("RC_GDR_TNIC_FAULT"));
    pthread_atfork(tnic_atfork_prepare, tnic_atfork_parent,
                   tnic_atfork_child);
    tnic_proc.initialized = 1;
}

void tnic_proc_init(void)
{
    pthread_once(&tnic_once, tnic_proc_init_once);
}

static tnic_context_t *tnic_ctx(struct ibv_context *context)
{
    return (tnic_context_t*)((char*)context -
                             offsetof(tnic_context_t, vctx.context));
}

/* ------------------------------------------------------------------------
 * Devices
 */

struct ibv_device **ibv_get_device_list(int *num_devices)
{
    struct ibv_device **list;
    int i;

    tnic_proc_init();
    list = calloc(tnic_proc.num_devices + 1, sizeof(*list));
    if (list == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    for (i = 0; i < tnic_proc.num_devices; ++i) {
        list[i] = &tnic_proc.devices[i].ibdev;
    }
    if (num_devices != NULL) {
        *num_devices = tnic_proc.num_devices;
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

int ibv_get_device_index(struct ibv_device *device)
{
    return ((tnic_device_t*)device)->index;
}

__be64 ibv_get_device_guid(struct ibv_device *device)
{
    return htobe64(((tnic_device_t*)device)->guid);
}

static void tnic_device_attr(tnic_device_t *dev, struct ibv_device_attr *a)
{
    memset(a, 0, sizeof(*a));
    snprintf(a->fw_ver, sizeof(a->fw_ver), "1.0.0");
    a->node_guid                 = htobe64(dev->guid);
    a->sys_image_guid            = htobe64(dev->guid);
    a->max_mr_size               = TNIC_MAX_MR_SIZE;
    a->page_size_cap             = 0xfffff000;
    a->vendor_id                 = TNIC_VENDOR_ID;
    a->vendor_part_id            = TNIC_VENDOR_PART_ID;
    a->hw_ver                    = 1;
    a->max_qp                    = TNIC_MAX_QPS - 1;
    a->max_qp_wr                 = TNIC_MAX_QP_WR;
    a->device_cap_flags          = IBV_DEVICE_RC_RNR_NAK_GEN |
                                   IBV_DEVICE_SYS_IMAGE_GUID |
                                   IBV_DEVICE_PORT_ACTIVE_EVENT |
                                   IBV_DEVICE_SRQ_RESIZE;
    a->max_sge                   = TNIC_MAX_SGE;
    a->max_sge_rd                = TNIC_MAX_SGE;
    a->max_cq                    = 65536;
    a->max_cqe                   = TNIC_MAX_CQE;
    a->max_mr                    = 1 << TNIC_MR_INDEX_BITS;
    a->max_pd                    = 65536;
    a->max_qp_rd_atom            = TNIC_MAX_RD_ATOM;
    a->max_ee_rd_atom            = 0;
    a->max_res_rd_atom           = TNIC_MAX_RD_ATOM * 65536;
    a->max_qp_init_rd_atom       = TNIC_MAX_RD_ATOM;
    a->atomic_cap                = IBV_ATOMIC_HCA;
    a->max_ah                    = 65536;
    a->max_srq                   = 65536;
    a->max_srq_wr                = TNIC_MAX_SRQ_WR;
    a->max_srq_sge               = TNIC_MAX_SGE;
    a->max_pkeys                 = 1;
    a->local_ca_ack_delay        = 16;
    a->phys_port_cnt             = 1;
}

int ibv_query_device(struct ibv_context *context,
                     struct ibv_device_attr *device_attr)
{
    tnic_device_attr(tnic_ctx(context)->dev, device_attr);
    return 0;
}

static int tnic_query_device_ex(struct ibv_context *context,
                                const struct ibv_query_device_ex_input *input,
                                struct ibv_device_attr_ex *attr,
                                size_t attr_size)
{
    struct ibv_device_attr_ex ex;

    (void)input;
    memset(&ex, 0, sizeof(ex));
    tnic_device_attr(tnic_ctx(context)->dev, &ex.orig_attr);
    ex.max_dm_size = 0;
    memset(attr, 0, attr_size);
    memcpy(attr, &ex, (attr_size < sizeof(ex)) ? attr_size : sizeof(ex));
    return 0;
}

static void tnic_port_attr(tnic_device_t *dev, struct ibv_port_attr *a)
{
    memset(a, 0, sizeof(*a));
    a->state           = IBV_PORT_ACTIVE;
    a->max_mtu         = IBV_MTU_4096;
    a->active_mtu      = IBV_MTU_4096;
    a->gid_tbl_len     = 1;
    a->port_cap_flags  = IBV_PORT_CM_SUP;
    a->max_msg_sz      = TNIC_MAX_MR_MSG;
    a->bad_pkey_cntr   = 0;
    a->qkey_viol_cntr  = 0;
    a->pkey_tbl_len    = 1;
    a->lid             = dev->lid;
    a->sm_lid          = 1;
    a->lmc             = 0;
    a->max_vl_num      = 1;
    a->sm_sl           = 0;
    a->subnet_timeout  = 18;
    a->init_type_reply = 0;
    a->active_width    = 2;   /* 4x */
    a->active_speed    = 32;  /* EDR */
    a->phys_state      = 5;   /* LinkUp */
    a->link_layer      = IBV_LINK_LAYER_INFINIBAND;
}

static int tnic_query_port_ex(struct ibv_context *context, uint8_t port_num,
                              struct ibv_port_attr *port_attr,
                              size_t port_attr_len)
{
    struct ibv_port_attr a;

    if (port_num != 1) {
        return EINVAL;
    }
    tnic_port_attr(tnic_ctx(context)->dev, &a);
    memset(port_attr, 0, port_attr_len);
    memcpy(port_attr, &a,
           (port_attr_len < sizeof(a)) ? port_attr_len : sizeof(a));
    return 0;
}

/* The exported form takes the pre-1.x layout: the fields before 'flags' */
int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                   struct _compat_ibv_port_attr *port_attr)
{
    return tnic_query_port_ex(context, port_num,
                              (struct ibv_port_attr*)port_attr,
                              offsetof(struct ibv_port_attr, flags));
}

static void tnic_gid(tnic_device_t *dev, union ibv_gid *gid)
{
    gid->global.subnet_prefix = htobe64(0xfe80000000000000ull);
    gid->global.interface_id  = htobe64(dev->guid);
}

int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
                  union ibv_gid *gid)
{
    if ((port_num != 1) || (index != 0)) {
        errno = EINVAL;
        return -1;
    }
    tnic_gid(tnic_ctx(context)->dev, gid);
    return 0;
}

int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
                      uint32_t gid_index, struct ibv_gid_entry *entry,
                      uint32_t flags, size_t entry_size)
{
    struct ibv_gid_entry e;

    if ((port_num != 1) || (gid_index != 0) || (flags != 0)) {
        return EINVAL;
    }
    memset(&e, 0, sizeof(e));
    tnic_gid(tnic_ctx(context)->dev, &e.gid);
    e.gid_index = 0;
    e.port_num  = 1;
    e.gid_type  = IBV_GID_TYPE_IB;
    e.ndev_ifindex = 0;
    memcpy(entry, &e, (entry_size < sizeof(e)) ? entry_size : sizeof(e));
    return 0;
}

ssize_t _ibv_query_gid_table(struct ibv_context *context,
                             struct ibv_gid_entry *entries,
                             size_t max_entries, uint32_t flags,
                             size_t entry_size)
{
    if (max_entries < 1) {
        return -EINVAL;
    }
    if (_ibv_query_gid_ex(context, 1, 0, entries, flags, entry_size) != 0) {
        return -EINVAL;
    }
    return 1;
}

/* rdma-core's private driver.h: 0 = IB/RoCE v1 in its sysfs enum */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
                       unsigned int index, int *type);

int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
                       unsigned int index, int *type)
{
    (void)context;
    if ((port_num != 1) || (index != 0)) {
        errno = EINVAL;
        return -1;
    }
    *type = 0;
    return 0;
}

int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index,
                   __be16 *pkey)
{
    (void)context;
    if ((port_num != 1) || (index != 0)) {
        errno = EINVAL;
        return -1;
    }
    *pkey = htobe16(0xffff);
    return 0;
}

int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num,
                       __be16 pkey)
{
    (void)context;
    if ((port_num == 1) && ((be16toh(pkey) & 0x7fff) == 0x7fff)) {
        return 0;
    }
    return -EINVAL;
}

/* ------------------------------------------------------------------------
 * Async events: records in a pipe, so that async_fd polls like the kernel's
 */

void tnic_async_event(tnic_context_t *ctx, enum ibv_event_type type,
                      void *element)
{
    struct ibv_async_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.event_type = type;
    switch (type) {
    case IBV_EVENT_CQ_ERR:
        ev.element.cq = element;
        break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
        ev.element.srq = element;
        break;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
        ev.element.port_num = 1;
        break;
    case IBV_EVENT_DEVICE_FATAL:
        break;
    default:
        ev.element.qp = element;
        break;
    }
    if (write(ctx->async_wfd, &ev, sizeof(ev)) != sizeof(ev)) {
        TNIC_LOG("async event %d lost: %m", type);
    }
}

int ibv_get_async_event(struct ibv_context *context,
                        struct ibv_async_event *event)
{
    ssize_t n;

    n = read(context->async_fd, event, sizeof(*event));
    if (n != sizeof(*event)) {
        return -1;   /* errno from read: EAGAIN on a non-blocking fd */
    }
    return 0;
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
    (void)event;
}

/* ------------------------------------------------------------------------
 * Contexts
 */

static int tnic_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                          struct ibv_send_wr **bad_wr);
static int tnic_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                          struct ibv_recv_wr **bad_wr);
static int tnic_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
                              struct ibv_recv_wr **bad_wr);
static int tnic_poll_cq(struct ibv_cq *cq, int num_entries,
                        struct ibv_wc *wc);
static int tnic_req_notify_cq(struct ibv_cq *cq, int solicited_only);
static struct ibv_qp *tnic_create_qp_ex(struct ibv_context *context,
                                        struct ibv_qp_init_attr_ex *attr);

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    tnic_context_t *ctx;
    int afd[2], ret;

    tnic_proc_init();
    pthread_mutex_lock(&tnic_proc.lock);
    ret = tnic_fabric_attach();
    if (ret == 0) {
        tnic_engine_thread_start();
    }
    pthread_mutex_unlock(&tnic_proc.lock);
    if (ret != 0) {
        errno = ret;
        return NULL;
    }

    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    if (pipe2(afd, O_CLOEXEC) != 0) {
        free(ctx);
        return NULL;
    }
    /* events must never block the device */
    fcntl(afd[1], F_SETFL, O_NONBLOCK);

    ctx->dev       = (tnic_device_t*)device;
    ctx->async_wfd = afd[1];
    ctx->vctx.sz   = sizeof(ctx->vctx);
    ctx->vctx.query_port      = tnic_query_port_ex;
    ctx->vctx.query_device_ex = tnic_query_device_ex;
    ctx->vctx.create_qp_ex    = tnic_create_qp_ex;
    ctx->vctx.context.device           = device;
    ctx->vctx.context.cmd_fd           = open("/dev/null",
                                              O_RDWR | O_CLOEXEC);
    ctx->vctx.context.async_fd         = afd[0];
    ctx->vctx.context.num_comp_vectors = 1;
    ctx->vctx.context.abi_compat       = __VERBS_ABI_IS_EXTENDED;
    ctx->vctx.context.ops.post_send     = tnic_post_send;
    ctx->vctx.context.ops.post_recv     = tnic_post_recv;
    ctx->vctx.context.ops.post_srq_recv = tnic_post_srq_recv;
    ctx->vctx.context.ops.poll_cq       = tnic_poll_cq;
    ctx->vctx.context.ops.req_notify_cq = tnic_req_notify_cq;
    pthread_mutex_init(&ctx->vctx.context.mutex, NULL);
    return &ctx->vctx.context;
}

int ibv_close_device(struct ibv_context *context)
{
    tnic_context_t *ctx = tnic_ctx(context);

    close(context->async_fd);
    close(ctx->async_wfd);
    if (context->cmd_fd >= 0) {
        close(context->cmd_fd);
    }
    free(ctx);
    return 0;
}

struct ibv_context *ibv_import_device(int cmd_fd)
{
    (void)cmd_fd;
    errno = EOPNOTSUPP;
    return NULL;
}

/* ------------------------------------------------------------------------
 * Protection domains and memory registrations
 */

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    tnic_pd_t *pd = calloc(1, sizeof(*pd));

    if (pd == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    pd->pd.context = context;
    pd->pd.handle  = tnic_rand32();
    pd->ctx        = tnic_ctx(context);
    pthread_mutex_lock(&tnic_proc.lock);
    ++tnic_proc.counters.pds;
    pthread_mutex_unlock(&tnic_proc.lock);
    return &pd->pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
    pthread_mutex_lock(&tnic_proc.lock);
    --tnic_proc.counters.pds;
    pthread_mutex_unlock(&tnic_proc.lock);
    free(pd);
    return 0;
}

struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
    (void)context;
    (void)pd_handle;
    errno = EOPNOTSUPP;
    return NULL;
}

void ibv_unimport_pd(struct ibv_pd *pd)
{
    (void)pd;
}

tnic_mr_t *tnic_mr_lookup(uint32_t key)
{
    uint32_t index = key & ((1u << TNIC_MR_INDEX_BITS) - 1);
    tnic_mr_t *mr;

    if ((index >= tnic_proc.mr_cap) || (tnic_proc.mrs == NULL)) {
        return NULL;
    }
    mr = tnic_proc.mrs[index];
    return ((mr != NULL) && (mr->mr.lkey == key)) ? mr : NULL;
}

static int tnic_mr_index_alloc(tnic_mr_t *mr)
{
    uint32_t i, cap, max = 1u << TNIC_MR_INDEX_BITS;
    tnic_mr_t **mrs;

    for (i = 0; i < tnic_proc.mr_cap; ++i) {
        /* round robin: a key is not reused right after its release */
        uint32_t index = (tnic_proc.mr_next + i) % tnic_proc.mr_cap;
        if ((index != 0) && (tnic_proc.mrs[index] == NULL)) {
            mr->index          = index;
            tnic_proc.mr_next  = index + 1;
            tnic_proc.mrs[index] = mr;
            return 0;
        }
    }
    if (tnic_proc.mr_cap >= max) {
        return ENOMEM;
    }
    cap = tnic_proc.mr_cap ? tnic_proc.mr_cap * 2 : 1024;
    mrs = realloc(tnic_proc.mrs, cap * sizeof(*mrs));
    if (mrs == NULL) {
        return ENOMEM;
    }
    memset(mrs + tnic_proc.mr_cap, 0,
           (cap - tnic_proc.mr_cap) * sizeof(*mrs));
    i                   = tnic_proc.mr_cap ? tnic_proc.mr_cap : 1;
    tnic_proc.mrs       = mrs;
    tnic_proc.mr_cap    = cap;
    mr->index           = i;
    tnic_proc.mr_next   = i + 1;
    tnic_proc.mrs[i]    = mr;
    return 0;
}

static struct ibv_mr *tnic_reg_mr(struct ibv_pd *pd, void *addr,
                                  size_t length, uint64_t iova, int access,
                                  const tnic_mem_ops_t *mem_ops,
                                  void *mem_priv)
{
    tnic_mr_t *mr;
    int ret;

    /* remote write or atomic access needs local write (IB spec 10.6.3.1) */
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE)) {
        errno = EINVAL;
        return NULL;
    }
    if ((length == 0) || (length > TNIC_MAX_MR_SIZE)) {
        errno = EINVAL;
        return NULL;
    }
    if (access & IBV_ACCESS_ON_DEMAND) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    if ((access & IBV_ACCESS_RELAXED_ORDERING) &&
        (tnic_fault.relaxed_order == TNIC_RELAXED_ORDER_REFUSE)) {
        errno = EINVAL; /* as a library or kernel that does not know it */
        return NULL;
    }

    pthread_mutex_lock(&tnic_proc.lock);
    if (tnic_fault.reg_errno != 0) {
        if (tnic_fault.reg_errno_after-- <= 0) {
            ret = tnic_fault.reg_errno;
            goto err_unlock;
        }
    }
    if ((tnic_fault.reg_budget != 0) &&
        (tnic_proc.counters.reg_bytes + length > tnic_fault.reg_budget)) {
        ret = ENOMEM;   /* as a BAR1 or pinned-memory limit answers */
        goto err_unlock;
    }
    mr = calloc(1, sizeof(*mr));
    if (mr == NULL) {
        ret = ENOMEM;
        goto err_unlock;
    }
    ret = tnic_mr_index_alloc(mr);
    if (ret != 0) {
        free(mr);
        goto err_unlock;
    }
    mr->mr.context = pd->context;
    mr->mr.pd      = pd;
    mr->mr.addr    = addr;
    mr->mr.length  = length;
    mr->mr.handle  = mr->index;
    mr->mr.lkey    = (tnic_rand32() << TNIC_MR_INDEX_BITS) | mr->index;
    if ((mr->mr.lkey >> TNIC_MR_INDEX_BITS) == 0) {
        mr->mr.lkey |= 1u << 31;
    }
    mr->mr.rkey    = mr->mr.lkey;
    mr->pd         = (tnic_pd_t*)pd;
    mr->access     = access;
    mr->iova       = iova;
    mr->mem_ops    = mem_ops;
    mr->mem_priv   = mem_priv;
    ++tnic_proc.counters.mrs;
    tnic_proc.counters.reg_bytes += length;
    pthread_mutex_unlock(&tnic_proc.lock);
    return &mr->mr;

err_unlock:
    pthread_mutex_unlock(&tnic_proc.lock);
    errno = ret;
    return NULL;
}

/* A registration of host or device memory: the CUDA shim says which
 * accessor reaches it, as the kernel's pinning (or the peer-memory client)
 * decides for a real NIC */
static struct ibv_mr *tnic_reg_mr_va(struct ibv_pd *pd, void *addr,
                                     size_t length, uint64_t iova, int access)
{
    const tnic_mem_ops_t *ops;
    struct ibv_mr *mr;
    void *priv;
    int ret;

    ret = tnic_cuda_reg_classify(addr, length, &ops, &priv);
    if (ret != 0) {
        errno = ret;
        return NULL;
    }
    mr = tnic_reg_mr(pd, addr, length, iova, access, ops, priv);
    if ((mr == NULL) && (ops->release != NULL)) {
        ret = errno;
        ops->release(priv);
        errno = ret;
    }
    return mr;
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
                          int access)
{
    return tnic_reg_mr_va(pd, addr, length, (uintptr_t)addr, access);
}

struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
                               uint64_t iova, int access)
{
    return tnic_reg_mr_va(pd, addr, length, iova, access);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr,
                                size_t length, uint64_t iova,
                                unsigned int access)
{
    /* rdma-core drops the optional flags (relaxed ordering) where the
     * kernel does not support them; this device takes them, unless told
     * to be such a one (relaxed_order:drop) */
    if (tnic_fault.relaxed_order == TNIC_RELAXED_ORDER_DROP) {
        access &= ~IBV_ACCESS_OPTIONAL_RANGE;
    }
    return tnic_reg_mr_va(pd, addr, length, iova, access);
}

/*
 * DMA-BUF registrations: the fd must be an export of device memory covering
 * offset + length (tnic_cuda.c checks it against the CUDA driver); the
 * `dmabuf:off` knob refuses them as a provider without DMA-BUF support does.
 */
struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
                                 size_t length, uint64_t iova, int fd,
                                 int access)
{
    const tnic_mem_ops_t *ops;
    struct ibv_mr *mr;
    void *priv;
    int ret;

    if (!tnic_fault.dmabuf) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    ret = tnic_dmabuf_resolve(fd, offset, length, iova, &ops, &priv);
    if (ret != 0) {
        errno = ret;
        return NULL;
    }
    mr = tnic_reg_mr(pd, (void*)(uintptr_t)iova, length, iova, access, ops,
                     priv);
    if (mr == NULL) {
        ret = errno;
        ops->release(priv);
        errno = ret;
    }
    return mr;
}

int ibv_dereg_mr(struct ibv_mr *ibmr)
{
    tnic_mr_t *mr = (tnic_mr_t*)ibmr;

    pthread_mutex_lock(&tnic_proc.lock);
    if (tnic_proc.mrs[mr->index] == mr) {
        tnic_proc.mrs[mr->index] = NULL;
    }
    --tnic_proc.counters.mrs;
    tnic_proc.counters.reg_bytes -= mr->mr.length;
    pthread_mutex_unlock(&tnic_proc.lock);
    if (mr->mem_ops->release != NULL) {
        mr->mem_ops->release(mr->mem_priv);
    }
    free(mr);
    return 0;
}

int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
                 size_t length, int access)
{
    (void)mr;
    (void)flags;
    (void)pd;
    (void)addr;
    (void)length;
    (void)access;
    errno = EOPNOTSUPP;
    return IBV_REREG_MR_ERR_INPUT;
}

struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
    (void)pd;
    (void)mr_handle;
    errno = EOPNOTSUPP;
    return NULL;
}

void ibv_unimport_mr(struct ibv_mr *mr)
{
    (void)mr;
}

struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
    (void)context;
    (void)dm_handle;
    errno = EOPNOTSUPP;
    return NULL;
}

void ibv_unimport_dm(struct ibv_dm *dm)
{
    (void)dm;
}

/* ------------------------------------------------------------------------
 * Completion channels and completion queues
 */

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
    tnic_comp_channel_t *ch;
    int fds[2];

    ch = calloc(1, sizeof(*ch));
    if (ch == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    if (pipe2(fds, O_CLOEXEC) != 0) {
        free(ch);
        return NULL;
    }
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    ch->chan.context = context;
    ch->chan.fd      = fds[0];
    ch->chan.refcnt  = 0;
    ch->wfd          = fds[1];
    return &ch->chan;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    tnic_comp_channel_t *ch = (tnic_comp_channel_t*)channel;

    if (channel->refcnt != 0) {
        return EBUSY;
    }
    close(ch->chan.fd);
    close(ch->wfd);
    free(ch);
    return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe,
                             void *cq_context,
                             struct ibv_comp_channel *channel,
                             int comp_vector)
{
    tnic_cq_t *cq;
    unsigned size;

    (void)comp_vector;
    if ((cqe <= 0) || (cqe > TNIC_MAX_CQE)) {
        errno = EINVAL;
        return NULL;
    }
    cq = calloc(1, sizeof(*cq));
    if (cq == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    size = cqe;
    if ((tnic_fault.cq_max != 0) && (size > tnic_fault.cq_max)) {
        size = tnic_fault.cq_max;   /* smaller than it says: overrun */
    }
    cq->ring = calloc(size, sizeof(*cq->ring));
    if (cq->ring == NULL) {
        free(cq);
        errno = ENOMEM;
        return NULL;
    }
    cq->size          = size;
    cq->ctx           = tnic_ctx(context);
    cq->cq.context    = context;
    cq->cq.channel    = channel;
    cq->cq.cq_context = cq_context;
    cq->cq.cqe        = cqe;
    cq->cq.handle     = tnic_rand32();
    pthread_mutex_init(&cq->cq.mutex, NULL);
    pthread_cond_init(&cq->cq.cond, NULL);
    pthread_mutex_lock(&tnic_proc.lock);
    if (channel != NULL) {
        ++channel->refcnt;
    }
    ++tnic_proc.counters.cqs;
    pthread_mutex_unlock(&tnic_proc.lock);
    return &cq->cq;
}

int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
    (void)cq;
    (void)cqe;
    return EOPNOTSUPP;
}

int ibv_destroy_cq(struct ibv_cq *ibcq)
{
    tnic_cq_t *cq = (tnic_cq_t*)ibcq;
    tnic_qp_t *qp;

    pthread_mutex_lock(&tnic_proc.lock);
    for (qp = tnic_proc.qp_list; qp != NULL; qp = qp->next) {
        if ((qp->send_cq == cq) || (qp->recv_cq == cq)) {
            pthread_mutex_unlock(&tnic_proc.lock);
            return EBUSY;
        }
    }
    if (ibcq->channel != NULL) {
        --ibcq->channel->refcnt;
    }
    --tnic_proc.counters.cqs;
    pthread_mutex_unlock(&tnic_proc.lock);
    free(cq->ring);
    free(cq);
    return 0;
}

/* Called with the lock held, by the engine */
void tnic_cq_push(tnic_cq_t *cq, const struct ibv_wc *wc, int solicited)
{
    tnic_comp_channel_t *ch;
    tnic_cqe_t *cqe;

    if (cq->count == cq->size) {
        /* CQ overrun: the CQ is in error, as hardware reports it */
        if (!cq->overrun) {
            cq->overrun = 1;
            tnic_async_event(cq->ctx, IBV_EVENT_CQ_ERR, &cq->cq);
        }
        return;
    }
    cqe             = &cq->ring[(cq->head + cq->count) % cq->size];
    cqe->wc         = *wc;
    cqe->visible_ns = tnic_fault.delay_ns ?
                      tnic_time_ns() + tnic_fault.delay_ns : 0;
    ++cq->count;

    if ((cq->armed == 1) ||
        ((cq->armed == 2) && (solicited || (wc->status != IBV_WC_SUCCESS)))) {
        cq->armed = 0;
        if (cq->cq.channel != NULL) {
            ch = (tnic_comp_channel_t*)cq->cq.channel;
            void *ptr = &cq->cq;
            if (write(ch->wfd, &ptr, sizeof(ptr)) != sizeof(ptr)) {
                TNIC_LOG("completion event lost: %m");
            }
        }
    }
}

static uint64_t tnic_last_timers_ns;

static int tnic_poll_cq(struct ibv_cq *ibcq, int num_entries,
                        struct ibv_wc *wc)
{
    tnic_cq_t *cq = (tnic_cq_t*)ibcq;
    uint64_t now  = 0;
    tnic_cqe_t *cqe;
    int n = 0;

    pthread_mutex_lock(&tnic_proc.lock);
    /* serve the inbox here too: a polling process does not wait for its
     * device thread to be scheduled */
    tnic_engine_progress(64);
    tnic_fabric_polled();
    if (cq->count == 0) {
        now = tnic_time_ns();
        if (now - tnic_last_timers_ns > 100000) {
            tnic_last_timers_ns = now;
            tnic_engine_timers();
        }
    }
    while ((n < num_entries) && (cq->count > 0)) {
        cqe = &cq->ring[cq->head];
        if (cqe->visible_ns != 0) {
            if (now == 0) {
                now = tnic_time_ns();
            }
            if (cqe->visible_ns > now) {
                break;
            }
        }
        wc[n++]  = cqe->wc;
        cq->head = (cq->head + 1) % cq->size;
        --cq->count;
    }
    pthread_mutex_unlock(&tnic_proc.lock);
    return n;
}

static int tnic_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
    tnic_cq_t *cq = (tnic_cq_t*)ibcq;

    pthread_mutex_lock(&tnic_proc.lock);
    cq->armed = solicited_only ? 2 : 1;
    pthread_mutex_unlock(&tnic_proc.lock);
    return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
                     void **cq_context)
{
    void *ptr;

    if (read(channel->fd, &ptr, sizeof(ptr)) != sizeof(ptr)) {
        return -1;
    }
    *cq         = ptr;
    *cq_context = (*cq)->cq_context;
    return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_signal(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}

/* ------------------------------------------------------------------------
 * Shared receive queues
 */

static int tnic_rq_init(tnic_rq_t *rq, unsigned max_wr, unsigned max_sge)
{
    rq->wqes = calloc(max_wr ? max_wr : 1, sizeof(*rq->wqes));
    if (rq->wqes == NULL) {
        return ENOMEM;
    }
    rq->size    = max_wr;
    rq->head    = 0;
    rq->count   = 0;
    rq->max_sge = max_sge;
    return 0;
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd,
                               struct ibv_srq_init_attr *attr)
{
    tnic_srq_t *srq;

    if ((attr->attr.max_wr == 0) || (attr->attr.max_wr > TNIC_MAX_SRQ_WR) ||
        (attr->attr.max_sge > TNIC_MAX_SGE)) {
        errno = EINVAL;
        return NULL;
    }
    srq = calloc(1, sizeof(*srq));
    if ((srq == NULL) ||
        (tnic_rq_init(&srq->rq, attr->attr.max_wr,
                      attr->attr.max_sge ? attr->attr.max_sge : 1) != 0)) {
        free(srq);
        errno = ENOMEM;
        return NULL;
    }
    srq->pd                = (tnic_pd_t*)pd;
    srq->srq.context       = pd->context;
    srq->srq.srq_context   = attr->srq_context;
    srq->srq.pd            = pd;
    srq->srq.handle        = tnic_rand32();
    srq->limit             = attr->attr.srq_limit;
    pthread_mutex_init(&srq->srq.mutex, NULL);
    pthread_cond_init(&srq->srq.cond, NULL);
    pthread_mutex_lock(&tnic_proc.lock);
    ++tnic_proc.counters.srqs;
    pthread_mutex_unlock(&tnic_proc.lock);
    return &srq->srq;
}

int ibv_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr,
                   int attr_mask)
{
    tnic_srq_t *srq = (tnic_srq_t*)ibsrq;

    if (attr_mask & IBV_SRQ_MAX_WR) {
        return EOPNOTSUPP;
    }
    pthread_mutex_lock(&tnic_proc.lock);
    if (attr_mask & IBV_SRQ_LIMIT) {
        if (attr->srq_limit > srq->rq.size) {
            pthread_mutex_unlock(&tnic_proc.lock);
            return EINVAL;
        }
        srq->limit = attr->srq_limit;
    }
    pthread_mutex_unlock(&tnic_proc.lock);
    return 0;
}

int ibv_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
    tnic_srq_t *srq = (tnic_srq_t*)ibsrq;

    attr->max_wr    = srq->rq.size;
    attr->max_sge   = srq->rq.max_sge;
    attr->srq_limit = srq->limit;
    return 0;
}

int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
    tnic_srq_t *srq = (tnic_srq_t*)ibsrq;
    tnic_qp_t *qp;

    pthread_mutex_lock(&tnic_proc.lock);
    for (qp = tnic_proc.qp_list; qp != NULL; qp = qp->next) {
        if (qp->srq == srq) {
            pthread_mutex_unlock(&tnic_proc.lock);
            return EBUSY;
        }
    }
    tnic_proc.counters.wrs -= srq->rq.count;
    --tnic_proc.counters.srqs;
    pthread_mutex_unlock(&tnic_proc.lock);
    free(srq->rq.wqes);
    free(srq);
    return 0;
}

static int tnic_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
                              struct ibv_recv_wr **bad_wr)
{
    tnic_srq_t *srq = (tnic_srq_t*)ibsrq;
    int ret = 0;

    pthread_mutex_lock(&tnic_proc.lock);
    for (; wr != NULL; wr = wr->next) {
        ret = tnic_engine_rq_post(&srq->rq, wr);
        if (ret != 0) {
            *bad_wr = wr;
            break;
        }
    }
    pthread_mutex_unlock(&tnic_proc.lock);
    return ret;
}

/* ------------------------------------------------------------------------
 * Queue pairs
 */

tnic_qp_t *tnic_qp_lookup(uint32_t qpn)
{
    uint32_t index = qpn & 0xffff;

    if (((qpn >> 16) != (uint32_t)tnic_proc.slot) ||
        (tnic_proc.qps == NULL) || (index == 0)) {
        return NULL;
    }
    return tnic_proc.qps[index];
}

static struct ibv_qp *tnic_qp_create(struct ibv_pd *ibpd,
                                     struct ibv_qp_init_attr *init)
{
    tnic_pd_t *pd = (tnic_pd_t*)ibpd;
    struct ibv_qp_cap *cap = &init->cap;
    tnic_qp_t *qp;
    uint32_t i, index;
    int ret;

    if ((init->qp_type != IBV_QPT_RC) && (init->qp_type != IBV_QPT_UD)) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    if ((init->send_cq == NULL) || (init->recv_cq == NULL) ||
        (cap->max_send_wr > TNIC_MAX_QP_WR) ||
        (cap->max_recv_wr > TNIC_MAX_QP_WR) ||
        (cap->max_send_sge > TNIC_MAX_SGE) ||
        (cap->max_recv_sge > TNIC_MAX_SGE) ||
        (cap->max_inline_data > TNIC_MAX_INLINE)) {
        errno = EINVAL;
        return NULL;
    }
    qp = calloc(1, sizeof(*qp));
    if (qp == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    qp->cap = *cap;
    if (qp->cap.max_send_wr == 0) {
        qp->cap.max_send_wr = 1;
    }
    if (qp->cap.max_send_sge == 0) {
        qp->cap.max_send_sge = 1;
    }
    if (qp->cap.max_recv_sge == 0) {
        qp->cap.max_recv_sge = 1;
    }
    qp->sq = calloc(qp->cap.max_send_wr, sizeof(*qp->sq));
    if (qp->sq == NULL) {
        free(qp);
        errno = ENOMEM;
        return NULL;
    }
    if (init->srq == NULL) {
        ret = tnic_rq_init(&qp->rq, qp->cap.max_recv_wr,
                           qp->cap.max_recv_sge);
        if (ret != 0) {
            free(qp->sq);
            free(qp);
            errno = ret;
            return NULL;
        }
    }

    qp->ctx        = pd->ctx;
    qp->pd         = pd;
    qp->send_cq    = (tnic_cq_t*)init->send_cq;
    qp->recv_cq    = (tnic_cq_t*)init->recv_cq;
    qp->srq        = (tnic_srq_t*)init->srq;
    qp->sq_sig_all = init->sq_sig_all;
    qp->qp.context    = ibpd->context;
    qp->qp.qp_context = init->qp_context;
    qp->qp.pd         = ibpd;
    qp->qp.send_cq    = init->send_cq;
    qp->qp.recv_cq    = init->recv_cq;
    qp->qp.srq        = init->srq;
    qp->qp.qp_type    = init->qp_type;
    qp->qp.state      = IBV_QPS_RESET;
    qp->qp.handle     = tnic_rand32();
    qp->attr.qp_state = IBV_QPS_RESET;
    pthread_mutex_init(&qp->qp.mutex, NULL);
    pthread_cond_init(&qp->qp.cond, NULL);

    pthread_mutex_lock(&tnic_proc.lock);
    if (tnic_proc.qps == NULL) {
        tnic_proc.qps = calloc(TNIC_MAX_QPS + 1, sizeof(*tnic_proc.qps));
        /* a random start: QPNs of one run are not those of the last */
        tnic_proc.qp_next = (tnic_rand32() % (TNIC_MAX_QPS - 1)) + 1;
    }
    index = 0;
    for (i = 0; (tnic_proc.qps != NULL) && (i < TNIC_MAX_QPS); ++i) {
        uint32_t cand = ((tnic_proc.qp_next + i - 1) % TNIC_MAX_QPS) + 1;
        if (tnic_proc.qps[cand] == NULL) {
            index = cand;
            break;
        }
    }
    if (index == 0) {
        pthread_mutex_unlock(&tnic_proc.lock);
        free(qp->rq.wqes);
        free(qp->sq);
        free(qp);
        errno = ENOMEM;
        return NULL;
    }
    tnic_proc.qp_next     = (index % TNIC_MAX_QPS) + 1;
    tnic_proc.qps[index]  = qp;
    qp->qp.qp_num         = ((uint32_t)tnic_proc.slot << 16) | index;
    qp->next              = tnic_proc.qp_list;
    tnic_proc.qp_list     = qp;
    ++tnic_proc.counters.qps;
    pthread_mutex_unlock(&tnic_proc.lock);

    *cap = qp->cap;
    return &qp->qp;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
                             struct ibv_qp_init_attr *qp_init_attr)
{
    return tnic_qp_create(pd, qp_init_attr);
}

static struct ibv_qp *tnic_create_qp_ex(struct ibv_context *context,
                                        struct ibv_qp_init_attr_ex *attr)
{
    struct ibv_qp_init_attr init;
    struct ibv_qp *qp;

    (void)context;
    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) ||
        (attr->comp_mask & ~(IBV_QP_INIT_ATTR_PD |
                             IBV_QP_INIT_ATTR_CREATE_FLAGS)) ||
        (attr->create_flags != 0)) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    memset(&init, 0, sizeof(init));
    init.qp_context = attr->qp_context;
    init.send_cq    = attr->send_cq;
    init.recv_cq    = attr->recv_cq;
    init.srq        = attr->srq;
    init.cap        = attr->cap;
    init.qp_type    = attr->qp_type;
    init.sq_sig_all = attr->sq_sig_all;
    qp = tnic_qp_create(attr->pd, &init);
    if (qp != NULL) {
        attr->cap = init.cap;
    }
    return qp;
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
    (void)qp;
    return NULL;
}

/* Required and optional attributes of each legal transition (the IB spec's
 * QP state table, as the kernel's ib_modify_qp_is_ok() has it) */
static int tnic_qp_transition(enum ibv_qp_type type, enum ibv_qp_state cur,
                              enum ibv_qp_state next, int *req_p, int *opt_p)
{
    int rc  = (type == IBV_QPT_RC);
    int req = 0, opt = 0;

    if ((next == IBV_QPS_RESET) || (next == IBV_QPS_ERR)) {
        /* legal from every state */
    } else if ((cur == IBV_QPS_RESET) && (next == IBV_QPS_INIT)) {
        req = IBV_QP_PKEY_INDEX | IBV_QP_PORT |
              (rc ? IBV_QP_ACCESS_FLAGS : IBV_QP_QKEY);
    } else if ((cur == IBV_QPS_INIT) && (next == IBV_QPS_INIT)) {
        opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT |
              (rc ? IBV_QP_ACCESS_FLAGS : IBV_QP_QKEY);
    } else if ((cur == IBV_QPS_INIT) && (next == IBV_QPS_RTR)) {
        if (rc) {
            req = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                  IBV_QP_MIN_RNR_TIMER;
            opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
                  IBV_QP_PKEY_INDEX;
        } else {
            opt = IBV_QP_PKEY_INDEX | IBV_QP_QKEY;
        }
    } else if ((cur == IBV_QPS_RTR) && (next == IBV_QPS_RTS)) {
        if (rc) {
            req = IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
            opt = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
                  IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;
        } else {
            req = IBV_QP_SQ_PSN;
            opt = IBV_QP_CUR_STATE | IBV_QP_QKEY;
        }
    } else if ((cur == IBV_QPS_RTS) && (next == IBV_QPS_RTS)) {
        opt = rc ? (IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH |
                    IBV_QP_PATH_MIG_STATE | IBV_QP_MIN_RNR_TIMER) :
                   (IBV_QP_CUR_STATE | IBV_QP_QKEY);
    } else {
        return 0;
    }
    *req_p = req;
    *opt_p = opt;
    return 1;
}

static void tnic_qp_reset(tnic_qp_t *qp)
{
    uint32_t psn;

    for (psn = qp->sq_head; psn != qp->sq_tail; ++psn) {
        free(qp->sq[psn % qp->cap.max_send_wr].inline_data);
        qp->sq[psn % qp->cap.max_send_wr].inline_data = NULL;
    }
    tnic_proc.counters.wrs -= (qp->sq_tail - qp->sq_head) + qp->rq.count;
    qp->sq_head = qp->sq_tx = qp->sq_tail = 0;
    qp->rq.head = qp->rq.count = 0;
    qp->epoch        = 0;
    qp->rnr_wait     = 0;
    qp->rx_psn       = 0;
    qp->rx_dropping  = 0;
    qp->rx_active    = 0;
    qp->rx_has_wqe   = 0;
    memset(qp->rx_atomics, 0, sizeof(qp->rx_atomics));
}

int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
                  int attr_mask)
{
    tnic_qp_t *qp = (tnic_qp_t*)ibqp;
    enum ibv_qp_state cur, next;
    int req, opt;

    pthread_mutex_lock(&tnic_proc.lock);
    cur  = qp->attr.qp_state;
    if ((attr_mask & IBV_QP_CUR_STATE) && (attr->cur_qp_state != cur)) {
        goto err_inval;
    }
    next = (attr_mask & IBV_QP_STATE) ? attr->qp_state : cur;
    if (!tnic_qp_transition(ibqp->qp_type, cur, next, &req, &opt)) {
        goto err_inval;
    }
    if (((attr_mask & req) != req) ||
        (attr_mask & ~(req | opt | IBV_QP_STATE))) {
        goto err_inval;
    }
    if ((attr_mask & IBV_QP_PORT) && (attr->port_num != 1)) {
        goto err_inval;
    }
    if ((attr_mask & IBV_QP_PKEY_INDEX) && (attr->pkey_index != 0)) {
        goto err_inval;
    }
    if ((attr_mask & IBV_QP_MAX_DEST_RD_ATOMIC) &&
        (attr->max_dest_rd_atomic > TNIC_MAX_RD_ATOM)) {
        goto err_inval;
    }
    if ((attr_mask & IBV_QP_MAX_QP_RD_ATOMIC) &&
        (attr->max_rd_atomic > TNIC_MAX_RD_ATOM)) {
        goto err_inval;
    }
    if ((attr_mask & IBV_QP_PATH_MTU) &&
        ((attr->path_mtu < IBV_MTU_256) || (attr->path_mtu > IBV_MTU_4096))) {
        goto err_inval;
    }
    if ((attr_mask & IBV_QP_RETRY_CNT) && (attr->retry_cnt > 7)) {
        goto err_inval;
    }
    if ((attr_mask & IBV_QP_RNR_RETRY) && (attr->rnr_retry > 7)) {
        goto err_inval;
    }
    if ((attr_mask & IBV_QP_TIMEOUT) && (attr->timeout > 31)) {
        goto err_inval;
    }

    if (attr_mask & IBV_QP_ACCESS_FLAGS) {
        qp->attr.qp_access_flags = attr->qp_access_flags;
    }
    if (attr_mask & IBV_QP_QKEY) {
        qp->attr.qkey = attr->qkey;
    }
    if (attr_mask & IBV_QP_AV) {
        qp->attr.ah_attr = attr->ah_attr;
    }
    if (attr_mask & IBV_QP_PATH_MTU) {
        qp->attr.path_mtu = attr->path_mtu;
    }
    if (attr_mask & IBV_QP_DEST_QPN) {
        qp->attr.dest_qp_num = attr->dest_qp_num;
    }
    if (attr_mask & IBV_QP_RQ_PSN) {
        qp->attr.rq_psn = attr->rq_psn;
    }
    if (attr_mask & IBV_QP_SQ_PSN) {
        qp->attr.sq_psn = attr->sq_psn;
    }
    if (attr_mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
        qp->attr.max_dest_rd_atomic = attr->max_dest_rd_atomic;
    }
    if (attr_mask & IBV_QP_MAX_QP_RD_ATOMIC) {
        qp->attr.max_rd_atomic = attr->max_rd_atomic;
    }
    if (attr_mask & IBV_QP_MIN_RNR_TIMER) {
        qp->attr.min_rnr_timer = attr->min_rnr_timer;
    }
    if (attr_mask & IBV_QP_TIMEOUT) {
        qp->attr.timeout = attr->timeout;
    }
    if (attr_mask & IBV_QP_RETRY_CNT) {
        qp->attr.retry_cnt = attr->retry_cnt;
    }
    if (attr_mask & IBV_QP_RNR_RETRY) {
        qp->attr.rnr_retry = attr->rnr_retry;
    }
    if (attr_mask & IBV_QP_PORT) {
        qp->attr.port_num = attr->port_num;
    }

    if (next != cur) {
        if (next == IBV_QPS_RESET) {
            tnic_qp_reset(qp);
        }
        qp->attr.qp_state = next;
        ibqp->state       = next;
        if (next == IBV_QPS_ERR) {
            tnic_engine_qp_error(qp);
        }
    }
    pthread_mutex_unlock(&tnic_proc.lock);
    return 0;

err_inval:
    pthread_mutex_unlock(&tnic_proc.lock);
    return EINVAL;
}

int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
                 int attr_mask, struct ibv_qp_init_attr *init_attr)
{
    tnic_qp_t *qp = (tnic_qp_t*)ibqp;

    (void)attr_mask;
    pthread_mutex_lock(&tnic_proc.lock);
    *attr              = qp->attr;
    attr->cur_qp_state = qp->attr.qp_state;
    attr->cap          = qp->cap;
    if (init_attr != NULL) {
        memset(init_attr, 0, sizeof(*init_attr));
        init_attr->qp_context = ibqp->qp_context;
        init_attr->send_cq    = ibqp->send_cq;
        init_attr->recv_cq    = ibqp->recv_cq;
        init_attr->srq        = ibqp->srq;
        init_attr->cap        = qp->cap;
        init_attr->qp_type    = ibqp->qp_type;
        init_attr->sq_sig_all = qp->sq_sig_all;
    }
    pthread_mutex_unlock(&tnic_proc.lock);
    return 0;
}

int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op,
                               uint32_t flags)
{
    (void)qp;
    (void)op;
    (void)flags;
    return 0;   /* data is not guaranteed in order before the completion */
}

int ibv_destroy_qp(struct ibv_qp *ibqp)
{
    tnic_qp_t *qp = (tnic_qp_t*)ibqp, **pp;

    pthread_mutex_lock(&tnic_proc.lock);
    tnic_qp_reset(qp);
    tnic_proc.qps[ibqp->qp_num & 0xffff] = NULL;
    for (pp = &tnic_proc.qp_list; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == qp) {
            *pp = qp->next;
            break;
        }
    }
    --tnic_proc.counters.qps;
    pthread_mutex_unlock(&tnic_proc.lock);
    free(qp->rq.wqes);
    free(qp->sq);
    free(qp);
    return 0;
}

static int tnic_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
                          struct ibv_send_wr **bad_wr)
{
    tnic_qp_t *qp = (tnic_qp_t*)ibqp;
    int ret = 0;

    pthread_mutex_lock(&tnic_proc.lock);
    for (; wr != NULL; wr = wr->next) {
        ret = tnic_engine_post_send(qp, wr);
        if (ret != 0) {
            *bad_wr = wr;
            break;
        }
    }
    tnic_engine_sq_kick(qp);
    pthread_mutex_unlock(&tnic_proc.lock);
    return ret;
}

static int tnic_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
                          struct ibv_recv_wr **bad_wr)
{
    tnic_qp_t *qp = (tnic_qp_t*)ibqp;
    struct ibv_wc wc;
    int ret = 0;

    pthread_mutex_lock(&tnic_proc.lock);
    if ((qp->srq != NULL) || (qp->attr.qp_state == IBV_QPS_RESET)) {
        ret     = EINVAL;
        *bad_wr = wr;
        goto out;
    }
    for (; wr != NULL; wr = wr->next) {
        if (qp->attr.qp_state == IBV_QPS_ERR) {
            /* a QP in error flushes what it is given */
            memset(&wc, 0, sizeof(wc));
            wc.wr_id  = wr->wr_id;
            wc.status = IBV_WC_WR_FLUSH_ERR;
            wc.opcode = IBV_WC_RECV;
            wc.qp_num = ibqp->qp_num;
            tnic_cq_push(qp->recv_cq, &wc, 1);
            continue;
        }
        ret = tnic_engine_rq_post(&qp->rq, wr);
        if (ret != 0) {
            *bad_wr = wr;
            break;
        }
    }
out:
    pthread_mutex_unlock(&tnic_proc.lock);
    return ret;
}

/* ------------------------------------------------------------------------
 * Address handles
 */

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
    tnic_ah_t *ah;

    if (attr->port_num != 1) {
        errno = EINVAL;
        return NULL;
    }
    ah = calloc(1, sizeof(*ah));
    if (ah == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    ah->ah.context = pd->context;
    ah->ah.pd      = pd;
    ah->ah.handle  = tnic_rand32();
    ah->attr       = *attr;
    pthread_mutex_lock(&tnic_proc.lock);
    ++tnic_proc.counters.ahs;
    pthread_mutex_unlock(&tnic_proc.lock);
    return &ah->ah;
}

int ibv_destroy_ah(struct ibv_ah *ah)
{
    pthread_mutex_lock(&tnic_proc.lock);
    --tnic_proc.counters.ahs;
    pthread_mutex_unlock(&tnic_proc.lock);
    free(ah);
    return 0;
}

int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num,
                        struct ibv_wc *wc, struct ibv_grh *grh,
                        struct ibv_ah_attr *ah_attr)
{
    (void)context;
    memset(ah_attr, 0, sizeof(*ah_attr));
    ah_attr->dlid          = wc->slid;
    ah_attr->sl            = wc->sl;
    ah_attr->src_path_bits = wc->dlid_path_bits;
    ah_attr->port_num      = port_num;
    if ((wc->wc_flags & IBV_WC_GRH) && (grh != NULL)) {
        ah_attr->is_global      = 1;
        ah_attr->grh.dgid       = grh->sgid;
        ah_attr->grh.hop_limit  = 0xff;
    }
    return 0;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
                                     struct ibv_grh *grh, uint8_t port_num)
{
    struct ibv_ah_attr attr;

    ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr);
    return ibv_create_ah(pd, &attr);
}

/* ------------------------------------------------------------------------
 * What the stand-in does not serve: explicit answers, never missing symbols
 */

int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
                     uint16_t lid)
{
    (void)qp;
    (void)gid;
    (void)lid;
    return EOPNOTSUPP;
}

int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
                     uint16_t lid)
{
    (void)qp;
    (void)gid;
    (void)lid;
    return EOPNOTSUPP;
}

int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    (void)qp;
    (void)ece;
    return EOPNOTSUPP;
}

int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    (void)qp;
    (void)ece;
    return EOPNOTSUPP;
}

int ibv_resolve_eth_l2_from_gid(struct ibv_context *context,
                                struct ibv_ah_attr *attr, uint8_t eth_mac[6],
                                uint16_t *vid)
{
    (void)context;
    (void)attr;
    (void)eth_mac;
    (void)vid;
    return EOPNOTSUPP;
}

int ibv_fork_init(void)
{
    return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
    return IBV_FORK_UNNEEDED;
}

int ibv_dontfork_range(void *base, size_t size)
{
    (void)base;
    (void)size;
    return 0;
}

int ibv_dofork_range(void *base, size_t size)
{
    (void)base;
    (void)size;
    return 0;
}

const char *ibv_get_sysfs_path(void)
{
    return "/sys";
}

int ibv_read_sysfs_file(const char *dir, const char *file, char *buf,
                        size_t size)
{
    char path[512];
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    n = read(fd, buf, size);
    close(fd);
    if ((n > 0) && ((size_t)n < size)) {
        if (buf[n - 1] == '\n') {
            --n;
        }
        buf[n] = '\0';
    }
    return (int)n;
}

void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, void *src);
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, void *src);
void ibv_copy_path_rec_from_kern(void *dst, void *src);
void ibv_copy_path_rec_to_kern(void *dst, void *src);

/* The kernel-ABI copies librdmacm links against: the stand-in has no kernel
 * side, so nothing ever hands them kernel structs */
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, void *src)
{
    (void)src;
    memset(dst, 0, sizeof(*dst));
}

void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, void *src)
{
    (void)src;
    memset(dst, 0, sizeof(*dst));
}

void ibv_copy_path_rec_from_kern(void *dst, void *src)
{
    (void)dst;
    (void)src;
}

void ibv_copy_path_rec_to_kern(void *dst, void *src)
{
    (void)dst;
    (void)src;
}

/* ------------------------------------------------------------------------
 * Strings and rates
 */

const char *ibv_node_type_str(enum ibv_node_type node_type)
{
    static const char *const names[] = {
        [IBV_NODE_CA] = "InfiniBand channel adapter",
        [IBV_NODE_SWITCH] = "InfiniBand switch",
        [IBV_NODE_ROUTER] = "InfiniBand router",
        [IBV_NODE_RNIC] = "iWARP NIC",
        [IBV_NODE_USNIC] = "usNIC",
        [IBV_NODE_USNIC_UDP] = "usNIC UDP",
        [IBV_NODE_UNSPECIFIED] = "unspecified"
    };

    if ((node_type < IBV_NODE_CA) || (node_type > IBV_NODE_UNSPECIFIED)) {
        return "unknown";
    }
    return names[node_type];
}

const char *ibv_port_state_str(enum ibv_port_state port_state)
{
    static const char *const names[] = {
        "PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED", "PORT_ACTIVE",
        "PORT_ACTIVE_DEFER"
    };

    if ((unsigned)port_state > IBV_PORT_ACTIVE_DEFER) {
        return "unknown";
    }
    return names[port_state];
}

const char *ibv_event_type_str(enum ibv_event_type event)
{
    static const char *const names[] = {
        [IBV_EVENT_CQ_ERR]              = "CQ error",
        [IBV_EVENT_QP_FATAL]            = "local work queue catastrophic error",
        [IBV_EVENT_QP_REQ_ERR]          = "invalid request local work queue error",
        [IBV_EVENT_QP_ACCESS_ERR]       = "local access violation work queue error",
        [IBV_EVENT_COMM_EST]            = "communication established",
        [IBV_EVENT_SQ_DRAINED]          = "send queue drained",
        [IBV_EVENT_PATH_MIG]            = "path migrated",
        [IBV_EVENT_PATH_MIG_ERR]        = "path migration request error",
        [IBV_EVENT_DEVICE_FATAL]        = "local catastrophic error",
        [IBV_EVENT_PORT_ACTIVE]         = "port active",
        [IBV_EVENT_PORT_ERR]            = "port error",
        [IBV_EVENT_LID_CHANGE]          = "LID change",
        [IBV_EVENT_PKEY_CHANGE]         = "P_Key change",
        [IBV_EVENT_SM_CHANGE]           = "SM change",
        [IBV_EVENT_SRQ_ERR]             = "SRQ catastrophic error",
        [IBV_EVENT_SRQ_LIMIT_REACHED]   = "SRQ limit reached",
        [IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
        [IBV_EVENT_CLIENT_REREGISTER]   = "client reregistration",
        [IBV_EVENT_GID_CHANGE]          = "GID table change",
        [IBV_EVENT_WQ_FATAL]            = "WQ fatal"
    };

    if (((unsigned)event > IBV_EVENT_WQ_FATAL) || (names[event] == NULL)) {
        return "unknown";
    }
    return names[event];
}

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
    static const char *const names[] = {
        [IBV_WC_SUCCESS]            = "success",
        [IBV_WC_LOC_LEN_ERR]        = "local length error",
        [IBV_WC_LOC_QP_OP_ERR]      = "local QP operation error",
        [IBV_WC_LOC_EEC_OP_ERR]     = "local EE context operation error",
        [IBV_WC_LOC_PROT_ERR]       = "local protection error",
        [IBV_WC_WR_FLUSH_ERR]       = "Work Request Flushed Error",
        [IBV_WC_MW_BIND_ERR]        = "memory management operation error",
        [IBV_WC_BAD_RESP_ERR]       = "bad response error",
        [IBV_WC_LOC_ACCESS_ERR]     = "local access error",
        [IBV_WC_REM_INV_REQ_ERR]    = "remote invalid request error",
        [IBV_WC_REM_ACCESS_ERR]     = "remote access error",
        [IBV_WC_REM_OP_ERR]         = "remote operation error",
        [IBV_WC_RETRY_EXC_ERR]      = "transport retry counter exceeded",
        [IBV_WC_RNR_RETRY_EXC_ERR]  = "RNR retry counter exceeded",
        [IBV_WC_LOC_RDD_VIOL_ERR]   = "local RDD violation error",
        [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
        [IBV_WC_REM_ABORT_ERR]      = "aborted error",
        [IBV_WC_INV_EECN_ERR]       = "invalid EE context number",
        [IBV_WC_INV_EEC_STATE_ERR]  = "invalid EE context state",
        [IBV_WC_FATAL_ERR]          = "fatal error",
        [IBV_WC_RESP_TIMEOUT_ERR]   = "response timeout error",
        [IBV_WC_GENERAL_ERR]        = "general error",
        [IBV_WC_TM_ERR]             = "TM error",
        [IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous"
    };

    if (((unsigned)status > IBV_WC_TM_RNDV_INCOMPLETE) ||
        (names[status] == NULL)) {
        return "unknown";
    }
    return names[status];
}

int ibv_rate_to_mult(enum ibv_rate rate)
{
    switch (rate) {
    case IBV_RATE_2_5_GBPS: return 1;
    case IBV_RATE_5_GBPS:   return 2;
    case IBV_RATE_10_GBPS:  return 4;
    case IBV_RATE_20_GBPS:  return 8;
    case IBV_RATE_30_GBPS:  return 12;
    case IBV_RATE_40_GBPS:  return 16;
    case IBV_RATE_60_GBPS:  return 24;
    case IBV_RATE_80_GBPS:  return 32;
    case IBV_RATE_120_GBPS: return 48;
    default:                return -1;
    }
}

enum ibv_rate mult_to_ibv_rate(int mult)
{
    switch (mult) {
    case 1:  return IBV_RATE_2_5_GBPS;
    case 2:  return IBV_RATE_5_GBPS;
    case 4:  return IBV_RATE_10_GBPS;
    case 8:  return IBV_RATE_20_GBPS;
    case 12: return IBV_RATE_30_GBPS;
    case 16: return IBV_RATE_40_GBPS;
    case 24: return IBV_RATE_60_GBPS;
    case 32: return IBV_RATE_80_GBPS;
    case 48: return IBV_RATE_120_GBPS;
    default: return IBV_RATE_MAX;
    }
}

int ibv_rate_to_mbps(enum ibv_rate rate)
{
    int mult = ibv_rate_to_mult(rate);

    return (mult > 0) ? mult * 2500 : -1;
}

enum ibv_rate mbps_to_ibv_rate(int mbps)
{
    return mult_to_ibv_rate(mbps / 2500);
}

/* ------------------------------------------------------------------------
 * The test API (tnic_test.h)
 */

int tnic_test_present(void)
{
    return 1;
}

const char *tnic_test_marker(void)
{
    return tnic_marker;
}

int tnic_test_mr_access(uint32_t key, int *access_p)
{
    tnic_mr_t *mr;
    int ret = ENOENT;

    pthread_mutex_lock(&tnic_proc.lock);
    mr = tnic_mr_lookup(key);
    if (mr != NULL) {
        *access_p = mr->access;
        ret       = 0;
    }
    pthread_mutex_unlock(&tnic_proc.lock);
    return ret;
}

void tnic_test_counters(tnic_test_counters_t *counters)
{
    pthread_mutex_lock(&tnic_proc.lock);
    counters->pds       = tnic_proc.counters.pds;
    counters->mrs       = tnic_proc.counters.mrs;
    counters->cqs       = tnic_proc.counters.cqs;
    counters->srqs      = tnic_proc.counters.srqs;
    counters->qps       = tnic_proc.counters.qps;
    counters->ahs       = tnic_proc.counters.ahs;
    counters->wrs       = tnic_proc.counters.wrs;
    counters->reg_bytes = tnic_proc.counters.reg_bytes;
    pthread_mutex_unlock(&tnic_proc.lock);
}

int tnic_test_fault_set(const char *spec)
{
    int ret;

    tnic_proc_init();
    pthread_mutex_lock(&tnic_proc.lock);
    ret = tnic_fault_parse(spec);
    pthread_mutex_unlock(&tnic_proc.lock);
    return ret;
}

int tnic_test_inbox_abandon_cell(uint32_t qpn)
{
    int ret;

    pthread_mutex_lock(&tnic_proc.lock);
    ret = tnic_fabric_abandon_cell(qpn >> 16);
    pthread_mutex_unlock(&tnic_proc.lock);
    return ret;
}

void tnic_test_fault_clear(void)
{
    pthread_mutex_lock(&tnic_proc.lock);
    tnic_fault_reset();
    pthread_mutex_unlock(&tnic_proc.lock);
}
