/*
 * A malicious peer of the bounce lane (issue 13, "Trust").
 *
 * A forked target is an ordinary UCT rc_gdr user: it registers keyless
 * ("GPU", bounce lane) memory with guard bytes on both sides of each
 * registration, packs a remote key, and progresses while it answers
 * commands on a pipe (state, free, its own transfers). The attacker, the
 * test process, connects to the target's endpoint like an rc_gdr peer over
 * a raw verbs RC queue pair of its own (rc_gdr's address formats, its QP
 * numbers and PSN 0) and sends bounce-lane messages crafted by hand: puts
 * and gets out of range, wrong and guessed tokens, lengths past the message,
 * truncated, duplicated and out-of-order messages, a flood of requests whose
 * replies it never takes (no credits returned), a flood of credits, a get
 * whose memory is freed while it is served, requests after deregistration;
 * as a target of the target's own transfers it answers a get twice and
 * leaves a put and a get unanswered.
 *
 * Each test is one attack (or a family of them) against a fresh target:
 * each is refused or fails with a counted error (the target's interface
 * counters), no byte outside the registered ones changes (guards and
 * untouched registrations hashed by the target), the target's queues stay
 * bounded (queued-units high-water mark, RSS), and afterwards an honest
 * rc_gdr peer (a UCT node of this process) still moves bytes correctly.
 *
 * Needs GPU memory without a NIC key: the emulated GPU (run.sh's
 * with_emulated_gpu) with UCX_RC_GDR_REG_METHODS=dmabuf on rxe, which the
 * fixture sets; without the stand-in driver every test skips.
 *
 * See file LICENSE for terms.
 */

#include "uct_rc_gdr_test.h"
#include "../test_log.h"

#include <uct/ib_gdr/rc_gdr_addr.h>
#include <uct/ib_gdr/rc_gdr_cuda.h>

#include <infiniband/verbs.h>
#include <ucs/debug/log_def.h>

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>


static const size_t   GUARD       = 4096;     /* guard bytes on each side */
static const unsigned R1_LEN      = 1000;     /* exact bytes, not a page
                                                 multiple */
static const unsigned R2_LEN      = 4u << 20; /* served get, freed meanwhile */
static const unsigned R3_LEN      = 4096;     /* never given to the attacker */
static const int      GUARD_BYTE  = 0xa5;
static const int      SECRET_BYTE = 0xc3;     /* what the memory holds after
                                                 reuse */
static const size_t   SEG         = 8192;     /* UCX_RC_GDR_SEG_SIZE default */
static const size_t   HDR_LEN     = 40;
static const size_t   MSG_MAX     = SEG - HDR_LEN;
static const unsigned SQ_LEN      = 256;
static const unsigned RQ_LEN      = 512;
static const double   WAIT_S      = 20.0;
static const double   LATE_S      = 1.5;

/* rc_gdr's immediate data and bounce messages (rc_gdr_ep.h,
 * rc_gdr_bounce_core.h), written down as an attacker would */
static const uint32_t IMM_INTERNAL      = 1u << 6;
static const uint32_t IMM_CREDIT_ONLY   = 1u << 7;
static const unsigned IMM_CREDITS_SHIFT = 8;
static const uint8_t  MSG_PUT_DATA      = 1;
static const uint8_t  MSG_GET_REQ       = 2;
static const uint8_t  MSG_GET_DATA      = 3;
static const uint8_t  MSG_ACK           = 4;
static const uint8_t  FLAG_LAST         = 1;
static const int32_t  NO_ACK            = 1; /* wait_ack: nothing came */

static const uint32_t ID_BASE = 100000;      /* the attacker's transfer ids */
static const unsigned ID_MAX  = 4096;

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

static_assert(sizeof(bhdr_t) == HDR_LEN, "the bounce header is 40 bytes");


/* The target's interface counters (rc_gdr_iface.h), as many as it has */
typedef uct_test_iface_stats_t stats_t;


/* ------------------------------------------------------ target side -- */

enum {
    CMD_STATE  = 'S', /* reply: state */
    CMD_FREE2  = 'F', /* dereg + free R2, the same memory again, secret */
    CMD_GET    = 'G', /* get_bcopy from the attacker's keyless memory */
    CMD_PUT    = 'P', /* put_zcopy to it */
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
    char      *base;           /* allocation: guard, bytes, guard */
    size_t    len;
    uct_mem_h memh;
    void      *rkey;
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
    std::string tmp(len, '\0');
    size_t i;

    for (i = 0; i < len; ++i) {
        tmp[i] = pattern(seed, i);
    }
    return fnv((const unsigned char*)tmp.data(), len);
}

static void tregion_fill(tregion_t *r, unsigned seed, int guard_byte)
{
    size_t total       = r->len + 2 * GUARD;
    unsigned char *tmp = (unsigned char*)malloc(total);
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
    r->base = (char*)ptr;
    r->len  = len;
    tregion_fill(r, seed, GUARD_BYTE);
    uct_test_mem_reg(node, r->base + GUARD, len, &r->memh, &r->rkey);
}

/* The bytes hashed, the guards checked */
static uint64_t tregion_check(const tregion_t *r, int32_t *guards_ok)
{
    size_t total       = r->len + 2 * GUARD;
    unsigned char *tmp = (unsigned char*)malloc(total);
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
    unpack_arg_t *u = (unpack_arg_t*)arg;

    memcpy(u->dst, data, (length < u->length) ? length : u->length);
}


/* The target's own transfer to the attacker's keyless memory: its status,
 * or NO_ACK when it did not end within WAIT_S */
static void target_op(uct_test_node_t *node, uct_component_h component,
                      const target_cmd_t *cmd, target_state_t *st)
{
    uct_test_node_t *nodes[1] = {node};
    unsigned char *dst        = (unsigned char*)malloc(cmd->length);
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

/* Deregistered and freed while served; the next allocation of the size
 * gets the same memory (the stand-in driver reuses it), holding another
 * owner's bytes */
static void target_free_r2(uct_test_node_t *node, tregion_t *r2)
{
    size_t total = R2_LEN + 2 * GUARD;
    unsigned char *tmp;
    void *ptr;

    uct_md_mem_dereg(node->md, r2->memh);
    uct_rc_gdr_cuda_mem_free(r2->base);
    if ((uct_rc_gdr_cuda_mem_alloc(total, &ptr) != UCS_OK) ||
        (ptr != r2->base)) {
        fprintf(stderr, "target: memory not reused (%p, %p)\n", ptr,
                r2->base);
    }
    r2->base = (char*)ptr;

    tmp = (unsigned char*)malloc(total);
    memset(tmp, SECRET_BYTE, total);
    memset(tmp, GUARD_BYTE, GUARD);
    memset(tmp + GUARD + R2_LEN, GUARD_BYTE, GUARD);
    uct_rc_gdr_cuda_memcpy_htod(r2->base, tmp, total);
    free(tmp);
}

/* The forked target; never returns */
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
    int running = 1;

    if ((uct_rc_gdr_cuda_init() != UCS_OK) ||
        (uct_rc_gdr_cuda_ctx_activate(0, &ctx) != UCS_OK)) {
        uct_test_die("CUDA driver (run with the emulated GPU)",
                     UCS_ERR_NO_DEVICE);
    }

    /* The target's log lines at warning level or above, still printed:
     * what a flood of refused requests must not make grow with it */
    log_capture log(UCS_LOG_LEVEL_WARN, true);
    memset(&node, 0, sizeof(node));
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
            target_free_r2(&node, &r2);
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
        st.log_lines = captured_log.size();
        st.ep_error  = node.ep_error;
        target_stats(node.iface, &st.stats);
        uct_test_write_all(reply_fd, &st, sizeof(st));
    }

    _exit(0);
}


/* ---------------------------------------------------- attacker side -- */

static const char *st_str(int32_t status)
{
    return (status == NO_ACK) ? "no answer" :
           ucs_status_string((ucs_status_t)status);
}

static bool stats_has(const target_state_t *st, size_t offset,
                      const char *name)
{
    if (st->stats.size < offset + sizeof(uint64_t)) {
        printf("     the target has no counter %s\n", name);
        return false;
    }
    return true;
}

#define DELTA(_now, _before, _field) \
    ((_now)->stats._field - (_before)->stats._field)
#define HAS(_st, _field) \
    stats_has(_st, offsetof(stats_t, _field), #_field)


/*
 * The attacker, this process: a raw verbs RC QP connected to a forked
 * target's endpoint on dev_a(), from dev_b(). Each test meets a fresh
 * target, and ends with an honest peer served by it.
 */
class bounce_attacker : public uct_rc_gdr_test {
protected:
    void SetUp() override;
    void TearDown() override;

    /* The target */
    void target_fork();
    void target_send(const target_cmd_t *cmd);
    void target_reply(void *reply, size_t length);
    void target_cmd(const target_cmd_t *cmd, target_state_t *st);
    void target_cmd(uint8_t cmd, target_state_t *st);
    void target_state(target_state_t *st);
    void target_quit();

    /* The raw QP */
    void qp_open(const char *dev, uct_test_wire_t *wire_p);
    void qp_close();
    void post_recv(unsigned slot);
    void handle_recv(const struct ibv_wc *wc);
    int  poll_cqs();
    void post_send(enum ibv_wr_opcode opcode, uint32_t imm, const void *msg,
                   size_t len);
    void send_raw(uint32_t flags, const void *msg, size_t len);
    void send_msg(const bhdr_t *hdr, const void *payload, size_t payload_len);
    void return_credits();
    void drain(double seconds);
    int32_t wait_ack(uint32_t id, double seconds);
    uint32_t xfer_id_next();
    uint32_t send_put(uint64_t token, uint64_t addr, const void *data,
                      size_t len);
    int32_t put(uint64_t token, uint64_t addr, const void *data, size_t len,
                double wait);
    int32_t get(uint64_t token, uint64_t addr, uint64_t len, double wait);
    uint32_t get_r2_withheld(uct_rc_gdr_rkey_t *r2_key_p);

    /* Checks */
    void r1_written(size_t offset, const void *data, size_t len);
    void check_memory(const char *what);
    void expect_honest_peer_served();

    /* the target */
    pid_t          m_target_pid = -1;
    int            m_cmd_fd     = -1, m_reply_fd = -1;
    target_info_t  m_info;
    uint64_t       m_r1_token   = 0;  /* R1's bounce token, from its rkey */
    unsigned char  m_r1_bytes[R1_LEN]; /* what R1 must hold */
    uint64_t       m_r1_hash    = 0, m_r2_hash = 0, m_r3_hash = 0;
    uint64_t       m_rss0       = 0;
    void           (*m_sigpipe)(int) = SIG_DFL;
    bool           m_sigpipe_set     = false;

    /* the raw QP */
    struct ibv_context *m_ctx = nullptr;
    struct ibv_pd      *m_pd  = nullptr;
    struct ibv_cq      *m_scq = nullptr, *m_rcq = nullptr;
    struct ibv_qp      *m_qp  = nullptr;
    struct ibv_mr      *m_smr = nullptr, *m_rmr = nullptr;
    char               *m_sbuf = nullptr, *m_rbuf = nullptr;
    unsigned           m_sq_posted = 0; /* sends posted, one completion each */
    uint64_t           m_sends     = 0;
    unsigned           m_owed      = 0; /* credits we owe the target */
    bool               m_withhold  = false; /* do not return credits */
    uint32_t           m_next_id   = ID_BASE;

    /* what the target sent */
    int32_t            m_ack_status[ID_MAX]; /* by xfer id - ID_BASE */
    uint8_t            m_ack_seen[ID_MAX];
    unsigned           m_acks           = 0;
    bhdr_t             m_get_req;           /* the target's last GET_REQ */
    bool               m_get_req_seen   = false;
    uint64_t           m_get_data_bytes = 0;
    uint64_t           m_secret_bytes   = 0; /* GET_DATA bytes not R2's */
    unsigned           m_put_data_seen  = 0;
};


static void bounce_attacker_die_errno(const char *what)
{
    throw uct_test_setup_error(uct_test_str("attacker: %s: %s", what,
                                            strerror(errno)));
}

void bounce_attacker::SetUp()
{
    uct_rc_gdr_cuda_driver_info_t driver;
    const char *emulated = getenv("RC_GDR_GPU_EMULATED");
    uct_rc_gdr_rkey_t key;
    uct_test_wire_t mine;
    target_state_t st;
    size_t i;

    uct_rc_gdr_test::SetUp();
    if (IsSkipped()) {
        return;
    }

    /* (no CUDA call in this process before the fork but the stand-in's) */
    if ((emulated == NULL) || strcmp(emulated, "1") ||
        (uct_rc_gdr_cuda_init() != UCS_OK) ||
        (uct_rc_gdr_cuda_driver_info(&driver) != UCS_OK) ||
        !driver.emulated) {
        GTEST_SKIP() << "needs GPU memory that rxe cannot key: the emulated"
                        " GPU (. contrib/env.sh --emulated-gpu; run.sh's"
                        " with_emulated_gpu)";
    }
    emulated_gpu_note();

    uct_test_timeout_s = 60.0;
    env_set("UCX_RC_GDR_REG_METHODS", "dmabuf");
    nic_spec_set("dmabuf:off");     /* the stand-in NIC would serve it */
    env_set("UCX_RC_GDR_BOUNCE_CHUNK_SIZE", "64k");
    env_set("UCX_RC_GDR_BOUNCE_DEPTH", "3");
    env_set("UCX_RC_GDR_BOUNCE_POOL_SIZE", "8");
    env_set("UCX_RC_GDR_BOUNCE_TIMEOUT", "2s");
    srandom(getpid());
    /* a target that dies fails the test, not the process */
    m_sigpipe     = signal(SIGPIPE, SIG_IGN);
    m_sigpipe_set = true;

    memset(m_ack_status, 0, sizeof(m_ack_status));
    memset(m_ack_seen, 0, sizeof(m_ack_seen));
    memset(&m_get_req, 0, sizeof(m_get_req));
    for (i = 0; i < R1_LEN; ++i) {
        m_r1_bytes[i] = pattern(1, i);
    }

    target_fork();
    ASSERT_EQ(3u, m_info.wire.buf)
        << "the target's registrations are not keyless (" << m_info.wire.buf
        << " bounce registrations of 3): run with the emulated GPU and"
           " UCX_RC_GDR_REG_METHODS=dmabuf";
    ASSERT_EQ(UCS_OK, uct_rc_gdr_rkey_unpack_buffer(
                              m_info.r1_rkey, uct_rc_gdr_rkey_packed_size(),
                              &key))
        << "R1's key";
    m_r1_token = uct_rc_gdr_rkey_token(&key);

    qp_open(dev_b(), &mine);
    uct_test_write_all(m_cmd_fd, &mine, sizeof(mine));

    target_state(&st);
    m_r1_hash = st.r1_hash;
    m_r2_hash = st.r2_hash;
    m_r3_hash = st.r3_hash;
    m_rss0    = st.rss_kb;
    ASSERT_TRUE(st.guards_ok && (m_r1_hash == pattern_hash(1, R1_LEN)))
        << "target up: guards set, R1 as written";
}

void bounce_attacker::TearDown()
{
    if (m_target_pid > 0) {
        target_quit();
    }
    if (m_cmd_fd >= 0) {
        close(m_cmd_fd);
        close(m_reply_fd);
        m_cmd_fd = m_reply_fd = -1;
    }
    if (m_sigpipe_set) {
        signal(SIGPIPE, m_sigpipe);
        m_sigpipe_set = false;
    }
    qp_close();
    uct_rc_gdr_test::TearDown();
}

void bounce_attacker::target_fork()
{
    int to_target[2], from_target[2];

    if (pipe(to_target) != 0) {
        bounce_attacker_die_errno("pipe");
    }
    if (pipe(from_target) != 0) {
        close(to_target[0]);
        close(to_target[1]);
        bounce_attacker_die_errno("pipe");
    }

    fflush(stdout);
    fflush(stderr);
    m_target_pid = fork();
    if (m_target_pid == 0) {
        close(to_target[1]);
        close(from_target[0]);
        try {
            target_run(dev_a(), to_target[0], from_target[1]);
        } catch (...) {
        }
        _exit(UCT_TEST_EXIT_SETUP);  /* never back into gtest */
    }

    close(to_target[0]);
    close(from_target[1]);
    m_cmd_fd   = to_target[1];
    m_reply_fd = from_target[0];
    if (m_target_pid < 0) {
        bounce_attacker_die_errno("fork");
    }

    target_reply(&m_info, sizeof(m_info));
}

void bounce_attacker::target_send(const target_cmd_t *cmd)
{
    uct_test_write_all(m_cmd_fd, cmd, sizeof(*cmd));
}

/* Waits for the target's answer, taking messages meanwhile; bounded */
void bounce_attacker::target_reply(void *reply, size_t length)
{
    double deadline = uct_test_now() + uct_test_timeout_s;
    struct pollfd pfd;

    pfd.fd     = m_reply_fd;
    pfd.events = POLLIN;
    for (;;) {
        if (m_qp != nullptr) {
            poll_cqs();
        }
        if (poll(&pfd, 1, (m_qp != nullptr) ? 0 : 100) > 0) {
            break;
        }
        if (uct_test_now() > deadline) {
            uct_test_die("the target did not answer", UCS_ERR_TIMED_OUT);
        }
    }
    uct_test_read_all(m_reply_fd, reply, length);
}

void bounce_attacker::target_cmd(const target_cmd_t *cmd, target_state_t *st)
{
    target_send(cmd);
    target_reply(st, sizeof(*st));
}

void bounce_attacker::target_cmd(uint8_t cmd, target_state_t *st)
{
    target_cmd_t c;

    memset(&c, 0, sizeof(c));
    c.cmd = cmd;
    target_cmd(&c, st);
}

void bounce_attacker::target_state(target_state_t *st)
{
    target_cmd(CMD_STATE, st);
}

/* Ends the target: cleanly when the test got that far, killed otherwise */
void bounce_attacker::target_quit()
{
    double deadline = uct_test_now() + uct_test_timeout_s;
    target_state_t st;
    int wstatus     = 0;
    bool asked      = false;
    pid_t pid;

    if (!HasFatalFailure()) {
        try {
            target_cmd(CMD_QUIT, &st);
            asked = true;
            printf("target counters: refused %" PRIu64 ", malformed %" PRIu64
                   ", unexpected %" PRIu64 ", revoked %" PRIu64
                   ", replies dropped %" PRIu64 ", timeouts %" PRIu64
                   ", served gets timed out %" PRIu64 ", credit overflows %"
                   PRIu64 ", queued max %" PRIu64 "; %" PRIu64
                   " warning or error lines logged\n",
                   st.stats.bounce_refused, st.stats.bounce_malformed,
                   st.stats.bounce_unexpected, st.stats.bounce_revoked,
                   st.stats.bounce_acks_dropped, st.stats.bounce_timeouts,
                   st.stats.bounce_serve_timeouts, st.stats.credit_overflows,
                   st.stats.bounce_queued_max, st.log_lines);
        } catch (const uct_test_setup_error &e) {
            ADD_FAILURE() << "the target does not quit: " << e.what();
        }
    }

    if (!asked) {
        kill(m_target_pid, SIGKILL);
    }
    do {
        pid = waitpid(m_target_pid, &wstatus, asked ? WNOHANG : 0);
        if ((pid == 0) && (uct_test_now() > deadline)) {
            kill(m_target_pid, SIGKILL);
            asked = false;
        } else if (pid == 0) {
            usleep(10000);
        }
    } while ((pid == 0) || ((pid < 0) && (errno == EINTR)));
    if (asked) {
        UCT_TEST_EXPECT((pid == m_target_pid) && WIFEXITED(wstatus) &&
                        (WEXITSTATUS(wstatus) == 0),
                        "target exited cleanly (status 0x%x)", wstatus);
    }
    m_target_pid = -1;
}


void bounce_attacker::post_recv(unsigned slot)
{
    struct ibv_recv_wr wr, *bad;
    struct ibv_sge sge;

    sge.addr   = (uintptr_t)(m_rbuf + (size_t)slot * SEG);
    sge.length = SEG;
    sge.lkey   = m_rmr->lkey;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id   = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(m_qp, &wr, &bad) != 0) {
        bounce_attacker_die_errno("ibv_post_recv");
    }
}

void bounce_attacker::handle_recv(const struct ibv_wc *wc)
{
    const char *data = m_rbuf + wc->wr_id * SEG;
    uint32_t imm     = ntohl(wc->imm_data);
    bhdr_t hdr;
    uint64_t i;

    if (wc->status != IBV_WC_SUCCESS) {
        fprintf(stderr, "attacker: receive error %s\n",
                ibv_wc_status_str(wc->status));
        return;
    }

    if (!(imm & IMM_CREDIT_ONLY)) {
        ++m_owed;
    }
    if (!(imm & IMM_INTERNAL) || (wc->byte_len < HDR_LEN)) {
        goto out;
    }

    memcpy(&hdr, data, sizeof(hdr));
    switch (hdr.type) {
    case MSG_ACK:
        if ((hdr.xfer_id >= ID_BASE) && (hdr.xfer_id < ID_BASE + ID_MAX)) {
            m_ack_seen[hdr.xfer_id - ID_BASE]   = 1;
            m_ack_status[hdr.xfer_id - ID_BASE] = hdr.status;
        }
        ++m_acks;
        break;
    case MSG_GET_REQ:
        m_get_req      = hdr;
        m_get_req_seen = true;
        break;
    case MSG_GET_DATA:
        m_get_data_bytes += hdr.length;
        /* the get asked for R2, written with pattern 2: any other byte
         * is not what was registered */
        for (i = 0; (i < hdr.length) && (HDR_LEN + i < wc->byte_len); ++i) {
            m_secret_bytes += ((unsigned char)data[HDR_LEN + i] !=
                               pattern(2, hdr.addr + i));
        }
        break;
    case MSG_PUT_DATA:
        ++m_put_data_seen;
        break;
    default:
        break;
    }

out:
    post_recv(wc->wr_id);
}

/* Send and receive completions; returns how many */
int bounce_attacker::poll_cqs()
{
    struct ibv_wc wcs[32];
    int n, i, count = 0;

    n = ibv_poll_cq(m_rcq, 32, wcs);
    for (i = 0; i < n; ++i) {
        handle_recv(&wcs[i]);
    }
    count += (n > 0) ? n : 0;

    n = ibv_poll_cq(m_scq, 32, wcs);
    for (i = 0; i < n; ++i) {
        if (wcs[i].status != IBV_WC_SUCCESS) {
            throw uct_test_setup_error(
                    uct_test_str("attacker: send error %s",
                                 ibv_wc_status_str(wcs[i].status)));
        }
        --m_sq_posted;
    }
    count += (n > 0) ? n : 0;
    return count;
}

/* One SEND (without immediate data: what the protocol never sends) or
 * SEND_WITH_IMM of `len` bytes from slot data (header + payload) */
void bounce_attacker::post_send(enum ibv_wr_opcode opcode, uint32_t imm,
                                const void *msg, size_t len)
{
    struct ibv_send_wr wr, *bad;
    struct ibv_sge sge;
    char *slot;

    while (m_sq_posted >= SQ_LEN - 1) {
        poll_cqs();
    }

    slot = m_sbuf + (m_sends % SQ_LEN) * SEG;
    if (len > 0) {
        memcpy(slot, msg, len);
    }
    sge.addr   = (uintptr_t)slot;
    sge.length = len;
    sge.lkey   = m_smr->lkey;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id      = m_sends++;
    wr.sg_list    = &sge;
    wr.num_sge    = (len > 0) ? 1 : 0;
    wr.opcode     = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data   = htonl(imm);
    if (ibv_post_send(m_qp, &wr, &bad) != 0) {
        bounce_attacker_die_errno("ibv_post_send");
    }
    ++m_sq_posted;
}

/* A message of the protocol: its flags and the credits owed in the
 * immediate data */
void bounce_attacker::send_raw(uint32_t flags, const void *msg, size_t len)
{
    unsigned credits = 0;

    if (!m_withhold && !(flags & IMM_CREDIT_ONLY)) {
        credits = (m_owed > 0xffff) ? 0xffff : m_owed;
        m_owed -= credits;
    }
    if (flags & IMM_CREDIT_ONLY) {
        credits = flags >> IMM_CREDITS_SHIFT;
        flags  &= 0xff;
    }

    post_send(IBV_WR_SEND_WITH_IMM, flags | (credits << IMM_CREDITS_SHIFT),
              msg, len);
}

void bounce_attacker::send_msg(const bhdr_t *hdr, const void *payload,
                               size_t payload_len)
{
    char msg[SEG];

    memcpy(msg, hdr, HDR_LEN);
    if (payload_len > 0) {
        memcpy(msg + HDR_LEN, payload, payload_len);
    }
    send_raw(IMM_INTERNAL, msg, HDR_LEN + payload_len);
}

/* Returns the credits we owe, as an honest peer does */
void bounce_attacker::return_credits()
{
    unsigned n;

    while (m_owed > 0) {
        n       = (m_owed > 0xffff) ? 0xffff : m_owed;
        m_owed -= n;
        send_raw(IMM_CREDIT_ONLY | (n << IMM_CREDITS_SHIFT), NULL, 0);
    }
}

void bounce_attacker::drain(double seconds)
{
    double end = uct_test_now() + seconds;

    while (uct_test_now() < end) {
        poll_cqs();
    }
}

int32_t bounce_attacker::wait_ack(uint32_t id, double seconds)
{
    double end = uct_test_now() + seconds;

    while (!m_ack_seen[id - ID_BASE] && (uct_test_now() < end)) {
        poll_cqs();
        if (!m_withhold && (m_owed >= 32)) {
            return_credits(); /* an answer may need them */
        }
    }
    return m_ack_seen[id - ID_BASE] ? m_ack_status[id - ID_BASE] : NO_ACK;
}

uint32_t bounce_attacker::xfer_id_next()
{
    uint32_t id = m_next_id++;

    if (id >= ID_BASE + ID_MAX) {
        uct_test_die("out of transfer ids", UCS_ERR_EXCEEDS_LIMIT);
    }
    m_ack_seen[id - ID_BASE] = 0;
    return id;
}

/* A one-message put (LAST), sent; its transfer id */
uint32_t bounce_attacker::send_put(uint64_t token, uint64_t addr,
                                   const void *data, size_t len)
{
    bhdr_t hdr;

    memset(&hdr, 0, sizeof(hdr));
    hdr.type     = MSG_PUT_DATA;
    hdr.flags    = FLAG_LAST;
    hdr.xfer_id  = xfer_id_next();
    hdr.token    = (uint32_t)token;
    hdr.token_hi = (uint32_t)(token >> 32);
    hdr.addr     = addr;
    hdr.length   = len;
    send_msg(&hdr, data, len);
    return hdr.xfer_id;
}

/* A one-message put; the ACK's status or NO_ACK */
int32_t bounce_attacker::put(uint64_t token, uint64_t addr, const void *data,
                             size_t len, double wait)
{
    return wait_ack(send_put(token, addr, data, len), wait);
}

int32_t bounce_attacker::get(uint64_t token, uint64_t addr, uint64_t len,
                             double wait)
{
    bhdr_t hdr;

    memset(&hdr, 0, sizeof(hdr));
    hdr.type     = MSG_GET_REQ;
    hdr.xfer_id  = xfer_id_next();
    hdr.token    = (uint32_t)token;
    hdr.token_hi = (uint32_t)(token >> 32);
    hdr.addr     = addr;
    hdr.length   = len;
    send_msg(&hdr, NULL, 0);
    return wait_ack(hdr.xfer_id, wait);
}

/* A get of the whole of R2 with the attacker's credits held back: the
 * target serves it only as far as the credits it holds reach. Returns the
 * transfer's id, and R2's key in *r2_key_p. */
uint32_t bounce_attacker::get_r2_withheld(uct_rc_gdr_rkey_t *r2_key_p)
{
    uct_rc_gdr_rkey_t r2_key;
    bhdr_t hdr;

    if (uct_rc_gdr_rkey_unpack_buffer(m_info.r2_rkey,
                                      uct_rc_gdr_rkey_packed_size(),
                                      &r2_key) != UCS_OK) {
        uct_test_die("R2's key", UCS_ERR_INVALID_PARAM);
    }
    m_withhold       = true;
    m_get_data_bytes = 0;
    memset(&hdr, 0, sizeof(hdr));
    hdr.type     = MSG_GET_REQ;
    hdr.xfer_id  = xfer_id_next();
    hdr.token    = r2_key.rkey;
    hdr.token_hi = r2_key.token_hi;
    hdr.addr     = m_info.r2;
    hdr.length   = R2_LEN;
    send_msg(&hdr, NULL, 0);
    *r2_key_p = r2_key;
    return hdr.xfer_id;
}

void bounce_attacker::qp_open(const char *dev, uct_test_wire_t *wire_p)
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
    for (i = 0; (list != NULL) && (i < n) && (m_ctx == nullptr); ++i) {
        if (!strcmp(ibv_get_device_name(list[i]), name)) {
            m_ctx = ibv_open_device(list[i]);
        }
    }
    if (list != NULL) {
        ibv_free_device_list(list);
    }
    if (m_ctx == nullptr) {
        bounce_attacker_die_errno("ibv_open_device");
    }

    m_pd   = ibv_alloc_pd(m_ctx);
    m_scq  = ibv_create_cq(m_ctx, SQ_LEN * 2, NULL, NULL, 0);
    m_rcq  = ibv_create_cq(m_ctx, RQ_LEN * 2, NULL, NULL, 0);
    m_sbuf = (char*)calloc(SQ_LEN, SEG);
    m_rbuf = (char*)calloc(RQ_LEN, SEG);
    if ((m_pd == nullptr) || (m_scq == nullptr) || (m_rcq == nullptr) ||
        (m_sbuf == nullptr) || (m_rbuf == nullptr)) {
        bounce_attacker_die_errno("verbs resources");
    }
    m_smr = ibv_reg_mr(m_pd, m_sbuf, (size_t)SQ_LEN * SEG,
                       IBV_ACCESS_LOCAL_WRITE);
    m_rmr = ibv_reg_mr(m_pd, m_rbuf, (size_t)RQ_LEN * SEG,
                       IBV_ACCESS_LOCAL_WRITE);
    if ((m_smr == nullptr) || (m_rmr == nullptr)) {
        bounce_attacker_die_errno("ibv_reg_mr");
    }

    memset(&init, 0, sizeof(init));
    init.send_cq          = m_scq;
    init.recv_cq          = m_rcq;
    init.qp_type          = IBV_QPT_RC;
    init.cap.max_send_wr  = SQ_LEN;
    init.cap.max_recv_wr  = RQ_LEN;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    m_qp = ibv_create_qp(m_pd, &init);
    if (m_qp == nullptr) {
        bounce_attacker_die_errno("ibv_create_qp");
    }

    if ((ibv_query_port(m_ctx, port_num, &port) != 0) ||
        (ibv_query_gid(m_ctx, port_num, 0, &gid) != 0)) {
        bounce_attacker_die_errno("ibv_query_port/gid");
    }

    if ((uct_rc_gdr_dev_addr_unpack(m_info.wire.dev,
                                    uct_rc_gdr_dev_addr_size(),
                                    &peer_dev) != UCS_OK) ||
        (uct_rc_gdr_ep_addr_unpack(m_info.wire.ep, uct_rc_gdr_ep_addr_size(),
                                   &peer_ep) != UCS_OK)) {
        uct_test_die("the target's addresses", UCS_ERR_INVALID_PARAM);
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state        = IBV_QPS_INIT;
    attr.port_num        = port_num;
    attr.pkey_index      = 0;
    attr.qp_access_flags = 0;
    if (ibv_modify_qp(m_qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                   IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
        bounce_attacker_die_errno("QP to INIT");
    }

    for (slot = 0; slot < RQ_LEN; ++slot) {
        post_recv(slot);
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state           = IBV_QPS_RTR;
    attr.path_mtu           = (port.active_mtu < peer_ep.path_mtu) ?
                              port.active_mtu :
                              (enum ibv_mtu)peer_ep.path_mtu;
    attr.dest_qp_num        = peer_ep.qp_num;
    attr.rq_psn             = 0;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer      = 1;
    attr.ah_attr.port_num   = port_num;
    attr.ah_attr.dlid       = peer_dev.lid;
    if (peer_dev.is_roce) {
        attr.ah_attr.is_global      = 1;
        attr.ah_attr.grh.sgid_index = 0;
        attr.ah_attr.grh.hop_limit  = 64;
        memcpy(attr.ah_attr.grh.dgid.raw, peer_dev.gid, 16);
    }
    if (ibv_modify_qp(m_qp, &attr, IBV_QP_STATE | IBV_QP_AV |
                                   IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                   IBV_QP_RQ_PSN |
                                   IBV_QP_MAX_DEST_RD_ATOMIC |
                                   IBV_QP_MIN_RNR_TIMER) != 0) {
        bounce_attacker_die_errno("QP to RTR");
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state      = IBV_QPS_RTS;
    attr.sq_psn        = 0;
    attr.timeout       = 14;
    attr.retry_cnt     = 7;
    attr.rnr_retry     = 7;   /* the target's receive queue may be empty */
    attr.max_rd_atomic = 1;
    if (ibv_modify_qp(m_qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT |
                                   IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                   IBV_QP_SQ_PSN |
                                   IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
        bounce_attacker_die_errno("QP to RTS");
    }

    /* what the target connects to: rc_gdr's own address formats */
    memset(&my_dev, 0, sizeof(my_dev));
    memset(&my_ep, 0, sizeof(my_ep));
    my_dev.is_roce = (port.link_layer == IBV_LINK_LAYER_ETHERNET);
    my_dev.lid     = port.lid;
    memcpy(my_dev.gid, gid.raw, 16);
    my_ep.qp_num   = m_qp->qp_num;
    my_ep.path_mtu = port.active_mtu;
    my_ep.flags    = 0;
    memset(wire_p, 0, sizeof(*wire_p));
    uct_rc_gdr_dev_addr_pack(&my_dev, wire_p->dev);
    uct_rc_gdr_ep_addr_pack(&my_ep, wire_p->ep);
}

void bounce_attacker::qp_close()
{
    if (m_qp != nullptr) {
        ibv_destroy_qp(m_qp);
        m_qp = nullptr;
    }
    if (m_rmr != nullptr) {
        ibv_dereg_mr(m_rmr);
        m_rmr = nullptr;
    }
    if (m_smr != nullptr) {
        ibv_dereg_mr(m_smr);
        m_smr = nullptr;
    }
    free(m_rbuf);
    free(m_sbuf);
    m_rbuf = m_sbuf = nullptr;
    if (m_rcq != nullptr) {
        ibv_destroy_cq(m_rcq);
        m_rcq = nullptr;
    }
    if (m_scq != nullptr) {
        ibv_destroy_cq(m_scq);
        m_scq = nullptr;
    }
    if (m_pd != nullptr) {
        ibv_dealloc_pd(m_pd);
        m_pd = nullptr;
    }
    if (m_ctx != nullptr) {
        ibv_close_device(m_ctx);
        m_ctx = nullptr;
    }
}


/* ----------------------------------------------------------- checks -- */

/* A put of the attacker's that R1 must now hold */
void bounce_attacker::r1_written(size_t offset, const void *data, size_t len)
{
    memcpy(m_r1_bytes + offset, data, len);
    m_r1_hash = fnv(m_r1_bytes, R1_LEN);
}

/* Nothing outside what was written on purpose changed */
void bounce_attacker::check_memory(const char *what)
{
    target_state_t st;

    return_credits();
    target_state(&st);
    UCT_TEST_EXPECT(st.guards_ok && (st.r1_hash == m_r1_hash) &&
                    (st.r3_hash == m_r3_hash) &&
                    ((m_r2_hash == 0) || (st.r2_hash == m_r2_hash)),
                    "%s: guards intact, no byte changed outside the "
                    "registration (guards %s, R1 %s, R3 %s)", what,
                    st.guards_ok ? "ok" : "CHANGED",
                    (st.r1_hash == m_r1_hash) ? "ok" : "CHANGED",
                    (st.r3_hash == m_r3_hash) ? "ok" : "CHANGED");
}

/* After the attack: the target's memory stayed bounded, its endpoint
 * alive, and an honest rc_gdr peer moves bytes correctly */
void bounce_attacker::expect_honest_peer_served()
{
    uct_test_node_t *honest, *nodes[1];
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

    target_state(&st);
    UCT_TEST_EXPECT((st.rss_kb < m_rss0 + 32 * 1024) && !st.ep_error,
                    "target RSS %" PRIu64 " KiB -> %" PRIu64 " KiB over the "
                    "attack (bound +32 MiB); its endpoint %s", m_rss0,
                    st.rss_kb, st.ep_error ? "FAILED" : "alive");

    honest   = node_open(dev_b(), 0);
    nodes[0] = honest;
    memset(&cmd, 0, sizeof(cmd));
    cmd.cmd = CMD_HONEST;
    uct_test_node_wire(honest, &cmd.honest);
    target_cmd(&cmd, &st);
    memcpy(cmd.honest.dev, m_info.wire.dev, sizeof(m_info.wire.dev));
    memcpy(cmd.honest.ep, m_info.ep_h, sizeof(m_info.ep_h));
    uct_test_node_connect(honest, &cmd.honest);

    ASSERT_EQ(UCS_OK, uct_rkey_unpack(honest->component, m_info.r1_rkey,
                                      &rkey))
        << "R1's key, unpacked by the honest peer";

    for (i = 0; i < R1_LEN; ++i) {
        src[i] = pattern(77, i);
    }
    memset(dst, 0, sizeof(dst));
    uct_test_mem_reg(honest, src, sizeof(src), &smemh, &srkey);
    uct_test_mem_reg(honest, dst, sizeof(dst), &dmemh, &drkey);

    uct_test_comp_init(&comp);
    uct_test_iov_init(&iov, src, R1_LEN, smemh);
    status = UCT_TEST_RETRY(nodes, 1, uct_ep_put_zcopy(honest->ep, &iov, 1,
                                                       m_info.r1, rkey.rkey,
                                                       &comp.comp));
    status = uct_test_comp_wait(nodes, 1, status, &comp);
    UCT_TEST_EXPECT(status == UCS_OK, "honest peer: put of %u bytes into the "
                    "attacked target's registration: %s", R1_LEN,
                    ucs_status_string(status));

    uct_test_comp_init(&comp);
    uct_test_iov_init(&iov, dst, R1_LEN, dmemh);
    status = UCT_TEST_RETRY(nodes, 1, uct_ep_get_zcopy(honest->ep, &iov, 1,
                                                       m_info.r1, rkey.rkey,
                                                       &comp.comp));
    status = uct_test_comp_wait(nodes, 1, status, &comp);
    UCT_TEST_EXPECT((status == UCS_OK) && !memcmp(src, dst, R1_LEN),
                    "honest peer: get back, byte for byte: %s, %s",
                    ucs_status_string(status),
                    memcmp(src, dst, R1_LEN) ? "DIFFERENT" : "equal");

    r1_written(0, src, R1_LEN);
    check_memory("honest peer");

    uct_rkey_release(honest->component, &rkey);
    uct_md_mem_dereg(honest->md, smemh);
    uct_md_mem_dereg(honest->md, dmemh);
    free(srkey);
    free(drkey);
    node_close(honest);
}


/* ------------------------------------------------------------ tests -- */

/* A put inside the registration through the raw QP: the message format is
 * right, so that what the other tests see refused is refused for what they
 * change */
TEST_F(bounce_attacker, crafted_put_accepted)
{
    unsigned char data[100];
    int32_t s1;
    size_t j;

    for (j = 0; j < sizeof(data); ++j) {
        data[j] = pattern(5, j);
    }
    s1 = put(m_r1_token, m_info.r1 + 10, data, sizeof(data), WAIT_S);
    r1_written(10, data, sizeof(data));
    UCT_TEST_EXPECT(s1 == UCS_OK, "crafted put inside the registration "
                    "accepted (the wire format is right): %s", st_str(s1));
    check_memory("valid put");
    expect_honest_peer_served();
}

/* Out of range, valid token: refused, answered with an error, counted */
TEST_F(bounce_attacker, out_of_range_refused_counted)
{
    struct range {
        uint64_t   addr, len;
        const char *what;
    };
    const range puts[] = {
        {m_info.r1 - 1,          1,   "1 byte before"},
        {m_info.r1 + R1_LEN,     1,   "1 byte after"},
        {m_info.r1 + 900,        200, "running 100 bytes past the end"},
        {m_info.r1 - GUARD,      100, "into the guard before"},
        {m_info.r1 + R1_LEN + 8, 100, "into the guard after"},
        {UINT64_MAX - 7,         16,  "wrapping the address space"},
    };
    const range gets[] = {
        {m_info.r1 - 16,         32,             "from before"},
        {m_info.r1 + R1_LEN - 1, 2,              "past the end"},
        {m_info.r1,              1ull << 62,     "of 2^62 bytes"},
        {m_info.r1 + 10,         UINT64_MAX - 5, "wrapping length"},
    };
    unsigned char data[MSG_MAX];
    target_state_t before, st;
    uint64_t got;
    int32_t s1;

    target_state(&before);
    for (const range &p : puts) {
        memset(data, 0x77, p.len);
        s1 = put(m_r1_token, p.addr, data, p.len, WAIT_S);
        UCT_TEST_EXPECT(s1 < 0, "put %s the registration refused: %s",
                        p.what, st_str(s1));
    }
    for (const range &g : gets) {
        got = m_get_data_bytes;
        s1  = get(m_r1_token, g.addr, g.len, WAIT_S);
        UCT_TEST_EXPECT((s1 < 0) && (m_get_data_bytes == got),
                        "get %s the registration refused, no data: %s",
                        g.what, st_str(s1));
    }
    target_state(&st);
    UCT_TEST_EXPECT(DELTA(&st, &before, bounce_refused) == 10,
                    "out-of-range requests counted: %" PRIu64 " of 10",
                    DELTA(&st, &before, bounce_refused));
    check_memory("out of range");
    expect_honest_peer_served();
}

/* Wrong and guessed tokens. R3 was registered right after R1: with counted
 * tokens its token is a small step from R1's. */
TEST_F(bounce_attacker, guessed_tokens_refused)
{
    unsigned char data[64];
    uint64_t tokens[24];
    std::string reached;
    int i, n = 0, refused = 0;
    uint64_t got;
    int32_t s1;

    memset(data, 0x66, sizeof(data));
    tokens[n++] = 0;
    tokens[n++] = ~m_r1_token;
    tokens[n++] = m_r1_token ^ 0x5a5a0000u;
    tokens[n++] = (uint32_t)random();
    tokens[n++] = (uint32_t)m_r1_token;          /* without the high bits */
    tokens[n++] = (uint32_t)m_r1_token + 1;
    tokens[n++] = m_r1_token + (1ull << 32);     /* high bits + 1 */
    tokens[n++] = m_r1_token - (1ull << 32);
    for (i = 1; i <= 8; ++i) {
        tokens[n++] = m_r1_token + i;
        tokens[n++] = m_r1_token - i;
    }
    for (i = 0; i < n; ++i) {
        s1       = put(tokens[i], m_info.r3, data, sizeof(data), WAIT_S);
        refused += (s1 < 0);
        if (s1 >= 0) {
            reached += uct_test_str("; token 0x%" PRIx64 " (R1's 0x%" PRIx64
                                    " %+" PRId64 ") reached R3: %s",
                                    tokens[i], m_r1_token,
                                    (int64_t)(tokens[i] - m_r1_token),
                                    st_str(s1));
        }
    }
    UCT_TEST_EXPECT(refused == n, "wrong and guessed tokens (R1's +-8, its "
                    "key bits alone, +-2^32, random, 0) refused: %d of %d%s",
                    refused, n, reached.c_str());

    got = m_get_data_bytes;
    s1  = get(m_r1_token + 1, m_info.r3, 64, WAIT_S);
    UCT_TEST_EXPECT((s1 < 0) && (m_get_data_bytes == got),
                    "get with R1's token + 1 from R3 refused: %s, %" PRIu64
                    " bytes of R3 sent", st_str(s1), m_get_data_bytes - got);
    check_memory("guessed tokens");
    expect_honest_peer_served();
}

/* A flood of refused requests of every kind a peer may repeat: each one
 * refused and counted, while the target's log says at most the first of
 * each kind, not one line per request */
TEST_F(bounce_attacker, refusal_flood_logged_once_per_kind)
{
    const int flood = 60;
    unsigned char data[8];
    target_state_t before, st;
    int i, refused = 0;
    bhdr_t hdr;

    memset(data, 0x44, sizeof(data));
    target_state(&before);
    for (i = 0; i < flood; ++i) {
        refused += (put(m_r1_token ^ (0x1000u + i), m_info.r1, data, 8,
                        WAIT_S) < 0);                   /* unknown token */
        refused += (put(m_r1_token, m_info.r1 + R1_LEN, data, 8,
                        WAIT_S) < 0);                   /* past the end */
        refused += (get(m_r1_token, m_info.r1 + R1_LEN - 4, 8,
                        WAIT_S) < 0);                   /* past the end */
        refused += (get(m_r1_token, m_info.r1, 0, WAIT_S) < 0); /* none */
        memset(&hdr, 0, sizeof(hdr));
        hdr.type     = MSG_PUT_DATA;
        hdr.flags    = FLAG_LAST;
        hdr.xfer_id  = xfer_id_next();
        hdr.chunk    = 3;                               /* out of order */
        hdr.token    = (uint32_t)m_r1_token;
        hdr.token_hi = (uint32_t)(m_r1_token >> 32);
        hdr.addr     = m_info.r1;
        hdr.length   = 8;
        send_msg(&hdr, data, 8);
        refused += (wait_ack(hdr.xfer_id, WAIT_S) < 0);
    }
    target_state(&st);
    UCT_TEST_EXPECT((refused == 5 * flood) &&
                    (DELTA(&st, &before, bounce_refused) ==
                     5 * (uint64_t)flood) &&
                    (st.log_lines > before.log_lines) &&
                    (st.log_lines - before.log_lines <= 5),
                    "%d refused requests of 5 kinds: %d refused, %" PRIu64
                    " counted, %" PRIu64 " lines in the target's log (said, "
                    "bound 5, one per kind)", 5 * flood, refused,
                    DELTA(&st, &before, bounce_refused),
                    st.log_lines - before.log_lines);
    check_memory("refusal flood");
    expect_honest_peer_served();
}

/* Malformed: truncated, lengths past the message, unknown type, a request
 * carrying a payload. Dropped, counted, no answer. */
TEST_F(bounce_attacker, malformed_dropped_unanswered_counted)
{
    unsigned char data[64];
    target_state_t before, st;
    uint32_t ids[5];
    bool unanswered = true;
    bhdr_t hdr;
    int i;

    memset(data, 0x66, sizeof(data));
    target_state(&before);
    memset(&hdr, 0, sizeof(hdr));
    hdr.type     = MSG_PUT_DATA;
    hdr.flags    = FLAG_LAST;
    hdr.token    = (uint32_t)m_r1_token;
    hdr.token_hi = (uint32_t)(m_r1_token >> 32);
    hdr.addr     = m_info.r1;
    hdr.xfer_id  = ids[0] = xfer_id_next();
    send_raw(IMM_INTERNAL, &hdr, 20);                   /* truncated header */
    hdr.xfer_id  = ids[1] = xfer_id_next();
    hdr.length   = 100;
    send_msg(&hdr, data, 50);                           /* 50 of 100 bytes */
    hdr.xfer_id  = ids[2] = xfer_id_next();
    hdr.length   = 1ull << 63;
    send_msg(&hdr, data, 64);                           /* length 2^63 */
    hdr.xfer_id  = ids[3] = xfer_id_next();
    hdr.type     = MSG_GET_REQ;
    hdr.length   = 10;
    send_msg(&hdr, data, 10);                           /* request + data */
    hdr.xfer_id  = ids[4] = xfer_id_next();
    hdr.type     = 9;
    send_msg(&hdr, NULL, 0);                            /* unknown type */
    drain(1.0);
    target_state(&st);
    for (i = 0; i < 5; ++i) {
        unanswered = unanswered && !m_ack_seen[ids[i] - ID_BASE];
    }
    UCT_TEST_EXPECT(unanswered && HAS(&st, bounce_malformed) &&
                    (DELTA(&st, &before, bounce_malformed) == 5),
                    "truncated, overlong, unknown messages dropped "
                    "unanswered and counted: %" PRIu64 " of 5",
                    HAS(&st, bounce_malformed) ?
                    DELTA(&st, &before, bounce_malformed) : 0);
    check_memory("malformed");
    expect_honest_peer_served();
}

/* Messages without immediate data, which the protocol never sends:
 * dropped, every one counted, said once */
TEST_F(bounce_attacker, no_immediate_data_dropped_counted)
{
    unsigned char data[16];
    target_state_t before, st;
    int i;

    memset(data, 0x66, sizeof(data));
    target_state(&before);
    for (i = 0; i < 50; ++i) {
        post_send(IBV_WR_SEND, 0, data, sizeof(data));
    }
    drain(1.0);
    target_state(&st);
    UCT_TEST_EXPECT(HAS(&st, rx_no_imm) &&
                    (DELTA(&st, &before, rx_no_imm) == 50) &&
                    (st.log_lines - before.log_lines <= 1),
                    "50 messages without immediate data dropped: %" PRIu64
                    " counted, %" PRIu64 " lines in the target's log (bound "
                    "1)", HAS(&st, rx_no_imm) ?
                    DELTA(&st, &before, rx_no_imm) : 0,
                    st.log_lines - before.log_lines);
    check_memory("messages without immediate data");
    expect_honest_peer_served();
}

/* Active messages to an id the target set no handler for: dropped, every
 * one counted, said at most once a second (UCT's default handler would log
 * a warning, a hex dump and a backtrace for each) */
TEST_F(bounce_attacker, am_without_handler_dropped_counted)
{
    unsigned char data[16];
    target_state_t before, st;
    int i;

    memset(data, 0x66, sizeof(data));
    target_state(&before);
    for (i = 0; i < 50; ++i) {
        send_raw(5, data, sizeof(data)); /* user AM id 5: no handler */
    }
    drain(1.0);
    target_state(&st);
    UCT_TEST_EXPECT(HAS(&st, am_no_handler) &&
                    (DELTA(&st, &before, am_no_handler) == 50) &&
                    (st.log_lines - before.log_lines <= 2),
                    "50 active messages to an id without a handler dropped: "
                    "%" PRIu64 " counted, %" PRIu64 " lines in the target's "
                    "log (bound 2)", HAS(&st, am_no_handler) ?
                    DELTA(&st, &before, am_no_handler) : 0,
                    st.log_lines - before.log_lines);
    check_memory("active messages without a handler");
    expect_honest_peer_served();
}

/* Duplicated and out-of-order messages of a put */
TEST_F(bounce_attacker, out_of_order_put_refused)
{
    unsigned char data[10];
    int32_t s1, s2;
    bhdr_t hdr;

    memset(data, 0x66, sizeof(data));
    memset(&hdr, 0, sizeof(hdr));
    hdr.type     = MSG_PUT_DATA;
    hdr.token    = (uint32_t)m_r1_token;
    hdr.token_hi = (uint32_t)(m_r1_token >> 32);
    hdr.xfer_id  = xfer_id_next();
    hdr.chunk    = 3;                   /* starts in the middle */
    hdr.flags    = FLAG_LAST;
    hdr.addr     = m_info.r1 + 200;
    hdr.length   = 10;
    send_msg(&hdr, data, 10);
    s1 = wait_ack(hdr.xfer_id, WAIT_S);

    hdr.xfer_id = xfer_id_next();
    hdr.chunk   = 0;
    hdr.flags   = 0;
    memcpy(data, m_r1_bytes + 200, 10); /* the bytes already there */
    send_msg(&hdr, data, 10);
    hdr.chunk   = 2;                    /* skips message 1 */
    hdr.flags   = FLAG_LAST;
    hdr.addr    = m_info.r1 + 220;
    send_msg(&hdr, data, 10);
    s2 = wait_ack(hdr.xfer_id, WAIT_S);
    UCT_TEST_EXPECT((s1 < 0) && (s2 < 0), "put starting at message 3, and a "
                    "put skipping a message, refused: %s, %s", st_str(s1),
                    st_str(s2));
    check_memory("out of order");
    expect_honest_peer_served();
}

/* Replies nobody takes: requests whose answers need credits the attacker
 * never returns. The target's queue stays bounded, and it serves again
 * once the credits come. */
TEST_F(bounce_attacker, reply_flood_queue_bounded)
{
    const int flood = 3000;
    unsigned char data[16];
    target_state_t before, st;
    int32_t s1;
    bhdr_t hdr;
    size_t j;
    int i;

    target_state(&before);
    m_withhold = true;
    for (i = 0; i < flood; ++i) {
        memset(&hdr, 0, sizeof(hdr));
        hdr.type    = (i % 2) ? MSG_PUT_DATA : MSG_GET_REQ;
        hdr.flags   = FLAG_LAST;
        hdr.xfer_id = ID_BASE + 3000 + (i % 1000); /* not waited for */
        hdr.token   = ~(uint32_t)m_r1_token;
        hdr.addr    = m_info.r1;
        hdr.length  = (i % 2) ? 0 : 8;
        send_msg(&hdr, NULL, 0);
        poll_cqs();
    }
    drain(2.0);
    target_state(&st);
    UCT_TEST_EXPECT(HAS(&st, bounce_queued_max) &&
                    (st.stats.bounce_queued_max <= 2 * 64) &&
                    (DELTA(&st, &before, bounce_acks_dropped) > 0),
                    "%d requests, no credits returned: replies queued at "
                    "most %" PRIu64 " (bound 128), %" PRIu64 " dropped and "
                    "counted, RSS %+" PRId64 " KiB", flood,
                    HAS(&st, bounce_queued_max) ?
                    st.stats.bounce_queued_max : 0,
                    HAS(&st, bounce_acks_dropped) ?
                    DELTA(&st, &before, bounce_acks_dropped) : 0,
                    (int64_t)(st.rss_kb - before.rss_kb));

    m_withhold = false;
    return_credits();
    drain(2.0);
    for (j = 0; j < sizeof(data); ++j) {
        data[j] = pattern(6, j);
    }
    s1 = put(m_r1_token, m_info.r1 + 300, data, sizeof(data), WAIT_S);
    r1_written(300, data, sizeof(data));
    UCT_TEST_EXPECT(s1 == UCS_OK, "after the reply flood a valid put is "
                    "served again: %s", st_str(s1));
    check_memory("reply flood");
    expect_honest_peer_served();
}

/* Credits nobody was owed: 40000 x 65535 overflows a 32-bit count */
TEST_F(bounce_attacker, credit_flood_capped_counted)
{
    const int flood = 40000;
    unsigned char data[16];
    target_state_t before, st;
    int32_t s1;
    size_t j;
    int i;

    target_state(&before);
    for (i = 0; i < flood; ++i) {
        send_raw(IMM_CREDIT_ONLY | (0xffffu << IMM_CREDITS_SHIFT), NULL, 0);
        if ((i % 64) == 0) {
            poll_cqs();
        }
    }
    drain(1.0);
    for (j = 0; j < sizeof(data); ++j) {
        data[j] = pattern(7, j);
    }
    s1 = put(m_r1_token, m_info.r1 + 400, data, sizeof(data), WAIT_S);
    r1_written(400, data, sizeof(data));
    target_state(&st);
    UCT_TEST_EXPECT((s1 == UCS_OK) && HAS(&st, credit_overflows) &&
                    (DELTA(&st, &before, credit_overflows) > 0),
                    "%d floods of 65535 credits capped and counted (%" PRIu64
                    "), the target still answers: %s", flood,
                    HAS(&st, credit_overflows) ?
                    DELTA(&st, &before, credit_overflows) : 0, st_str(s1));
    check_memory("credit flood");
    expect_honest_peer_served();
}

/* A get of more than the credit window whose data is never taken (no
 * credits returned), the peer alive: after BOUNCE_TIMEOUT (2 s here) the
 * target drops it, its staging buffers back in the pool, counted; the
 * error ACK goes out when credits come. */
TEST_F(bounce_attacker, withheld_get_dropped_after_timeout)
{
    target_state_t before, held, st;
    uct_rc_gdr_rkey_t r2_key;
    uint32_t id;
    int32_t s1;

    target_state(&before);
    id = get_r2_withheld(&r2_key);
    drain(1.0);       /* the credits are spent, buffers held */
    target_state(&held);
    drain(3.0);       /* past the timeout */
    target_state(&st);
    m_withhold = false;
    return_credits();
    s1 = wait_ack(id, WAIT_S);
    while (m_owed > 0) {
        return_credits();
        drain(1.0);
    }
    UCT_TEST_EXPECT((held.stats.bounce_bufs_in_use > 0) &&
                    (st.stats.bounce_bufs_in_use == 0) &&
                    HAS(&st, bounce_serve_timeouts) &&
                    (DELTA(&st, &before, bounce_serve_timeouts) == 1) &&
                    (s1 == UCS_ERR_TIMED_OUT) &&
                    (m_get_data_bytes < R2_LEN),
                    "get of %u bytes whose data the live peer never takes: "
                    "dropped after the timeout, staging buffers %" PRIu64
                    " -> %" PRIu64 ", counted %" PRIu64 ", answered %s after "
                    "%" PRIu64 " bytes", R2_LEN,
                    held.stats.bounce_bufs_in_use,
                    st.stats.bounce_bufs_in_use,
                    HAS(&st, bounce_serve_timeouts) ?
                    DELTA(&st, &before, bounce_serve_timeouts) : 0,
                    st_str(s1), m_get_data_bytes);
    check_memory("served get timeout");
    expect_honest_peer_served();
}

/* A peer that takes no data of the gets it has the target serve holds at
 * most its share of the staging buffers (BOUNCE_EP_MAX_BUFS, auto: a
 * quarter of the pool, here one get of BOUNCE_DEPTH 3 of 8), not the whole
 * pool until BOUNCE_TIMEOUT, again and again: another endpoint is served
 * meanwhile */
TEST_F(bounce_attacker, withheld_gets_leave_buffers_to_others)
{
    target_state_t before, held, st;
    uct_rc_gdr_rkey_t r2_key;
    uint32_t ids[4];
    double start;
    unsigned i;

    target_state(&before);
    for (i = 0; i < 4; ++i) {
        ids[i] = get_r2_withheld(&r2_key);
    }
    drain(0.5);       /* the credits are spent, buffers held */
    target_state(&held);
    start = uct_test_now();
    expect_honest_peer_served();
    printf("honest peer served %.2f s after the gets were held\n",
           uct_test_now() - start);
    target_state(&st);
    UCT_TEST_EXPECT((held.stats.bounce_bufs_in_use > 0) &&
                    (held.stats.bounce_bufs_in_use <= 3),
                    "4 gets of %u bytes whose data the peer does not take "
                    "hold %" PRIu64 " of 8 staging buffers (bound 3, "
                    "most ever %" PRIu64 ")", R2_LEN,
                    held.stats.bounce_bufs_in_use, st.stats.bounce_bufs_max);

    m_withhold = false;
    return_credits();
    for (i = 0; i < 4; ++i) {
        wait_ack(ids[i], WAIT_S);
        while (m_owed > 0) {
            return_credits();
            drain(0.2);
        }
    }
    check_memory("withheld gets");
}

/* A served get whose memory is deregistered, freed and reused by another
 * owner while it is served: it stops with an error; none of the new
 * owner's bytes go out. Credits are held back so that the get is still
 * running when the memory goes. */
TEST_F(bounce_attacker, get_over_freed_memory_stops)
{
    target_state_t before, st;
    uct_rc_gdr_rkey_t r2_key;
    uint32_t id;
    int32_t s1;

    target_state(&before);
    m_secret_bytes = 0;
    id             = get_r2_withheld(&r2_key);
    drain(0.5);       /* it runs until the credits are spent; silent past
                         BOUNCE_TIMEOUT, the attacker would see it dropped
                         (withheld_get_dropped_after_timeout) */

    target_cmd(CMD_FREE2, &st);
    m_r2_hash  = st.r2_hash;     /* another owner's now: stays so */
    m_withhold = false;
    return_credits();
    s1 = wait_ack(id, WAIT_S);
    while (m_owed > 0) {         /* and all it still sends */
        return_credits();
        drain(1.0);
    }
    target_state(&st);
    UCT_TEST_EXPECT((s1 < 0) && (m_secret_bytes == 0) &&
                    (m_get_data_bytes < R2_LEN) &&
                    HAS(&st, bounce_revoked) &&
                    (DELTA(&st, &before, bounce_revoked) > 0),
                    "get served over freed memory stops with an error (%s) "
                    "after %" PRIu64 " of %u bytes, %" PRIu64 " bytes not "
                    "R2's sent, counted %" PRIu64, st_str(s1),
                    m_get_data_bytes, R2_LEN, m_secret_bytes,
                    HAS(&st, bounce_revoked) ?
                    DELTA(&st, &before, bounce_revoked) : 0);
    check_memory("freed while served");
    expect_honest_peer_served();
}

/* Requests after deregistration: the old token names nothing, and the
 * memory's new owner keeps its bytes */
TEST_F(bounce_attacker, deregistered_token_refused)
{
    unsigned char data[64];
    uct_rc_gdr_rkey_t r2_key;
    target_state_t st;
    int32_t s1, s2;

    ASSERT_EQ(UCS_OK, uct_rc_gdr_rkey_unpack_buffer(
                              m_info.r2_rkey, uct_rc_gdr_rkey_packed_size(),
                              &r2_key))
        << "R2's key";
    target_cmd(CMD_FREE2, &st);
    m_r2_hash = st.r2_hash;      /* another owner's now: stays so */

    memset(data, 0x55, sizeof(data));
    s1 = put(uct_rc_gdr_rkey_token(&r2_key), m_info.r2, data, sizeof(data),
             WAIT_S);
    s2 = get(uct_rc_gdr_rkey_token(&r2_key), m_info.r2, sizeof(data),
             WAIT_S);
    UCT_TEST_EXPECT((s1 < 0) && (s2 < 0),
                    "put and get with a deregistered token refused: %s, %s",
                    st_str(s1), st_str(s2));
    check_memory("after free");
    expect_honest_peer_served();
}

/* The target's own get answered twice with the same half: it must fail,
 * not complete over bytes never written */
TEST_F(bounce_attacker, target_get_answered_twice_fails)
{
    unsigned char data[4000];
    uct_rc_gdr_rkey_t fake;
    target_cmd_t cmd;
    target_state_t st;
    double start;
    bhdr_t hdr;
    size_t j;

    memset(&fake, 0, sizeof(fake));
    fake.rkey     = 0x1234;
    fake.flags    = UCT_RC_GDR_RKEY_FLAG_GPU;
    fake.token_hi = 0x5678; /* every token has bits above the key */
    memset(&cmd, 0, sizeof(cmd));
    cmd.cmd    = CMD_GET;
    cmd.addr   = 0x7000000;
    cmd.length = 2 * sizeof(data);
    uct_rc_gdr_rkey_pack(&fake, cmd.rkey);
    m_get_req_seen = false;
    target_send(&cmd);
    start = uct_test_now();
    while (!m_get_req_seen && (uct_test_now() < start + WAIT_S)) {
        poll_cqs();
    }

    memset(&hdr, 0, sizeof(hdr));
    hdr.type    = MSG_GET_DATA;
    hdr.xfer_id = m_get_req.xfer_id;
    hdr.addr    = 0;
    hdr.length  = sizeof(data);
    for (j = 0; j < sizeof(data); ++j) {
        data[j] = pattern(9, j);
    }
    send_msg(&hdr, data, sizeof(data));
    send_msg(&hdr, data, sizeof(data));   /* the same half again */
    target_reply(&st, sizeof(st));
    UCT_TEST_EXPECT(m_get_req_seen && (st.status < 0) &&
                    (st.status != NO_ACK),
                    "the target's get answered twice with its first half "
                    "fails (%s), never completes with bytes unwritten",
                    m_get_req_seen ? st_str(st.status) : "no GET_REQ");
    return_credits();
    check_memory("get answered twice");
    expect_honest_peer_served();
}

/* The target's put and get left unanswered by a live peer end with an
 * error in time */
TEST_F(bounce_attacker, target_ops_unanswered_end_in_time)
{
    uct_rc_gdr_rkey_t fake;
    target_cmd_t cmd;
    target_state_t st;
    double start;
    int i;

    memset(&fake, 0, sizeof(fake));
    fake.rkey     = 0x1234;
    fake.flags    = UCT_RC_GDR_RKEY_FLAG_GPU;
    fake.token_hi = 0x5678; /* every token has bits above the key */
    for (i = 0; i < 2; ++i) {
        memset(&cmd, 0, sizeof(cmd));
        cmd.cmd    = i ? CMD_GET : CMD_PUT;
        cmd.addr   = 0x7000000;
        cmd.length = 2000;
        uct_rc_gdr_rkey_pack(&fake, cmd.rkey);
        start = uct_test_now();
        target_cmd(&cmd, &st);  /* the attacker takes, never answers */
        UCT_TEST_EXPECT((st.status == UCS_ERR_TIMED_OUT) ||
                        (st.status == UCS_ERR_ENDPOINT_TIMEOUT),
                        "the target's %s to a live peer that never answers "
                        "ends in %.1f s: %s", i ? "get" : "put",
                        uct_test_now() - start, st_str(st.status));
    }
    return_credits();
    check_memory("transfers unanswered");
    expect_honest_peer_served();
}

/* Messages for a QP that is no endpoint's: puts into R1 that arrive while
 * the target does not progress, its endpoint destroyed before it looks.
 * Dropped and counted, never applied, never answered. */
TEST_F(bounce_attacker, unknown_qp_msgs_dropped_counted)
{
    const int late = 20;
    unsigned char data[100];
    target_state_t before, st;
    bool unanswered = true;
    uint32_t first;
    uint8_t ready;
    size_t j;
    int i;

    return_credits();   /* nothing owed to a QP about to go */
    drain(0.5);
    target_state(&before);
    {
        target_cmd_t cmd;

        memset(&cmd, 0, sizeof(cmd));
        cmd.cmd = CMD_LATE;
        target_send(&cmd);
    }
    target_reply(&ready, sizeof(ready));
    for (j = 0; j < sizeof(data); ++j) {
        data[j] = pattern(8, j);
    }
    first = m_next_id;
    for (i = 0; i < late; ++i) {
        send_put(m_r1_token, m_info.r1 + 500, data, sizeof(data));
    }
    target_reply(&st, sizeof(st));
    for (i = 0; i < late; ++i) {
        unanswered = unanswered && !m_ack_seen[first + i - ID_BASE];
    }
    UCT_TEST_EXPECT(unanswered && st.guards_ok && (st.r1_hash == m_r1_hash) &&
                    HAS(&st, unknown_qp_msgs) &&
                    (DELTA(&st, &before, unknown_qp_msgs) == (uint64_t)late),
                    "%d puts into R1 for a QP of no endpoint: dropped "
                    "unanswered (%s), R1 %s, counted %" PRIu64, late,
                    unanswered ? "no ACK" : "ACKED",
                    (st.r1_hash == m_r1_hash) ? "unchanged" : "CHANGED",
                    HAS(&st, unknown_qp_msgs) ?
                    DELTA(&st, &before, unknown_qp_msgs) : 0);
    expect_honest_peer_served();
}
