/*
 * bounce_attacker: a malicious peer of the bounce lane (issue 13, "Trust").
 *
 *   bounce_attacker TARGET_DEV ATTACKER_DEV     e.g. rxe0:1 rxe1:1
 *
 * A forked TARGET is an ordinary UCT rc_gdr user: it registers keyless
 * ("GPU", bounce lane) memory with guard bytes on both sides of each
 * registration, packs a remote key, and progresses while it answers
 * commands on a pipe (state, free, its own transfers). The ATTACKER, this
 * process, connects to the target's endpoint like an rc_gdr peer over a
 * raw verbs RC queue pair of its own (rc_gdr's address formats, its QP
 * numbers and PSN 0) and sends bounce-lane messages crafted by hand: puts
 * and gets out of range, wrong and guessed tokens, lengths past the message,
 * truncated, duplicated and out-of-order messages, a flood of requests whose
 * replies it never takes (no credits returned), a flood of credits, a get
 * whose memory is freed while it is served, requests after deregistration;
 * as a target of the target's own transfers it answers a get twice and
 * leaves a put and a get unanswered.
 *
 * PASS = each is refused or fails with a counted error (the target's
 * interface counters), no byte outside the registered ones changes (guards
 * and untouched registrations hashed by the target), the target's queues
 * stay bounded (queued-units high-water mark, RSS), and afterwards an honest
 * rc_gdr peer (a UCT node of this process) still moves bytes correctly.
 *
 * Run where GPU memory has no NIC key (emulated GPU, REG_METHODS=dmabuf on
 * rxe): the program checks that it is so. Prints PASS/FAIL lines and
 * "N passed, N failed".
 */

#define _GNU_SOURCE

#include <uct/ib_gdr/rc_gdr_addr.h>
#include <uct/ib_gdr/rc_gdr_cuda.h>
#include "uct_test_util.h"

#include <infiniband/verbs.h>
#include <ucs/debug/log_def.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>


#define GUARD        4096u            /* guard bytes on each side */
#define R1_LEN       1000u            /* exact bytes, not a page multiple */
#define R2_LEN       (4u << 20)       /* served get, freed meanwhile */
#define R3_LEN       4096u            /* never given to the attacker */
#define GUARD_BYTE   0xa5
#define SECRET_BYTE  0xc3             /* what the memory holds after reuse */
#define SEG          8192u            /* UCX_RC_GDR_SEG_SIZE default */
#define HDR_LEN      40u
#define MSG_MAX      (SEG - HDR_LEN)
#define SQ_LEN       256
#define RQ_LEN       512
#define WAIT_S       20.0
#define LATE_S       1.5

/* rc_gdr's immediate data and bounce messages (rc_gdr_ep.h,
 * rc_gdr_bounce_int.h), written down as an attacker would */
#define IMM_INTERNAL     (1u << 6)
#define IMM_CREDIT_ONLY  (1u << 7)
#define IMM_CREDITS_SHIFT 8
#define MSG_PUT_DATA     1
#define MSG_GET_REQ      2
#define MSG_GET_DATA     3
#define MSG_ACK          4
#define FLAG_LAST        1
#define NO_ACK           1            /* wait_ack: nothing came */

typedef struct __attribute__((packed)) {
    uint8_t  type;
    uint8_t  flags;
    uint16_t reserved;
    int32_t  status;
    uint32_t xfer_id;
    uint32_t chunk;
    uint32_t token;       /* the rkey's key bits */
    uint32_t token_hi;    /* and its token_hi */
    uint64_t addr;
    uint64_t length;
} bhdr_t;

typedef char bhdr_size_check[(sizeof(bhdr_t) == HDR_LEN) ? 1 : -1];


/* The target's interface counters (rc_gdr_iface.h), as many as it has */
typedef struct {
    uint64_t size, tx_wrs, rx_msgs, credit_grants, flush_reads,
             bounce_xfers, bounce_failed, bounce_staged_bytes, bounce_msgs,
             bounce_refused, bounce_bufs_in_use, bounce_bufs_max,
             bounce_malformed, bounce_unexpected, bounce_revoked,
             bounce_acks_dropped, bounce_timeouts, unknown_qp_msgs,
             credit_overflows, bounce_queued_max, tx_stalls,
             bounce_serve_timeouts, rx_no_imm;
} stats_t;

#define STATS_HAS(_s, _field) \
    ((_s)->size >= offsetof(stats_t, _field) + sizeof(uint64_t))


/* ------------------------------------------------------ target side -- */

enum {
    CMD_STATE  = 'S', /* reply: state */
    CMD_FREE2  = 'F', /* dereg + free R2, the same memory again, secret */
    CMD_GET    = 'G', /* get_bcopy from the attacker's keyless memory */
    CMD_PUT    = 'P', /* put_bcopy to it */
    CMD_HONEST = 'H', /* connect the second endpoint to an honest peer */
    CMD_LATE   = 'L', /* "ready", no progress for LATE_S, the attacker's
                         endpoint destroyed, then progress: what arrived
                         meanwhile is for a QP of no endpoint */
    CMD_QUIT   = 'Q'
};

typedef struct {
    uct_test_wire_t wire;      /* device + attacker endpoint */
    uint8_t         ep_h[UCT_TEST_ADDR_MAX]; /* the honest peer's endpoint */
    uint8_t         r1_rkey[UCT_TEST_ADDR_MAX];
    uint8_t         r2_rkey[UCT_TEST_ADDR_MAX];
    uint64_t        r1, r2, r3;
} target_info_t;

typedef struct {
    int32_t  status;           /* CMD_GET / CMD_PUT: the operation's, or
                                  NO_ACK when it did not complete */
    int32_t  guards_ok;
    int32_t  data_ok;          /* CMD_GET: every byte as sent */
    int32_t  ep_error;
    uint64_t r1_hash, r2_hash, r3_hash;
    uint64_t rss_kb;
    uint64_t log_lines;        /* said at warning level or above */
    stats_t  stats;
} target_state_t;

typedef struct {
    uint8_t  cmd;
    uint64_t addr;             /* CMD_GET / CMD_PUT: remote address */
    uint64_t length;
    uint8_t  rkey[UCT_TEST_ADDR_MAX]; /* packed, keyless */
    uct_test_wire_t honest;    /* CMD_HONEST */
} target_cmd_t;

typedef struct {
    char   *base;              /* allocation: guard, bytes, guard */
    size_t len;
    uct_mem_h memh;
    void   *rkey;
} tregion_t;


static unsigned char pattern(unsigned seed, size_t i)
{
    return (unsigned char)(seed * 29 + i * 7 + (i >> 8) + 1);
}


static uint64_t fnv(const unsigned char *p, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    size_t i;

    for (i = 0; i < len; ++i) {
        h = (h ^ p[i]) * 1099511628211ull;
    }
    return h;
}


static uint64_t pattern_hash(unsigned seed, size_t len)
{
    unsigned char *tmp = malloc(len);
    uint64_t h;
    size_t i;

    for (i = 0; i < len; ++i) {
        tmp[i] = pattern(seed, i);
    }
    h = fnv(tmp, len);
    free(tmp);
    return h;
}


static void tregion_fill(tregion_t *r, unsigned seed, int guard_byte)
{
    size_t total       = r->len + 2 * GUARD;
    unsigned char *tmp = malloc(total);
    size_t i;

    memset(tmp, guard_byte, total);
    for (i = 0; i < r->len; ++i) {
        tmp[GUARD + i] = pattern(seed, i);
    }
    uct_rc_gdr_cuda_memcpy_htod(r->base, tmp, total);
    free(tmp);
}


static void tregion_init(uct_test_node_t *node, tregion_t *r, size_t len,
                         unsigned seed)
{
    void *ptr;

    if (uct_rc_gdr_cuda_mem_alloc(len + 2 * GUARD, &ptr) != UCS_OK) {
        uct_test_die("cuMemAlloc", UCS_ERR_NO_MEMORY);
    }
    r->base = ptr;
    r->len  = len;
    tregion_fill(r, seed, GUARD_BYTE);
    uct_test_mem_reg(node, r->base + GUARD, len, &r->memh, &r->rkey);
}


/* The bytes hashed, the guards checked */
static uint64_t tregion_check(const tregion_t *r, int *guards_ok)
{
    size_t total       = r->len + 2 * GUARD;
    unsigned char *tmp = malloc(total);
    uint64_t h;
    size_t i;

    uct_rc_gdr_cuda_memcpy_dtoh(tmp, r->base, total);
    for (i = 0; i < GUARD; ++i) {
        if ((tmp[i] != GUARD_BYTE) || (tmp[GUARD + r->len + i] != GUARD_BYTE)) {
            *guards_ok = 0;
            break;
        }
    }
    h = fnv(tmp + GUARD, r->len);
    free(tmp);
    return h;
}


static uint64_t rss_kb(void)
{
    unsigned long size = 0, rss = 0;
    FILE *f            = fopen("/proc/self/statm", "r");

    if (f != NULL) {
        if (fscanf(f, "%lu %lu", &size, &rss) != 2) {
            rss = 0;
        }
        fclose(f);
    }
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}


/* The target's log lines at warning level or above, still printed: what a
 * flood of refused requests must not make grow with it */
static uint64_t target_log_lines;

static ucs_log_func_rc_t
target_log_count(const char *file, unsigned line, const char *function,
                 ucs_log_level_t level,
                 const ucs_log_component_config_t *comp_conf,
                 const char *message, va_list ap)
{
    if (level <= UCS_LOG_LEVEL_WARN) {
        ++target_log_lines;
    }
    return UCS_LOG_FUNC_RC_CONTINUE;
}


static void target_stats(uct_iface_h iface, stats_t *stats)
{
    typedef ucs_status_t (*query_t)(uct_iface_h, stats_t*);
    query_t query = (query_t)uct_test_module_sym(
                                   "uct_rc_gdr_iface_stats_query");

    memset(stats, 0, sizeof(*stats));
    stats->size = sizeof(*stats);
    if ((query == NULL) || (query(iface, stats) != UCS_OK)) {
        stats->size = 0;
    }
}


typedef struct {
    uct_completion_t comp;
    int              done;
    ucs_status_t     status;
} tcomp_t;


static void tcomp_cb(uct_completion_t *self)
{
    tcomp_t *c = ucs_container_of(self, tcomp_t, comp);

    c->done   = 1;
    c->status = self->status;
}


typedef struct {
    unsigned char *dst;
    size_t        length;
} unpack_arg_t;


static void target_unpack(void *arg, const void *data, size_t length)
{
    unpack_arg_t *u = arg;

    memcpy(u->dst, data, (length < u->length) ? length : u->length);
}


/* The target's own transfer to the attacker's keyless memory: its status,
 * or NO_ACK when it did not end within WAIT_S */
static void target_op(uct_test_node_t *node, uct_component_h component,
                      const target_cmd_t *cmd, target_state_t *st)
{
    uct_test_node_t *nodes[1] = {node};
    unsigned char *dst        = malloc(cmd->length);
    uct_rkey_bundle_t rkey;
    unpack_arg_t unpack;
    ucs_status_t status;
    double deadline;
    uct_iov_t iov;
    tcomp_t c;
    size_t i;

    memset(dst, 0xee, cmd->length);
    if (uct_rkey_unpack(component, cmd->rkey, &rkey) != UCS_OK) {
        uct_test_die("uct_rkey_unpack of the attacker's key", UCS_ERR_IO_ERROR);
    }

    memset(&c, 0, sizeof(c));
    c.comp.func  = tcomp_cb;
    c.comp.count = 1;
    deadline     = uct_test_now() + WAIT_S;
    if (cmd->cmd == CMD_GET) {
        unpack.dst    = dst;
        unpack.length = cmd->length;
        do {
            status = uct_ep_get_bcopy(node->ep, target_unpack, &unpack,
                                      cmd->length, cmd->addr, rkey.rkey,
                                      &c.comp);
            uct_test_progress(nodes, 1);
        } while ((status == UCS_ERR_NO_RESOURCE) &&
                 (uct_test_now() < deadline));
    } else {
        memset(dst, 0x42, cmd->length);
        uct_test_iov_init(&iov, dst, cmd->length, UCT_MEM_HANDLE_NULL);
        do {
            status = uct_ep_put_zcopy(node->ep, &iov, 1, cmd->addr,
                                      rkey.rkey, &c.comp);
            uct_test_progress(nodes, 1);
        } while ((status == UCS_ERR_NO_RESOURCE) &&
                 (uct_test_now() < deadline));
    }

    if (status == UCS_INPROGRESS) {
        while (!c.done && (uct_test_now() < deadline)) {
            uct_test_progress(nodes, 1);
        }
        st->status = c.done ? c.status : NO_ACK;
    } else {
        st->status = status;
    }

    st->data_ok = 1;
    for (i = 0; i < cmd->length; ++i) {
        if (dst[i] != pattern(9, i)) {
            st->data_ok = 0;
            break;
        }
    }
    uct_rkey_release(component, &rkey);
    free(dst);
}


static void target_run(const char *dev, int cmd_fd, int reply_fd)
{
    uct_test_node_t node, *nodes[1] = {&node};
    tregion_t r1, r2, r3;
    target_info_t info;
    target_cmd_t cmd;
    target_state_t st;
    uct_ep_params_t ep_params;
    uct_ep_h ep_h;
    struct pollfd pfd;
    uct_rc_gdr_cuda_ctx_h ctx;
    uct_test_md_stats_t md_stats;
    void *ptr;
    int running = 1;

    if ((uct_rc_gdr_cuda_init() != UCS_OK) ||
        (uct_rc_gdr_cuda_ctx_activate(0, &ctx) != UCS_OK)) {
        uct_test_die("CUDA driver (run with the emulated GPU)",
                     UCS_ERR_NO_DEVICE);
    }

    ucs_log_push_handler(target_log_count);
    uct_test_node_open(&node, dev, 0);
    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    ep_params.iface      = node.iface;
    if (uct_ep_create(&ep_params, &ep_h) != UCS_OK) {
        uct_test_die("uct_ep_create", UCS_ERR_IO_ERROR);
    }

    /* R1 and R3 one after the other: with counted tokens R3's is R1's + 1 */
    tregion_init(&node, &r1, R1_LEN, 1);
    tregion_init(&node, &r3, R3_LEN, 3);
    tregion_init(&node, &r2, R2_LEN, 2);
    md_stats = uct_test_md_stats(node.md);

    memset(&info, 0, sizeof(info));
    uct_test_node_wire(&node, &info.wire);
    uct_ep_get_address(ep_h, (uct_ep_addr_t*)info.ep_h);
    memcpy(info.r1_rkey, r1.rkey, node.md_attr.rkey_packed_size);
    memcpy(info.r2_rkey, r2.rkey, node.md_attr.rkey_packed_size);
    info.r1 = (uintptr_t)r1.base + GUARD;
    info.r2 = (uintptr_t)r2.base + GUARD;
    info.r3 = (uintptr_t)r3.base + GUARD;
    /* keyless registrations, or the test means nothing */
    info.wire.buf = md_stats.bounce_regs;
    uct_test_write_all(reply_fd, &info, sizeof(info));

    uct_test_read_all(cmd_fd, &info.wire, sizeof(info.wire));
    uct_test_node_connect(&node, &info.wire);

    pfd.fd     = cmd_fd;
    pfd.events = POLLIN;
    while (running) {
        uct_test_progress(nodes, 1);
        if (poll(&pfd, 1, 0) <= 0) {
            continue;
        }

        uct_test_read_all(cmd_fd, &cmd, sizeof(cmd));
        memset(&st, 0, sizeof(st));
        switch (cmd.cmd) {
        case CMD_FREE2:
            /* deregistered and freed while served; the next allocation of
             * the size gets the same memory (the stand-in driver reuses
             * it), holding another owner's bytes */
            uct_md_mem_dereg(node.md, r2.memh);
            uct_rc_gdr_cuda_mem_free(r2.base);
            if ((uct_rc_gdr_cuda_mem_alloc(R2_LEN + 2 * GUARD, &ptr) !=
                 UCS_OK) || (ptr != r2.base)) {
                fprintf(stderr, "target: memory not reused (%p, %p)\n", ptr,
                        r2.base);
            }
            r2.base = ptr;
            {
                unsigned char *tmp = malloc(R2_LEN + 2 * GUARD);

                memset(tmp, SECRET_BYTE, R2_LEN + 2 * GUARD);
                memset(tmp, GUARD_BYTE, GUARD);
                memset(tmp + GUARD + R2_LEN, GUARD_BYTE, GUARD);
                uct_rc_gdr_cuda_memcpy_htod(r2.base, tmp, R2_LEN + 2 * GUARD);
                free(tmp);
            }
            break;
        case CMD_GET:
        case CMD_PUT:
            target_op(&node, node.component, &cmd, &st);
            break;
        case CMD_HONEST:
            if (uct_ep_connect_to_ep(ep_h,
                                     (const uct_device_addr_t*)cmd.honest.dev,
                                     (const uct_ep_addr_t*)cmd.honest.ep) !=
                UCS_OK) {
                uct_test_die("connect to the honest peer", UCS_ERR_IO_ERROR);
            }
            break;
        case CMD_LATE:
            {
                uint8_t ready = 1;
                double end;

                uct_test_write_all(reply_fd, &ready, sizeof(ready));
                usleep(LATE_S * 1e6);
                uct_ep_destroy(node.ep);
                node.ep = NULL;
                end     = uct_test_now() + 1.0;
                while (uct_test_now() < end) {
                    uct_test_progress(nodes, 1);
                }
            }
            break;
        case CMD_QUIT:
            running = 0;
            break;
        default:
            break;
        }

        st.guards_ok = 1;
        st.r1_hash   = tregion_check(&r1, &st.guards_ok);
        st.r2_hash   = tregion_check(&r2, &st.guards_ok);
        st.r3_hash   = tregion_check(&r3, &st.guards_ok);
        st.rss_kb    = rss_kb();
        st.log_lines = target_log_lines;
        st.ep_error  = node.ep_error;
        target_stats(node.iface, &st.stats);
        uct_test_write_all(reply_fd, &st, sizeof(st));
    }

    _exit(0);
}


/* ---------------------------------------------------- attacker side -- */

typedef struct {
    struct ibv_context *ctx;
    struct ibv_pd      *pd;
    struct ibv_cq      *scq, *rcq;
    struct ibv_qp      *qp;
    struct ibv_mr      *smr, *rmr;
    char               *sbuf, *rbuf;
    unsigned           sq_posted;  /* sends posted, one completion each */
    uint64_t           sends;
    unsigned           owed;       /* credits we owe the target */
    int                withhold;   /* do not return credits */
    /* what the target sent */
    int32_t            ack_status[4096];  /* by xfer id - ID_BASE */
    uint8_t            ack_seen[4096];
    unsigned           acks;
    bhdr_t             get_req;    /* the target's last GET_REQ */
    int                get_req_seen;
    uint64_t           get_data_bytes;
    uint64_t           secret_bytes;  /* GET_DATA bytes not R2's */
    unsigned           put_data_seen;
} attacker_t;

#define ID_BASE 100000u

static int cmd_fd, reply_fd;
static pid_t target_pid;


static void die_errno(const char *what)
{
    fprintf(stderr, "bounce_attacker: %s: %s\n", what, strerror(errno));
    if (target_pid > 0) {
        kill(target_pid, SIGKILL);
    }
    exit(UCT_TEST_EXIT_SETUP);
}


static void att_post_recv(attacker_t *a, unsigned slot)
{
    struct ibv_recv_wr wr, *bad;
    struct ibv_sge sge;

    sge.addr   = (uintptr_t)(a->rbuf + (size_t)slot * SEG);
    sge.length = SEG;
    sge.lkey   = a->rmr->lkey;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id   = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(a->qp, &wr, &bad) != 0) {
        die_errno("ibv_post_recv");
    }
}


static void att_handle_recv(attacker_t *a, struct ibv_wc *wc)
{
    const char *data = a->rbuf + wc->wr_id * SEG;
    uint32_t imm     = ntohl(wc->imm_data);
    bhdr_t hdr;
    uint64_t i;

    if (wc->status != IBV_WC_SUCCESS) {
        fprintf(stderr, "attacker: receive error %s\n",
                ibv_wc_status_str(wc->status));
        return;
    }

    if (!(imm & IMM_CREDIT_ONLY)) {
        ++a->owed;
    }
    if (!(imm & IMM_INTERNAL) || (wc->byte_len < HDR_LEN)) {
        goto out;
    }

    memcpy(&hdr, data, sizeof(hdr));
    switch (hdr.type) {
    case MSG_ACK:
        if ((hdr.xfer_id >= ID_BASE) && (hdr.xfer_id < ID_BASE + 4096)) {
            a->ack_seen[hdr.xfer_id - ID_BASE]   = 1;
            a->ack_status[hdr.xfer_id - ID_BASE] = hdr.status;
        }
        ++a->acks;
        break;
    case MSG_GET_REQ:
        a->get_req      = hdr;
        a->get_req_seen = 1;
        break;
    case MSG_GET_DATA:
        a->get_data_bytes += hdr.length;
        /* the get asked for R2, written with pattern 2: any other byte
         * is not what was registered */
        for (i = 0; (i < hdr.length) && (HDR_LEN + i < wc->byte_len); ++i) {
            a->secret_bytes += ((unsigned char)data[HDR_LEN + i] !=
                                pattern(2, hdr.addr + i));
        }
        break;
    case MSG_PUT_DATA:
        ++a->put_data_seen;
        break;
    default:
        break;
    }

out:
    att_post_recv(a, wc->wr_id);
}


/* Send and receive completions; returns how many */
static int att_poll(attacker_t *a)
{
    struct ibv_wc wcs[32];
    int n, i, count = 0;

    n = ibv_poll_cq(a->rcq, 32, wcs);
    for (i = 0; i < n; ++i) {
        att_handle_recv(a, &wcs[i]);
    }
    count += (n > 0) ? n : 0;

    n = ibv_poll_cq(a->scq, 32, wcs);
    for (i = 0; i < n; ++i) {
        if (wcs[i].status != IBV_WC_SUCCESS) {
            fprintf(stderr, "attacker: send error %s\n",
                    ibv_wc_status_str(wcs[i].status));
            die_errno("send completion");
        }
        --a->sq_posted;
    }
    count += (n > 0) ? n : 0;
    return count;
}


/* One SEND (without immediate data: what the protocol never sends) or
 * SEND_WITH_IMM of `len` bytes from slot data (header + payload) */
static void att_post_send(attacker_t *a, enum ibv_wr_opcode opcode,
                          uint32_t imm, const void *msg, size_t len)
{
    struct ibv_send_wr wr, *bad;
    struct ibv_sge sge;
    char *slot;

    while (a->sq_posted >= SQ_LEN - 1) {
        att_poll(a);
    }

    slot = a->sbuf + (a->sends % SQ_LEN) * SEG;
    memcpy(slot, msg, len);
    sge.addr   = (uintptr_t)slot;
    sge.length = len;
    sge.lkey   = a->smr->lkey;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id      = a->sends++;
    wr.sg_list    = &sge;
    wr.num_sge    = (len > 0) ? 1 : 0;
    wr.opcode     = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data   = htonl(imm);
    if (ibv_post_send(a->qp, &wr, &bad) != 0) {
        die_errno("ibv_post_send");
    }
    ++a->sq_posted;
}


/* A message of the protocol: its flags and the credits owed in the
 * immediate data */
static void att_send_raw(attacker_t *a, uint32_t flags, const void *msg,
                         size_t len)
{
    unsigned credits = 0;

    if (!a->withhold && !(flags & IMM_CREDIT_ONLY)) {
        credits  = (a->owed > 0xffff) ? 0xffff : a->owed;
        a->owed -= credits;
    }
    if (flags & IMM_CREDIT_ONLY) {
        credits = flags >> IMM_CREDITS_SHIFT;
        flags  &= 0xff;
    }

    att_post_send(a, IBV_WR_SEND_WITH_IMM,
                  flags | (credits << IMM_CREDITS_SHIFT), msg, len);
}


static void att_send(attacker_t *a, const bhdr_t *hdr, const void *payload,
                     size_t payload_len)
{
    char msg[SEG];

    memcpy(msg, hdr, HDR_LEN);
    if (payload_len > 0) {
        memcpy(msg + HDR_LEN, payload, payload_len);
    }
    att_send_raw(a, IMM_INTERNAL, msg, HDR_LEN + payload_len);
}


/* Returns the credits we owe, as an honest peer does */
static void att_return_credits(attacker_t *a)
{
    unsigned n;

    while (a->owed > 0) {
        n        = (a->owed > 0xffff) ? 0xffff : a->owed;
        a->owed -= n;
        att_send_raw(a, IMM_CREDIT_ONLY | (n << IMM_CREDITS_SHIFT), NULL, 0);
    }
}


static void att_drain(attacker_t *a, double seconds)
{
    double end = uct_test_now() + seconds;

    while (uct_test_now() < end) {
        att_poll(a);
    }
}


static int32_t att_wait_ack(attacker_t *a, uint32_t id, double seconds)
{
    double end = uct_test_now() + seconds;

    while (!a->ack_seen[id - ID_BASE] && (uct_test_now() < end)) {
        att_poll(a);
        if (!a->withhold && (a->owed >= 32)) {
            att_return_credits(a); /* an answer may need them */
        }
    }
    return a->ack_seen[id - ID_BASE] ? a->ack_status[id - ID_BASE] : NO_ACK;
}


static uint32_t next_id = ID_BASE;

static uint32_t att_id(attacker_t *a)
{
    uint32_t id = next_id++;

    a->ack_seen[id - ID_BASE] = 0;
    return id;
}


/* A one-message put (LAST), sent; its transfer id */
static uint32_t att_send_put(attacker_t *a, uint64_t token, uint64_t addr,
                             const void *data, size_t len)
{
    bhdr_t hdr;

    memset(&hdr, 0, sizeof(hdr));
    hdr.type     = MSG_PUT_DATA;
    hdr.flags    = FLAG_LAST;
    hdr.xfer_id  = att_id(a);
    hdr.token    = (uint32_t)token;
    hdr.token_hi = (uint32_t)(token >> 32);
    hdr.addr     = addr;
    hdr.length   = len;
    att_send(a, &hdr, data, len);
    return hdr.xfer_id;
}


/* A one-message put; the ACK's status or NO_ACK */
static int32_t att_put(attacker_t *a, uint64_t token, uint64_t addr,
                       const void *data, size_t len, double wait)
{
    return att_wait_ack(a, att_send_put(a, token, addr, data, len), wait);
}


static int32_t att_get(attacker_t *a, uint64_t token, uint64_t addr,
                       uint64_t len, double wait)
{
    bhdr_t hdr;

    memset(&hdr, 0, sizeof(hdr));
    hdr.type    = MSG_GET_REQ;
    hdr.xfer_id = att_id(a);
    hdr.token    = (uint32_t)token;
    hdr.token_hi = (uint32_t)(token >> 32);
    hdr.addr    = addr;
    hdr.length  = len;
    att_send(a, &hdr, NULL, 0);
    return att_wait_ack(a, hdr.xfer_id, wait);
}


/* Sends a command and waits for the state, taking messages meanwhile */
static void target_cmd(attacker_t *a, const target_cmd_t *cmd,
                       target_state_t *st)
{
    struct pollfd pfd = {.fd = reply_fd, .events = POLLIN};

    uct_test_write_all(cmd_fd, cmd, sizeof(*cmd));
    for (;;) {
        if (a != NULL) {
            att_poll(a);
        }
        if (poll(&pfd, 1, (a != NULL) ? 0 : 100) > 0) {
            break;
        }
    }
    uct_test_read_all(reply_fd, st, sizeof(*st));
}


static void target_state(attacker_t *a, target_state_t *st)
{
    target_cmd_t cmd;

    memset(&cmd, 0, sizeof(cmd));
    cmd.cmd = CMD_STATE;
    target_cmd(a, &cmd, st);
}


static void att_open(attacker_t *a, const char *dev, const uint8_t *target_dev,
                     const uint8_t *target_ep, uct_test_wire_t *wire)
{
    struct ibv_device **list;
    struct ibv_qp_init_attr init;
    struct ibv_port_attr port;
    struct ibv_qp_attr attr;
    uct_rc_gdr_dev_addr_t my_dev, peer_dev;
    uct_rc_gdr_ep_addr_t my_ep, peer_ep;
    char name[64];
    union ibv_gid gid;
    int i, n, port_num = 1;
    const char *colon;
    unsigned slot;

    colon = strchr(dev, ':');
    snprintf(name, sizeof(name), "%.*s",
             (int)(colon ? (size_t)(colon - dev) : strlen(dev)), dev);
    if (colon != NULL) {
        port_num = atoi(colon + 1);
    }

    list = ibv_get_device_list(&n);
    for (i = 0; (list != NULL) && (i < n); ++i) {
        if (!strcmp(ibv_get_device_name(list[i]), name)) {
            a->ctx = ibv_open_device(list[i]);
        }
    }
    ibv_free_device_list(list);
    if (a->ctx == NULL) {
        die_errno("ibv_open_device");
    }

    a->pd   = ibv_alloc_pd(a->ctx);
    a->scq  = ibv_create_cq(a->ctx, SQ_LEN * 2, NULL, NULL, 0);
    a->rcq  = ibv_create_cq(a->ctx, RQ_LEN * 2, NULL, NULL, 0);
    a->sbuf = calloc(SQ_LEN, SEG);
    a->rbuf = calloc(RQ_LEN, SEG);
    if ((a->pd == NULL) || (a->scq == NULL) || (a->rcq == NULL)) {
        die_errno("verbs resources");
    }
    a->smr = ibv_reg_mr(a->pd, a->sbuf, (size_t)SQ_LEN * SEG,
                        IBV_ACCESS_LOCAL_WRITE);
    a->rmr = ibv_reg_mr(a->pd, a->rbuf, (size_t)RQ_LEN * SEG,
                        IBV_ACCESS_LOCAL_WRITE);
    if ((a->smr == NULL) || (a->rmr == NULL)) {
        die_errno("ibv_reg_mr");
    }

    memset(&init, 0, sizeof(init));
    init.send_cq          = a->scq;
    init.recv_cq          = a->rcq;
    init.qp_type          = IBV_QPT_RC;
    init.cap.max_send_wr  = SQ_LEN;
    init.cap.max_recv_wr  = RQ_LEN;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    a->qp = ibv_create_qp(a->pd, &init);
    if (a->qp == NULL) {
        die_errno("ibv_create_qp");
    }

    if ((ibv_query_port(a->ctx, port_num, &port) != 0) ||
        (ibv_query_gid(a->ctx, port_num, 0, &gid) != 0)) {
        die_errno("ibv_query_port/gid");
    }

    if ((uct_rc_gdr_dev_addr_unpack(target_dev, uct_rc_gdr_dev_addr_size(),
                                    &peer_dev) != UCS_OK) ||
        (uct_rc_gdr_ep_addr_unpack(target_ep, uct_rc_gdr_ep_addr_size(),
                                   &peer_ep) != UCS_OK)) {
        uct_test_die("the target's addresses", UCS_ERR_INVALID_PARAM);
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state        = IBV_QPS_INIT;
    attr.port_num        = port_num;
    attr.pkey_index      = 0;
    attr.qp_access_flags = 0;
    if (ibv_modify_qp(a->qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                    IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
        die_errno("QP to INIT");
    }

    for (slot = 0; slot < RQ_LEN; ++slot) {
        att_post_recv(a, slot);
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state              = IBV_QPS_RTR;
    attr.path_mtu              = (port.active_mtu < peer_ep.path_mtu) ?
                                 port.active_mtu :
                                 (enum ibv_mtu)peer_ep.path_mtu;
    attr.dest_qp_num           = peer_ep.qp_num;
    attr.rq_psn                = 0;
    attr.max_dest_rd_atomic    = 1;
    attr.min_rnr_timer         = 1;
    attr.ah_attr.port_num      = port_num;
    attr.ah_attr.dlid          = peer_dev.lid;
    if (peer_dev.is_roce) {
        attr.ah_attr.is_global      = 1;
        attr.ah_attr.grh.sgid_index = 0;
        attr.ah_attr.grh.hop_limit  = 64;
        memcpy(attr.ah_attr.grh.dgid.raw, peer_dev.gid, 16);
    }
    if (ibv_modify_qp(a->qp, &attr, IBV_QP_STATE | IBV_QP_AV |
                                    IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                    IBV_QP_RQ_PSN |
                                    IBV_QP_MAX_DEST_RD_ATOMIC |
                                    IBV_QP_MIN_RNR_TIMER) != 0) {
        die_errno("QP to RTR");
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state      = IBV_QPS_RTS;
    attr.sq_psn        = 0;
    attr.timeout       = 14;
    attr.retry_cnt     = 7;
    attr.rnr_retry     = 7;   /* the target's receive queue may be empty */
    attr.max_rd_atomic = 1;
    if (ibv_modify_qp(a->qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT |
                                    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                    IBV_QP_SQ_PSN |
                                    IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
        die_errno("QP to RTS");
    }

    /* what the target connects to: rc_gdr's own address formats */
    memset(&my_dev, 0, sizeof(my_dev));
    my_dev.is_roce = (port.link_layer == IBV_LINK_LAYER_ETHERNET);
    my_dev.lid     = port.lid;
    memcpy(my_dev.gid, gid.raw, 16);
    my_ep.qp_num   = a->qp->qp_num;
    my_ep.path_mtu = port.active_mtu;
    my_ep.flags    = 0;
    memset(wire, 0, sizeof(*wire));
    uct_rc_gdr_dev_addr_pack(&my_dev, wire->dev);
    uct_rc_gdr_ep_addr_pack(&my_ep, wire->ep);
}


static const char *st_str(int32_t status)
{
    return (status == NO_ACK) ? "no answer" :
           ucs_status_string((ucs_status_t)status);
}


/* ----------------------------------------------------------- checks -- */

static target_info_t info;
static uint64_t r1_token;       /* R1's bounce token, from its rkey */
static uint64_t r1_hash;          /* what R1 must hold */
static uint64_t r2_hash, r3_hash; /* and the others */


static int stats_has(const target_state_t *st, size_t offset, const char *name)
{
    if (st->stats.size < offset + sizeof(uint64_t)) {
        printf("     the target has no counter %s\n", name);
        return 0;
    }
    return 1;
}

#define DELTA(_now, _before, _field) \
    ((_now)->stats._field - (_before)->stats._field)
#define HAS(_st, _field) \
    stats_has(_st, offsetof(stats_t, _field), #_field)


/* Nothing outside what was written on purpose changed */
static void check_memory(attacker_t *a, const char *what)
{
    target_state_t st;

    att_return_credits(a);
    target_state(a, &st);
    uct_test_check(st.guards_ok && (st.r1_hash == r1_hash) &&
                   (st.r3_hash == r3_hash) &&
                   ((r2_hash == 0) || (st.r2_hash == r2_hash)),
                   "%s: guards intact, no byte changed outside the "
                   "registration (guards %s, R1 %s, R3 %s)", what,
                   st.guards_ok ? "ok" : "CHANGED",
                   (st.r1_hash == r1_hash) ? "ok" : "CHANGED",
                   (st.r3_hash == r3_hash) ? "ok" : "CHANGED");
}


/* A get of the whole of R2 with the attacker's credits held back: the
 * target serves it only as far as the credits it holds reach. Returns the
 * transfer's id, and R2's key in *r2_key_p. */
static uint32_t att_get_r2_withheld(attacker_t *a,
                                    uct_rc_gdr_rkey_t *r2_key_p)
{
    uct_rc_gdr_rkey_t r2_key;
    bhdr_t hdr;

    if (uct_rc_gdr_rkey_unpack_buffer(info.r2_rkey,
                                      uct_rc_gdr_rkey_packed_size(),
                                      &r2_key) != UCS_OK) {
        uct_test_die("R2's key", UCS_ERR_INVALID_PARAM);
    }
    a->withhold       = 1;
    a->get_data_bytes = 0;
    memset(&hdr, 0, sizeof(hdr));
    hdr.type     = MSG_GET_REQ;
    hdr.xfer_id  = att_id(a);
    hdr.token    = r2_key.rkey;
    hdr.token_hi = r2_key.token_hi;
    hdr.addr     = info.r2;
    hdr.length   = R2_LEN;
    att_send(a, &hdr, NULL, 0);
    *r2_key_p = r2_key;
    return hdr.xfer_id;
}


static void run_attacks(attacker_t *a)
{
    unsigned char data[MSG_MAX], r1_bytes[R1_LEN];
    target_state_t before, st;
    target_cmd_t cmd;
    bhdr_t hdr;
    int32_t s1, s2;
    int ok, i, refused, flood;
    uint64_t rss0;
    size_t j;

    for (j = 0; j < R1_LEN; ++j) {
        r1_bytes[j] = pattern(1, j);
    }

    /* 0. An honest put through the raw QP: the message format is right */
    for (j = 0; j < 100; ++j) {
        data[j] = pattern(5, j);
    }
    s1 = att_put(a, r1_token, info.r1 + 10, data, 100, WAIT_S);
    memcpy(r1_bytes + 10, data, 100);
    r1_hash = fnv(r1_bytes, R1_LEN);
    uct_test_check(s1 == UCS_OK, "crafted put inside the registration "
                   "accepted (the wire format is right): %s", st_str(s1));
    check_memory(a, "valid put");
    target_state(a, &before);
    rss0 = before.rss_kb;

    /* 1. Out of range, valid token: refused, answered with an error */
    {
        struct { uint64_t addr, len; const char *what; } puts[] = {
            {info.r1 - 1,          1,   "1 byte before"},
            {info.r1 + R1_LEN,     1,   "1 byte after"},
            {info.r1 + 900,        200, "running 100 bytes past the end"},
            {info.r1 - GUARD,      100, "into the guard before"},
            {info.r1 + R1_LEN + 8, 100, "into the guard after"},
            {UINT64_MAX - 7,       16,  "wrapping the address space"},
        };
        struct { uint64_t addr, len; const char *what; } gets[] = {
            {info.r1 - 16,         32,           "from before"},
            {info.r1 + R1_LEN - 1, 2,            "past the end"},
            {info.r1,              1ull << 62,   "of 2^62 bytes"},
            {info.r1 + 10,         UINT64_MAX - 5, "wrapping length"},
        };

        for (i = 0; i < (int)(sizeof(puts) / sizeof(puts[0])); ++i) {
            memset(data, 0x77, puts[i].len);
            s1 = att_put(a, r1_token, puts[i].addr, data, puts[i].len,
                         WAIT_S);
            uct_test_check(s1 < 0, "put %s the registration refused: %s",
                           puts[i].what, st_str(s1));
        }
        for (i = 0; i < (int)(sizeof(gets) / sizeof(gets[0])); ++i) {
            uint64_t got = a->get_data_bytes;

            s1 = att_get(a, r1_token, gets[i].addr, gets[i].len, WAIT_S);
            uct_test_check((s1 < 0) && (a->get_data_bytes == got),
                           "get %s the registration refused, no data: %s",
                           gets[i].what, st_str(s1));
        }
        target_state(a, &st);
        uct_test_check(DELTA(&st, &before, bounce_refused) == 10,
                       "out-of-range requests counted: %" PRIu64 " of 10",
                       DELTA(&st, &before, bounce_refused));
        check_memory(a, "out of range");
    }

    /* 2. Wrong and guessed tokens. R3 was registered right after R1: with
     * counted tokens its token is a small step from R1's. */
    target_state(a, &before);
    refused = 0;
    memset(data, 0x66, 64);
    {
        uint64_t tokens[24];
        uint64_t got;
        int n = 0;

        tokens[n++] = 0;
        tokens[n++] = ~r1_token;
        tokens[n++] = r1_token ^ 0x5a5a0000u;
        tokens[n++] = (uint32_t)random();
        tokens[n++] = (uint32_t)r1_token;          /* without the high bits */
        tokens[n++] = (uint32_t)r1_token + 1;
        tokens[n++] = r1_token + (1ull << 32);     /* high bits + 1 */
        tokens[n++] = r1_token - (1ull << 32);
        for (i = 1; i <= 8; ++i) {
            tokens[n++] = r1_token + i;
            tokens[n++] = r1_token - i;
        }
        for (i = 0; i < n; ++i) {
            s1 = att_put(a, tokens[i], info.r3, data, 64, WAIT_S);
            refused += (s1 < 0);
            if (s1 >= 0) {
                printf("     token 0x%" PRIx64 " (R1's 0x%" PRIx64 " %+" PRId64
                       ") reached R3: %s\n", tokens[i], r1_token,
                       (int64_t)(tokens[i] - r1_token), st_str(s1));
            }
        }
        uct_test_check(refused == n, "wrong and guessed tokens (R1's +-8, "
                       "its key bits alone, +-2^32, random, 0) refused: %d "
                       "of %d", refused, n);
        got = a->get_data_bytes;
        s1  = att_get(a, r1_token + 1, info.r3, 64, WAIT_S);
        uct_test_check((s1 < 0) && (a->get_data_bytes == got),
                       "get with R1's token + 1 from R3 refused: %s, %" PRIu64
                       " bytes of R3 sent", st_str(s1),
                       a->get_data_bytes - got);
    }
    check_memory(a, "guessed tokens");

    /* 2b. A flood of refused requests of every kind a peer may repeat:
     * each one refused and counted, while the target's log says at most the
     * first of each kind, not one line per request */
    target_state(a, &before);
    flood   = 60;
    refused = 0;
    memset(data, 0x44, 8);
    for (i = 0; i < flood; ++i) {
        refused += (att_put(a, r1_token ^ (0x1000u + i), info.r1, data, 8,
                            WAIT_S) < 0);                 /* unknown token */
        refused += (att_put(a, r1_token, info.r1 + R1_LEN, data, 8,
                            WAIT_S) < 0);                 /* past the end */
        refused += (att_get(a, r1_token, info.r1 + R1_LEN - 4, 8,
                            WAIT_S) < 0);                 /* past the end */
        refused += (att_get(a, r1_token, info.r1, 0, WAIT_S) < 0); /* none */
        memset(&hdr, 0, sizeof(hdr));
        hdr.type     = MSG_PUT_DATA;
        hdr.flags    = FLAG_LAST;
        hdr.xfer_id  = att_id(a);
        hdr.chunk    = 3;                                 /* out of order */
        hdr.token    = (uint32_t)r1_token;
        hdr.token_hi = (uint32_t)(r1_token >> 32);
        hdr.addr     = info.r1;
        hdr.length   = 8;
        att_send(a, &hdr, data, 8);
        refused += (att_wait_ack(a, hdr.xfer_id, WAIT_S) < 0);
    }
    target_state(a, &st);
    uct_test_check((refused == 5 * flood) &&
                   (DELTA(&st, &before, bounce_refused) ==
                    5 * (uint64_t)flood) &&
                   (st.log_lines - before.log_lines <= 5),
                   "%d refused requests of 5 kinds: %d refused, %" PRIu64
                   " counted, %" PRIu64 " lines in the target's log (bound "
                   "5, one per kind)", 5 * flood, refused,
                   DELTA(&st, &before, bounce_refused),
                   st.log_lines - before.log_lines);
    check_memory(a, "refusal flood");

    /* 3. Malformed: truncated, lengths past the message, unknown type,
     * a request carrying a payload. Dropped, counted, no answer. */
    target_state(a, &before);
    memset(&hdr, 0, sizeof(hdr));
    hdr.type    = MSG_PUT_DATA;
    hdr.flags   = FLAG_LAST;
    hdr.token    = (uint32_t)r1_token;
    hdr.token_hi = (uint32_t)(r1_token >> 32);
    hdr.addr    = info.r1;
    hdr.xfer_id = att_id(a);
    att_send_raw(a, IMM_INTERNAL, &hdr, 20);            /* truncated header */
    hdr.xfer_id = att_id(a);
    hdr.length  = 100;
    att_send(a, &hdr, data, 50);                        /* 50 of 100 bytes */
    hdr.xfer_id = att_id(a);
    hdr.length  = 1ull << 63;
    att_send(a, &hdr, data, 64);                        /* length 2^63 */
    hdr.xfer_id = att_id(a);
    hdr.type    = MSG_GET_REQ;
    hdr.length  = 10;
    att_send(a, &hdr, data, 10);                        /* request + data */
    hdr.xfer_id = att_id(a);
    hdr.type    = 9;
    att_send(a, &hdr, NULL, 0);                         /* unknown type */
    att_drain(a, 1.0);
    target_state(a, &st);
    ok = 1;
    for (i = 0; i < 5; ++i) {
        ok &= !a->ack_seen[hdr.xfer_id - 4 + i - ID_BASE];
    }
    uct_test_check(ok && HAS(&st, bounce_malformed) &&
                   (DELTA(&st, &before, bounce_malformed) == 5),
                   "truncated, overlong, unknown messages dropped "
                   "unanswered and counted: %" PRIu64 " of 5",
                   HAS(&st, bounce_malformed) ?
                   DELTA(&st, &before, bounce_malformed) : 0);
    check_memory(a, "malformed");

    /* 3b. Messages without immediate data, which the protocol never sends:
     * dropped, every one counted, said once */
    target_state(a, &before);
    for (i = 0; i < 50; ++i) {
        att_post_send(a, IBV_WR_SEND, 0, data, 16);
    }
    att_drain(a, 1.0);
    target_state(a, &st);
    uct_test_check(HAS(&st, rx_no_imm) &&
                   (DELTA(&st, &before, rx_no_imm) == 50) &&
                   (st.log_lines - before.log_lines <= 1),
                   "50 messages without immediate data dropped: %" PRIu64
                   " counted, %" PRIu64 " lines in the target's log (bound "
                   "1)", HAS(&st, rx_no_imm) ?
                   DELTA(&st, &before, rx_no_imm) : 0,
                   st.log_lines - before.log_lines);
    check_memory(a, "messages without immediate data");

    /* 4. Duplicated and out-of-order messages of a put */
    memset(&hdr, 0, sizeof(hdr));
    hdr.type    = MSG_PUT_DATA;
    hdr.token    = (uint32_t)r1_token;
    hdr.token_hi = (uint32_t)(r1_token >> 32);
    hdr.xfer_id = att_id(a);
    hdr.chunk   = 3;                   /* starts in the middle */
    hdr.flags   = FLAG_LAST;
    hdr.addr    = info.r1 + 200;
    hdr.length  = 10;
    att_send(a, &hdr, data, 10);
    s1 = att_wait_ack(a, hdr.xfer_id, WAIT_S);
    hdr.xfer_id = att_id(a);
    hdr.chunk   = 0;
    hdr.flags   = 0;
    memcpy(data, r1_bytes + 200, 10); /* the bytes already there */
    att_send(a, &hdr, data, 10);
    hdr.chunk   = 2;                   /* skips message 1 */
    hdr.flags   = FLAG_LAST;
    hdr.addr    = info.r1 + 220;
    att_send(a, &hdr, data, 10);
    s2 = att_wait_ack(a, hdr.xfer_id, WAIT_S);
    uct_test_check((s1 < 0) && (s2 < 0), "put starting at message 3, and a "
                   "put skipping a message, refused: %s, %s", st_str(s1),
                   st_str(s2));
    check_memory(a, "out of order");

    /* 5. Replies nobody takes: requests whose answers need credits the
     * attacker never returns. The target's queue stays bounded. */
    target_state(a, &before);
    flood       = 3000;
    a->withhold = 1;
    for (i = 0; i < flood; ++i) {
        memset(&hdr, 0, sizeof(hdr));
        hdr.type    = (i % 2) ? MSG_PUT_DATA : MSG_GET_REQ;
        hdr.flags   = FLAG_LAST;
        hdr.xfer_id = ID_BASE + 3000 + (i % 1000); /* not waited for */
        hdr.token   = ~(uint32_t)r1_token;
        hdr.addr    = info.r1;
        hdr.length  = (i % 2) ? 0 : 8;
        att_send(a, &hdr, NULL, 0);
        att_poll(a);
    }
    att_drain(a, 2.0);
    target_state(a, &st);
    uct_test_check(HAS(&st, bounce_queued_max) &&
                   (st.stats.bounce_queued_max <= 2 * 64) &&
                   (DELTA(&st, &before, bounce_acks_dropped) > 0),
                   "%d requests, no credits returned: replies queued at most "
                   "%" PRIu64 " (bound 128), %" PRIu64 " dropped and counted, "
                   "RSS %+" PRId64 " KiB", flood,
                   HAS(&st, bounce_queued_max) ?
                   st.stats.bounce_queued_max : 0,
                   HAS(&st, bounce_acks_dropped) ?
                   DELTA(&st, &before, bounce_acks_dropped) : 0,
                   (int64_t)(st.rss_kb - before.rss_kb));
    a->withhold = 0;
    att_return_credits(a);
    att_drain(a, 2.0);
    for (j = 0; j < 16; ++j) {
        data[j] = pattern(6, j);
    }
    s1 = att_put(a, r1_token, info.r1 + 300, data, 16, WAIT_S);
    memcpy(r1_bytes + 300, data, 16);
    r1_hash = fnv(r1_bytes, R1_LEN);
    uct_test_check(s1 == UCS_OK, "after the reply flood a valid put is "
                   "served again: %s", st_str(s1));
    check_memory(a, "reply flood");

    /* 6. Credits nobody was owed: 40000 x 65535 overflows a 32-bit count */
    target_state(a, &before);
    flood = 40000;
    for (i = 0; i < flood; ++i) {
        att_send_raw(a, IMM_CREDIT_ONLY | (0xffffu << IMM_CREDITS_SHIFT),
                     NULL, 0);
        if ((i % 64) == 0) {
            att_poll(a);
        }
    }
    att_drain(a, 1.0);
    for (j = 0; j < 16; ++j) {
        data[j] = pattern(7, j);
    }
    s1 = att_put(a, r1_token, info.r1 + 400, data, 16, WAIT_S);
    memcpy(r1_bytes + 400, data, 16);
    r1_hash = fnv(r1_bytes, R1_LEN);
    target_state(a, &st);
    uct_test_check((s1 == UCS_OK) && HAS(&st, credit_overflows) &&
                   (DELTA(&st, &before, credit_overflows) > 0),
                   "%d floods of 65535 credits capped and counted (%" PRIu64
                   "), the target still answers: %s", flood,
                   HAS(&st, credit_overflows) ?
                   DELTA(&st, &before, credit_overflows) : 0, st_str(s1));
    check_memory(a, "credit flood");

    /* 6b. A get of more than the credit window whose data is never taken
     * (no credits returned), the peer alive: after BOUNCE_TIMEOUT (2 s
     * here) the target drops it, its staging buffers back in the pool,
     * counted; the error ACK goes out when credits come. */
    {
        uct_rc_gdr_rkey_t r2_key;
        target_state_t held;
        uint32_t id;

        target_state(a, &before);
        id = att_get_r2_withheld(a, &r2_key);
        att_drain(a, 1.0);       /* the credits are spent, buffers held */
        target_state(a, &held);
        att_drain(a, 3.0);       /* past the timeout */
        target_state(a, &st);
        a->withhold = 0;
        att_return_credits(a);
        s1 = att_wait_ack(a, id, WAIT_S);
        while (a->owed > 0) {
            att_return_credits(a);
            att_drain(a, 1.0);
        }
        uct_test_check((held.stats.bounce_bufs_in_use > 0) &&
                       (st.stats.bounce_bufs_in_use == 0) &&
                       HAS(&st, bounce_serve_timeouts) &&
                       (DELTA(&st, &before, bounce_serve_timeouts) == 1) &&
                       (s1 == UCS_ERR_TIMED_OUT) &&
                       (a->get_data_bytes < R2_LEN),
                       "get of %u bytes whose data the live peer never "
                       "takes: dropped after the timeout, staging buffers "
                       "%" PRIu64 " -> %" PRIu64 ", counted %" PRIu64
                       ", answered %s after %" PRIu64 " bytes", R2_LEN,
                       held.stats.bounce_bufs_in_use,
                       st.stats.bounce_bufs_in_use,
                       HAS(&st, bounce_serve_timeouts) ?
                       DELTA(&st, &before, bounce_serve_timeouts) : 0,
                       st_str(s1), a->get_data_bytes);
        check_memory(a, "served get timeout");
    }

    /* 7. A served get whose memory is deregistered, freed and reused by
     * another owner while it is served: it stops with an error; none of
     * the new owner's bytes go out. Credits are held back so that the get
     * is still running when the memory goes. */
    target_state(a, &before);
    {
        uct_rc_gdr_rkey_t r2_key;
        uint32_t id;

        a->secret_bytes = 0;
        id              = att_get_r2_withheld(a, &r2_key);
        att_drain(a, 0.5);       /* it runs until the credits are spent;
                                    silent past BOUNCE_TIMEOUT, the
                                    attacker would see it dropped (6b) */

        memset(&cmd, 0, sizeof(cmd));
        cmd.cmd = CMD_FREE2;
        target_cmd(a, &cmd, &st);
        r2_hash = st.r2_hash;    /* another owner's now: stays so */
        a->withhold = 0;
        att_return_credits(a);
        s1 = att_wait_ack(a, id, WAIT_S);
        while (a->owed > 0) {    /* and all it still sends */
            att_return_credits(a);
            att_drain(a, 1.0);
        }
        target_state(a, &st);
        uct_test_check((s1 < 0) && (a->secret_bytes == 0) &&
                       (a->get_data_bytes < R2_LEN) &&
                       HAS(&st, bounce_revoked) &&
                       (DELTA(&st, &before, bounce_revoked) > 0),
                       "get served over freed memory stops with an error "
                       "(%s) after %" PRIu64 " of %u bytes, %" PRIu64
                       " bytes not R2's sent, counted %" PRIu64,
                       st_str(s1), a->get_data_bytes, R2_LEN,
                       a->secret_bytes,
                       HAS(&st, bounce_revoked) ?
                       DELTA(&st, &before, bounce_revoked) : 0);

        /* 8. Requests after deregistration: the old token names nothing */
        memset(data, 0x55, 64);
        s1 = att_put(a, uct_rc_gdr_rkey_token(&r2_key), info.r2, data, 64,
                     WAIT_S);
        s2 = att_get(a, uct_rc_gdr_rkey_token(&r2_key), info.r2, 64, WAIT_S);
        uct_test_check((s1 < 0) && (s2 < 0),
                       "put and get with a deregistered token refused: %s, "
                       "%s", st_str(s1), st_str(s2));
        check_memory(a, "after free");
    }

    /* 9. The target's own get answered twice with the same half: it must
     * fail, not complete over bytes never written. 10. Its put and get
     * left unanswered by a live peer end with an error in time. */
    {
        uct_rc_gdr_rkey_t fake = {.rkey = 0x1234, .flags =
                                  UCT_RC_GDR_RKEY_FLAG_GPU};
        double start;

        memset(&cmd, 0, sizeof(cmd));
        cmd.cmd    = CMD_GET;
        cmd.addr   = 0x7000000;
        cmd.length = 2 * 4000;
        uct_rc_gdr_rkey_pack(&fake, cmd.rkey);
        a->get_req_seen = 0;
        uct_test_write_all(cmd_fd, &cmd, sizeof(cmd));
        start = uct_test_now();
        while (!a->get_req_seen && (uct_test_now() < start + WAIT_S)) {
            att_poll(a);
        }
        memset(&hdr, 0, sizeof(hdr));
        hdr.type    = MSG_GET_DATA;
        hdr.xfer_id = a->get_req.xfer_id;
        hdr.addr    = 0;
        hdr.length  = 4000;
        for (j = 0; j < 4000; ++j) {
            data[j] = pattern(9, j);
        }
        att_send(a, &hdr, data, 4000);
        att_send(a, &hdr, data, 4000);   /* the same half again */
        {
            struct pollfd pfd = {.fd = reply_fd, .events = POLLIN};

            while (poll(&pfd, 1, 0) <= 0) {
                att_poll(a);
            }
            uct_test_read_all(reply_fd, &st, sizeof(st));
        }
        uct_test_check(a->get_req_seen && (st.status < 0) &&
                       (st.status != NO_ACK),
                       "the target's get answered twice with its first half "
                       "fails (%s), never completes with bytes unwritten",
                       a->get_req_seen ? st_str(st.status) : "no GET_REQ");

        for (i = 0; i < 2; ++i) {
            memset(&cmd, 0, sizeof(cmd));
            cmd.cmd    = i ? CMD_GET : CMD_PUT;
            cmd.addr   = 0x7000000;
            cmd.length = 2000;
            uct_rc_gdr_rkey_pack(&fake, cmd.rkey);
            start = uct_test_now();
            target_cmd(a, &cmd, &st);  /* the attacker takes, never answers */
            uct_test_check((st.status == UCS_ERR_TIMED_OUT) ||
                           (st.status == UCS_ERR_ENDPOINT_TIMEOUT),
                           "the target's %s to a live peer that never "
                           "answers ends in %.1f s: %s", i ? "get" : "put",
                           uct_test_now() - start, st_str(st.status));
        }
        att_return_credits(a);
    }

    /* memory stayed bounded over everything above */
    target_state(a, &st);
    uct_test_check((st.rss_kb < rss0 + 32 * 1024) && !st.ep_error,
                   "target RSS %" PRIu64 " KiB -> %" PRIu64 " KiB over the "
                   "attacks (bound +32 MiB); its endpoint %s", rss0,
                   st.rss_kb, st.ep_error ? "FAILED" : "alive");

    /* 11. Messages for a QP that is no endpoint's: puts into R1 that
     * arrive while the target does not progress, its endpoint destroyed
     * before it looks. Dropped and counted, never applied, never answered.
     * (Last: the attacker's endpoint is gone after it.) */
    {
        struct pollfd pfd = {.fd = reply_fd, .events = POLLIN};
        uint32_t first;
        uint8_t ready;
        int late = 20;

        att_return_credits(a);   /* nothing owed to a QP about to go */
        att_drain(a, 0.5);
        target_state(a, &before);
        memset(&cmd, 0, sizeof(cmd));
        cmd.cmd = CMD_LATE;
        uct_test_write_all(cmd_fd, &cmd, sizeof(cmd));
        uct_test_read_all(reply_fd, &ready, sizeof(ready));
        for (j = 0; j < 100; ++j) {
            data[j] = pattern(8, j);
        }
        first = next_id;
        for (i = 0; i < late; ++i) {
            att_send_put(a, r1_token, info.r1 + 500, data, 100);
        }
        while (poll(&pfd, 1, 0) <= 0) {
            att_poll(a);
        }
        uct_test_read_all(reply_fd, &st, sizeof(st));
        ok = 1;
        for (i = 0; i < late; ++i) {
            ok &= !a->ack_seen[first + i - ID_BASE];
        }
        uct_test_check(ok && st.guards_ok && (st.r1_hash == r1_hash) &&
                       HAS(&st, unknown_qp_msgs) &&
                       (DELTA(&st, &before, unknown_qp_msgs) ==
                        (uint64_t)late),
                       "%d puts into R1 for a QP of no endpoint: dropped "
                       "unanswered (%s), R1 %s, counted %" PRIu64, late,
                       ok ? "no ACK" : "ACKED", (st.r1_hash == r1_hash) ?
                       "unchanged" : "CHANGED",
                       HAS(&st, unknown_qp_msgs) ?
                       DELTA(&st, &before, unknown_qp_msgs) : 0);
    }
}


/* After all that, an honest rc_gdr peer moves bytes correctly */
static void run_honest(attacker_t *a, const char *dev)
{
    uct_test_node_t honest, *nodes[1] = {&honest};
    unsigned char src[R1_LEN], dst[R1_LEN];
    uct_rkey_bundle_t rkey;
    target_cmd_t cmd;
    target_state_t st;
    uct_test_comp_t comp;
    uct_mem_h smemh, dmemh;
    void *srkey, *drkey;
    ucs_status_t status;
    uct_iov_t iov;
    size_t i;

    uct_test_node_open(&honest, dev, 0);
    memset(&cmd, 0, sizeof(cmd));
    cmd.cmd = CMD_HONEST;
    uct_test_node_wire(&honest, &cmd.honest);
    target_cmd(a, &cmd, &st);
    memcpy(cmd.honest.dev, info.wire.dev, sizeof(info.wire.dev));
    memcpy(cmd.honest.ep, info.ep_h, sizeof(info.ep_h));
    uct_test_node_connect(&honest, &cmd.honest);

    if (uct_rkey_unpack(honest.component, info.r1_rkey, &rkey) != UCS_OK) {
        uct_test_die("uct_rkey_unpack", UCS_ERR_INVALID_PARAM);
    }

    for (i = 0; i < R1_LEN; ++i) {
        src[i] = pattern(77, i);
    }
    memset(dst, 0, sizeof(dst));
    uct_test_mem_reg(&honest, src, sizeof(src), &smemh, &srkey);
    uct_test_mem_reg(&honest, dst, sizeof(dst), &dmemh, &drkey);

    uct_test_comp_init(&comp);
    uct_test_iov_init(&iov, src, R1_LEN, smemh);
    status = UCT_TEST_RETRY(nodes, 1, uct_ep_put_zcopy(honest.ep, &iov, 1,
                                                       info.r1, rkey.rkey,
                                                       &comp.comp));
    status = uct_test_comp_wait(nodes, 1, status, &comp);
    uct_test_check(status == UCS_OK, "honest peer: put of %u bytes into the "
                   "attacked target's registration: %s", R1_LEN,
                   ucs_status_string(status));

    uct_test_comp_init(&comp);
    uct_test_iov_init(&iov, dst, R1_LEN, dmemh);
    status = UCT_TEST_RETRY(nodes, 1, uct_ep_get_zcopy(honest.ep, &iov, 1,
                                                       info.r1, rkey.rkey,
                                                       &comp.comp));
    status = uct_test_comp_wait(nodes, 1, status, &comp);
    uct_test_check((status == UCS_OK) && !memcmp(src, dst, R1_LEN),
                   "honest peer: get back, byte for byte: %s, %s",
                   ucs_status_string(status),
                   memcmp(src, dst, R1_LEN) ? "DIFFERENT" : "equal");

    r1_hash = fnv(src, R1_LEN);
    check_memory(a, "honest peer");

    uct_rkey_release(honest.component, &rkey);
    uct_md_mem_dereg(honest.md, smemh);
    uct_md_mem_dereg(honest.md, dmemh);
    free(srkey);
    free(drkey);
    uct_test_node_close(&honest);
}


int main(int argc, char **argv)
{
    int to_target[2], from_target[2];
    uct_rc_gdr_rkey_t key;
    attacker_t *a;
    target_cmd_t cmd;
    target_state_t st;
    int wstatus;

    if (argc != 3) {
        fprintf(stderr, "usage: %s TARGET_DEV ATTACKER_DEV\n", argv[0]);
        return UCT_TEST_EXIT_SETUP;
    }

    setenv("UCX_RC_GDR_BOUNCE_CHUNK_SIZE", "64k", 0);
    setenv("UCX_RC_GDR_BOUNCE_DEPTH", "3", 0);
    setenv("UCX_RC_GDR_BOUNCE_POOL_SIZE", "8", 0);
    setenv("UCX_RC_GDR_BOUNCE_TIMEOUT", "2s", 0);
    uct_test_init("bounce_attacker", 60.0);
    srandom(getpid());

    if ((pipe(to_target) != 0) || (pipe(from_target) != 0)) {
        die_errno("pipe");
    }
    target_pid = fork();
    if (target_pid == 0) {
        close(to_target[1]);
        close(from_target[0]);
        target_run(argv[1], to_target[0], from_target[1]);
    }
    close(to_target[0]);
    close(from_target[1]);
    cmd_fd   = to_target[1];
    reply_fd = from_target[0];

    uct_test_read_all(reply_fd, &info, sizeof(info));
    if (info.wire.buf != 3) {
        printf("FAIL the target's registrations are not keyless (%" PRIu64
               " bounce registrations of 3): run with the emulated GPU and "
               "UCX_RC_GDR_REG_METHODS=dmabuf\n", info.wire.buf);
        kill(target_pid, SIGKILL);
        return 1;
    }
    if (uct_rc_gdr_rkey_unpack_buffer(info.r1_rkey,
                                      uct_rc_gdr_rkey_packed_size(),
                                      &key) != UCS_OK) {
        uct_test_die("R1's key", UCS_ERR_INVALID_PARAM);
    }
    r1_token = uct_rc_gdr_rkey_token(&key);

    a = calloc(1, sizeof(*a));
    {
        uct_test_wire_t mine;

        att_open(a, argv[2], info.wire.dev, info.wire.ep, &mine);
        uct_test_write_all(cmd_fd, &mine, sizeof(mine));
    }

    target_state(a, &st);
    r1_hash = st.r1_hash;
    r2_hash = st.r2_hash;
    r3_hash = st.r3_hash;
    uct_test_check(st.guards_ok && (r1_hash == pattern_hash(1, R1_LEN)),
                   "target up: guards set, R1 as written");

    run_attacks(a);
    run_honest(a, argv[2]);

    memset(&cmd, 0, sizeof(cmd));
    cmd.cmd = CMD_QUIT;
    target_cmd(a, &cmd, &st);
    printf("target counters: refused %" PRIu64 ", malformed %" PRIu64
           ", unexpected %" PRIu64 ", revoked %" PRIu64 ", replies dropped %"
           PRIu64 ", timeouts %" PRIu64 ", served gets timed out %" PRIu64
           ", credit overflows %" PRIu64 ", queued max %" PRIu64 "; %" PRIu64
           " warning or error lines logged\n", st.stats.bounce_refused,
           st.stats.bounce_malformed, st.stats.bounce_unexpected,
           st.stats.bounce_revoked, st.stats.bounce_acks_dropped,
           st.stats.bounce_timeouts, st.stats.bounce_serve_timeouts,
           st.stats.credit_overflows, st.stats.bounce_queued_max,
           st.log_lines);
    if (waitpid(target_pid, &wstatus, 0) != target_pid) {
        die_errno("waitpid");
    }
    uct_test_check(WIFEXITED(wstatus) && (WEXITSTATUS(wstatus) == 0),
                   "target exited cleanly (status 0x%x)", wstatus);
    return uct_test_summary();
}
