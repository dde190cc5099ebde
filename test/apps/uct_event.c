/*
 * uct_event: interface events of rc_gdr through the public UCT API, and
 * UCP's blocking progress on top of them, on real verbs devices (the
 * soft-RoCE guest).
 *
 *   uct_event uct DEV_A DEV_B   event fd and arm: quiet while nothing
 *                               happens, woken by an active message (RECV)
 *                               and by a put's completion (SEND_COMP), BUSY
 *                               until progress took what woke it, BUSY for
 *                               a completion that came before the arm and
 *                               for a request that became dispatchable
 *   uct_event ucp               ucp_worker_get_efd / arm / wait: a worker
 *                               blocked in ucp_worker_wait wakes for a tag
 *                               message (UCX_TLS=rc_gdr,ud_verbs:aux,self)
 *
 * Every wait is bounded. Prints one "PASS name" / "FAIL name" line per
 * check and "N passed, N failed"; exits non-zero if any check failed.
 */

#include "uct_test_util.h"

#include <ucp/api/ucp.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


#define AM_ID          5
#define BUF_SIZE       4096
#define OP_TIMEOUT_S   30.0
#define WAKE_TIMEOUT_S 10.0  /* an event must arrive within this */
#define QUIET_S        1.0   /* and none while nothing happens */
#define BUSY_TRIES     3

static volatile int g_am_count;
static uint64_t g_am_hdr;


static ucs_status_t am_handler(void *arg, void *data, size_t length,
                               unsigned flags)
{
    if (length >= sizeof(g_am_hdr)) {
        memcpy(&g_am_hdr, data, sizeof(g_am_hdr));
    }
    ++g_am_count;
    return UCS_OK;
}


/* 1 when fd is readable within timeout_s, 0 when not; *elapsed_p seconds */
static int fd_wait(int fd, double timeout_s, double *elapsed_p)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    double start      = uct_test_now();
    int ret;

    do {
        ret = poll(&pfd, 1, (int)(timeout_s * 1000));
    } while ((ret < 0) && (errno == EINTR));

    if (elapsed_p != NULL) {
        *elapsed_p = uct_test_now() - start;
    }
    return ret > 0;
}


/* UCT's idiom: progress until nothing is left, arm, again while BUSY */
static ucs_status_t arm_until_ok(uct_test_node_t *node, unsigned events)
{
    double deadline = uct_test_now() + OP_TIMEOUT_S;
    unsigned count;
    ucs_status_t status;

    do {
        count  = uct_worker_progress(node->worker);
        status = uct_iface_event_arm(node->iface, events);
    } while (((status == UCS_ERR_BUSY) || (count != 0)) &&
             (uct_test_now() < deadline));
    return status;
}


/* Progresses node until *counter reaches target, bounded */
static int progress_until(uct_test_node_t *node, volatile int *counter,
                          int target)
{
    double deadline = uct_test_now() + OP_TIMEOUT_S;

    while ((*counter < target) && (uct_test_now() < deadline)) {
        uct_worker_progress(node->worker);
    }
    return *counter >= target;
}


/* BUSY_TRIES arms without progress: each must answer BUSY */
static int arm_stays_busy(uct_test_node_t *node, unsigned events,
                          ucs_status_t *last_p)
{
    int i;

    for (i = 0; i < BUSY_TRIES; ++i) {
        *last_p = uct_iface_event_arm(node->iface, events);
        if (*last_p != UCS_ERR_BUSY) {
            return 0;
        }
    }
    return 1;
}


static void node_open(uct_test_node_t *node, const char *dev)
{
    ucs_status_t status;

    uct_test_node_open(node, dev, BUF_SIZE);
    status = uct_iface_set_am_handler(node->iface, AM_ID, am_handler, node,
                                      0);
    if (status != UCS_OK) {
        uct_test_die("uct_iface_set_am_handler", status);
    }
}


typedef struct {
    uct_pending_req_t req;
    uct_ep_h          ep;
    int               done;
} pending_am_t;


static ucs_status_t pending_am_send(uct_pending_req_t *self)
{
    pending_am_t *p     = ucs_container_of(self, pending_am_t, req);
    ucs_status_t status = uct_ep_am_short(p->ep, AM_ID, 0x9e9d, NULL, 0);

    p->done = (status == UCS_OK);
    return status;
}


static size_t pack_hdr(void *dest, void *arg)
{
    memcpy(dest, arg, sizeof(uint64_t));
    return sizeof(uint64_t);
}


/* An active message from a, posted without progressing b */
static ucs_status_t send_am(uct_test_node_t *a, uint64_t hdr)
{
    uct_test_node_t *nodes[1] = {a};

    return UCT_TEST_RETRY(nodes, 1, uct_ep_am_short(a->ep, AM_ID, hdr, NULL,
                                                    0));
}


static void run_uct(const char *dev_a, const char *dev_b)
{
    const uint64_t flags = UCT_IFACE_FLAG_EVENT_SEND_COMP |
                           UCT_IFACE_FLAG_EVENT_RECV |
                           UCT_IFACE_FLAG_EVENT_RECV_SIG |
                           UCT_IFACE_FLAG_EVENT_FD;
    uct_test_node_t a, b, *nodes_a[1] = {&a}, *nodes[2] = {&a, &b};
    pending_am_t pending = {.done = 0};
    uct_test_wire_t wa, wb;
    uct_rkey_bundle_t rkey;
    uct_test_comp_t comp;
    ucs_status_t status;
    int fd_a, fd_b, ok, count;
    ssize_t packed;
    double elapsed;
    uct_iov_t iov;

    node_open(&a, dev_a);
    node_open(&b, dev_b);

    uct_test_check((a.iface_attr.cap.event_flags & flags) == flags,
                   "event flags SEND_COMP|RECV|RECV_SIG|FD advertised (0x%"
                   PRIx64
                   ")", (uint64_t)a.iface_attr.cap.event_flags);

    status = uct_iface_event_fd_get(a.iface, &fd_a);
    if (status == UCS_OK) {
        status = uct_iface_event_fd_get(b.iface, &fd_b);
    }
    uct_test_check(status == UCS_OK, "event fd of each interface (%s)",
                   ucs_status_string(status));
    if (status != UCS_OK) {
        goto out;
    }

    uct_test_check((fcntl(fd_b, F_GETFL) & O_NONBLOCK) &&
                   !fd_wait(fd_b, 0, NULL),
                   "event fd non-blocking, not readable before any arm");

    /* A request queued before the connection becomes dispatchable with no
     * completion: arm must send the caller to progress first. */
    pending.ep       = a.ep;
    pending.req.func = pending_am_send;
    status = uct_ep_pending_add(a.ep, &pending.req, 0);
    if (status != UCS_OK) {
        uct_test_die("uct_ep_pending_add before connecting", status);
    }
    uct_test_node_wire(&a, &wa);
    uct_test_node_wire(&b, &wb);
    uct_test_node_connect(&a, &wb);
    uct_test_node_connect(&b, &wa);
    status = uct_iface_event_arm(a.iface, UCT_EVENT_SEND_COMP);
    uct_test_check(status == UCS_ERR_BUSY,
                   "arm BUSY while a pending request can go (%s)",
                   ucs_status_string(status));
    g_am_count = 0;
    ok         = progress_until(&a, &pending.done, 1) &&
                 progress_until(&b, &g_am_count, 1);
    uct_test_check(ok, "progress sent the pending request (sent %d, arrived "
                   "%d)", pending.done, g_am_count);

    status = uct_rkey_unpack(a.component, wb.rkey, &rkey);
    if (status != UCS_OK) {
        uct_test_die("uct_rkey_unpack", status);
    }

    /* --- UCT_EVENT_RECV --- */
    status = arm_until_ok(&b, UCT_EVENT_RECV);
    uct_test_check(status == UCS_OK, "arm RECV once idle (%s)",
                   ucs_status_string(status));
    uct_test_check(!fd_wait(fd_b, QUIET_S, NULL),
                   "no event while nothing is sent (%.1f s)", QUIET_S);

    /* an RDMA write is no receive at its target */
    uct_test_comp_init(&comp);
    uct_test_iov_init(&iov, a.buf, 64, a.memh);
    status = UCT_TEST_RETRY(nodes_a, 1,
                            uct_ep_put_zcopy(a.ep, &iov, 1, wb.buf, rkey.rkey,
                                             &comp.comp));
    status = uct_test_comp_wait(nodes_a, 1, status, &comp);
    uct_test_check((status == UCS_OK) && !fd_wait(fd_b, QUIET_S / 2, NULL),
                   "a put raises no receive event at its target (%s)",
                   ucs_status_string(status));

    count  = g_am_count;
    status = send_am(&a, 0xa1);
    ok     = fd_wait(fd_b, WAKE_TIMEOUT_S, &elapsed);
    uct_test_check((status == UCS_OK) && ok,
                   "an active message wakes the receiver's fd (%.3f s)",
                   elapsed);
    ok = arm_stays_busy(&b, UCT_EVENT_RECV, &status);
    uct_test_check(ok && (g_am_count == count),
                   "arm BUSY until progress took the message (%d tries, "
                   "last %s)", BUSY_TRIES, ucs_status_string(status));
    ok = progress_until(&b, &g_am_count, count + 1);
    uct_test_check(ok && (g_am_count == count + 1) && (g_am_hdr == 0xa1),
                   "progress ran the handler once (%d messages, header 0x%"
                   PRIx64 ")", g_am_count - count, g_am_hdr);
    status = arm_until_ok(&b, UCT_EVENT_RECV);
    uct_test_check(status == UCS_OK, "arm RECV again (%s)",
                   ucs_status_string(status));

    /* A message that arrives while the queue is not armed (the event of
     * the last arm was taken) and before the next arm: no event announces
     * it, the arm must find it (else the receiver sleeps on it). */
    count  = g_am_count;
    status = send_am(&a, 0xa2);
    ok     = fd_wait(fd_b, WAKE_TIMEOUT_S, NULL) &&
             (uct_iface_event_arm(b.iface, UCT_EVENT_RECV) == UCS_ERR_BUSY) &&
             progress_until(&b, &g_am_count, count + 1);
    uct_test_check((status == UCS_OK) && ok,
                   "second message: woken, BUSY, delivered");

    count = g_am_count;
    uct_test_comp_init(&comp);
    uct_test_iov_init(&iov, a.buf, 8, a.memh);
    *(uint64_t*)a.buf = 0xa3;
    status = UCT_TEST_RETRY(nodes_a, 1,
                            uct_ep_am_zcopy(a.ep, AM_ID, NULL, 0, &iov, 1, 0,
                                            &comp.comp));
    /* delivered at the target once the sender's completion is there */
    status = uct_test_comp_wait(nodes_a, 1, status, &comp);
    usleep(200000);
    status = (status == UCS_OK) ?
             uct_iface_event_arm(b.iface, UCT_EVENT_RECV) : status;
    uct_test_check((status == UCS_ERR_BUSY) && (g_am_count == count),
                   "arm BUSY for a message that came before it (%s)",
                   ucs_status_string(status));
    ok = progress_until(&b, &g_am_count, count + 1);
    uct_test_check(ok && (g_am_hdr == 0xa3),
                   "that message is delivered by progress (header 0x%"
                   PRIx64 ")", g_am_hdr);

    /* --- UCT_EVENT_RECV_SIG: only signaled messages wake --- */
    /* A queue armed for every message stays so until a completion fires
     * it (verbs cannot take an arm back: the BUSY arm above left one), so
     * one message goes first, whatever it wakes. */
    count  = g_am_count;
    status = arm_until_ok(&b, UCT_EVENT_RECV_SIG);
    if (status == UCS_OK) {
        status = send_am(&a, 0xb0);
    }
    fd_wait(fd_b, QUIET_S, NULL);
    ok = progress_until(&b, &g_am_count, count + 1);
    uct_test_check((status == UCS_OK) && ok,
                   "a message clears what earlier arms left (%s)",
                   ucs_status_string(status));

    status = arm_until_ok(&b, UCT_EVENT_RECV_SIG);
    uct_test_check(status == UCS_OK, "arm RECV_SIG once idle (%s)",
                   ucs_status_string(status));
    count  = g_am_count;
    status = send_am(&a, 0xb1);
    uct_test_check((status == UCS_OK) && !fd_wait(fd_b, QUIET_S, NULL),
                   "an unsignaled message does not wake RECV_SIG (%s)",
                   ucs_status_string(status));
    ok = progress_until(&b, &g_am_count, count + 1);
    status = arm_until_ok(&b, UCT_EVENT_RECV_SIG);
    uct_test_check(ok && (status == UCS_OK),
                   "it is delivered by progress, arm again (%s)",
                   ucs_status_string(status));
    g_am_hdr = 0xb2;
    packed   = UCT_TEST_RETRY(nodes_a, 1,
                              uct_ep_am_bcopy(a.ep, AM_ID, pack_hdr,
                                              (void*)&g_am_hdr,
                                              UCT_SEND_FLAG_SIGNALED));
    ok       = fd_wait(fd_b, WAKE_TIMEOUT_S, &elapsed);
    uct_test_check((packed == sizeof(uint64_t)) && ok,
                   "a message sent with UCT_SEND_FLAG_SIGNALED wakes it "
                   "(%.3f s)", elapsed);
    ok = progress_until(&b, &g_am_count, count + 2);
    uct_test_check(ok, "and is delivered by progress");

    /* --- UCT_EVENT_SEND_COMP --- */
    status = arm_until_ok(&a, UCT_EVENT_SEND_COMP);
    uct_test_check(status == UCS_OK, "arm SEND_COMP once idle (%s)",
                   ucs_status_string(status));
    uct_test_check(!fd_wait(fd_a, QUIET_S, NULL),
                   "no event while nothing is sent (%.1f s)", QUIET_S);

    uct_test_fill(a.buf, BUF_SIZE, 77);
    memset(b.buf, 0, BUF_SIZE);
    uct_test_comp_init(&comp);
    uct_test_iov_init(&iov, a.buf, BUF_SIZE, a.memh);
    status = uct_ep_put_zcopy(a.ep, &iov, 1, wb.buf, rkey.rkey, &comp.comp);
    ok     = fd_wait(fd_a, WAKE_TIMEOUT_S, &elapsed);
    uct_test_check((status == UCS_INPROGRESS) && ok,
                   "put_zcopy's completion wakes the sender's fd (%s, "
                   "%.3f s)", ucs_status_string(status), elapsed);
    ok = arm_stays_busy(&a, UCT_EVENT_SEND_COMP, &status);
    uct_test_check(ok && (comp.comp.count == 1),
                   "arm BUSY until progress took the completion (%d tries, "
                   "last %s)", BUSY_TRIES, ucs_status_string(status));
    status = uct_test_comp_wait(nodes_a, 1, UCS_INPROGRESS, &comp);
    uct_test_check((status == UCS_OK) && !memcmp(a.buf, b.buf, BUF_SIZE),
                   "progress completes the put, data in place (%s)",
                   ucs_status_string(status));
    status = arm_until_ok(&a, UCT_EVENT_SEND_COMP);
    uct_test_check(status == UCS_OK, "arm SEND_COMP again (%s)",
                   ucs_status_string(status));

    /* both sides flushed; closing with events got but not yet acked */
    status = uct_test_ep_flush(nodes, 2, a.ep);
    uct_test_check(status == UCS_OK, "flush (%s)", ucs_status_string(status));
    uct_rkey_release(a.component, &rkey);

out:
    uct_test_node_close(&a);
    uct_test_node_close(&b);
    uct_test_check(1, "interfaces closed");
}


/* ------------------------------------------------------------- UCP -- */

typedef struct {
    ucp_worker_h worker;
    ucp_ep_h     ep;
    double       delay_s;
    uint64_t     value;
    ucs_status_t status;
} ucp_sender_t;


static void ucp_send_cb(void *request, ucs_status_t status, void *user_data)
{
}


static void ucp_recv_cb(void *request, ucs_status_t status,
                        const ucp_tag_recv_info_t *info, void *user_data)
{
}


/* The request's status, progressing the workers, bounded */
static ucs_status_t ucp_wait_req(ucp_worker_h *workers, int count, void *req)
{
    double deadline = uct_test_now() + OP_TIMEOUT_S;
    ucs_status_t status;
    int i;

    if (!UCS_PTR_IS_PTR(req)) {
        return UCS_PTR_STATUS(req);
    }

    while (((status = ucp_request_check_status(req)) == UCS_INPROGRESS) &&
           (uct_test_now() < deadline)) {
        for (i = 0; i < count; ++i) {
            ucp_worker_progress(workers[i]);
        }
    }
    if (status == UCS_INPROGRESS) {
        return UCS_ERR_TIMED_OUT; /* the request is left behind */
    }
    ucp_request_free(req);
    return status;
}


static void *ucp_sender_thread(void *arg)
{
    ucp_sender_t *s              = arg;
    ucp_request_param_t param    = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
                                    .cb.send      = ucp_send_cb};

    usleep((useconds_t)(s->delay_s * 1e6));
    s->status = ucp_wait_req(&s->worker, 1,
                             ucp_tag_send_nbx(s->ep, &s->value,
                                              sizeof(s->value), 1, &param));
    return NULL;
}


static void ucp_watchdog(int sig)
{
    static const char msg[] = "FAIL ucp_worker_wait did not return within "
                              "the watchdog's time\n";

    if (write(STDOUT_FILENO, msg, sizeof(msg) - 1) < 0) {
        /* nothing more to do */
    }
    _exit(1);
}


static void run_ucp(void)
{
    ucp_params_t params          = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                                    .features   = UCP_FEATURE_TAG |
                                                  UCP_FEATURE_WAKEUP};
    /* serialized, not single: worker 0 is set up here and then used by the
     * sender thread, and newer UCX asserts a single worker's owner */
    ucp_worker_params_t wparams  = {.field_mask  =
                                            UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                    .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    ucp_request_param_t sparam   = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
                                    .cb.send      = ucp_send_cb};
    ucp_request_param_t rparam   = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
                                    .cb.recv      = ucp_recv_cb};
    ucp_request_param_t cparam   = {.op_attr_mask = 0};
    ucp_sender_t sender          = {.delay_s = 0.5, .value = 0x5e4d};
    ucp_worker_h workers[2];
    ucp_address_t *addr[2];
    size_t addr_len[2];
    ucp_ep_h eps[2];
    ucp_context_h context;
    ucp_config_t *config;
    ucs_status_t status, wstatus;
    uint64_t value, got = 0;
    double start, elapsed;
    pthread_t thread;
    int efd, i, waits;
    void *req;

    if (ucp_config_read(NULL, NULL, &config) != UCS_OK) {
        uct_test_die("ucp_config_read", UCS_ERR_INVALID_PARAM);
    }
    status = ucp_init(&params, config, &context);
    ucp_config_release(config);
    if (status != UCS_OK) {
        uct_test_die("ucp_init", status);
    }

    for (i = 0; i < 2; ++i) {
        status = ucp_worker_create(context, &wparams, &workers[i]);
        if (status != UCS_OK) {
            uct_test_die("ucp_worker_create", status);
        }
        ucp_worker_get_address(workers[i], &addr[i], &addr_len[i]);
    }
    /* WAKEUP needs lanes with events: without them UCP finds no
     * transport for its active messages */
    eps[0] = eps[1] = NULL;
    for (i = 0; (i < 2) && (status == UCS_OK); ++i) {
        ucp_ep_params_t ep_params = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
            .address    = addr[1 - i]
        };
        status = ucp_ep_create(workers[i], &ep_params, &eps[i]);
    }
    uct_test_check(status == UCS_OK, "ucp_ep_create with UCP_FEATURE_WAKEUP "
                   "(%s)", ucs_status_string(status));
    if (status != UCS_OK) {
        goto out;
    }

    /* wire-up, both ways, both workers progressing */
    for (i = 0; i < 2; ++i) {
        value  = i;
        req    = ucp_tag_recv_nbx(workers[1 - i], &got, sizeof(got), 0, 0,
                                  &rparam);
        status = ucp_wait_req(workers, 2,
                              ucp_tag_send_nbx(eps[i], &value, sizeof(value),
                                               0, &sparam));
        if (status == UCS_OK) {
            status = ucp_wait_req(workers, 2, req);
        }
        if (status != UCS_OK) {
            uct_test_die("ucp wire-up message", status);
        }
    }

    status = ucp_worker_get_efd(workers[1], &efd);
    uct_test_check(status == UCS_OK, "ucp_worker_get_efd (%s)",
                   ucs_status_string(status));
    if (status != UCS_OK) {
        goto out;
    }

    /* the receiver: the idiom of ucp_worker_arm's documentation */
    got = 0;
    req = ucp_tag_recv_nbx(workers[1], &got, sizeof(got), 1, (ucp_tag_t)-1,
                           &rparam);
    if (UCS_PTR_IS_ERR(req)) {
        uct_test_die("ucp_tag_recv_nbx", UCS_PTR_STATUS(req));
    }
    start = uct_test_now();
    do {
        while (ucp_worker_progress(workers[1]) != 0) {
        }
        status = ucp_worker_arm(workers[1]);
    } while ((status == UCS_ERR_BUSY) &&
             (uct_test_now() < start + OP_TIMEOUT_S));
    uct_test_check(status == UCS_OK, "ucp_worker_arm once idle (%s)",
                   ucs_status_string(status));
    uct_test_check(!fd_wait(efd, QUIET_S, NULL),
                   "worker fd quiet while nothing is sent (%.1f s)", QUIET_S);

    /* the sender posts after a delay, from its own thread and worker */
    sender.worker = workers[0];
    sender.ep     = eps[0];
    if (pthread_create(&thread, NULL, ucp_sender_thread, &sender) != 0) {
        uct_test_die("pthread_create", UCS_ERR_NO_RESOURCE);
    }

    signal(SIGALRM, ucp_watchdog);
    alarm((unsigned)(2 * WAKE_TIMEOUT_S));
    start   = uct_test_now();
    waits   = 0;
    wstatus = UCS_OK;
    while ((ucp_request_check_status(req) == UCS_INPROGRESS) &&
           (uct_test_now() < start + WAKE_TIMEOUT_S) && (wstatus == UCS_OK)) {
        while (ucp_worker_progress(workers[1]) != 0) {
        }
        if (ucp_request_check_status(req) != UCS_INPROGRESS) {
            break;
        }
        wstatus = ucp_worker_wait(workers[1]); /* blocks: no timeout */
        ++waits;
    }
    elapsed = uct_test_now() - start;
    alarm(0);
    pthread_join(thread, NULL);

    status = ucp_request_check_status(req);
    uct_test_check((wstatus == UCS_OK) && (status == UCS_OK) &&
                   (sender.status == UCS_OK) && (got == sender.value),
                   "ucp_worker_wait wakes for a message (%.2f s, %d waits, "
                   "wait %s, recv %s, send %s)", elapsed, waits,
                   ucs_status_string(wstatus), ucs_status_string(status),
                   ucs_status_string(sender.status));
    if (status != UCS_INPROGRESS) {
        ucp_request_free(req);
    }

out:
    for (i = 0; i < 2; ++i) {
        if (eps[i] != NULL) {
            ucp_wait_req(workers, 2, ucp_ep_close_nbx(eps[i], &cparam));
        }
    }
    for (i = 0; i < 2; ++i) {
        ucp_worker_release_address(workers[i], addr[i]);
        ucp_worker_destroy(workers[i]);
    }
    ucp_cleanup(context);
}


int main(int argc, char **argv)
{
    uct_test_init("uct_event", OP_TIMEOUT_S);

    if ((argc == 4) && !strcmp(argv[1], "uct")) {
        run_uct(argv[2], argv[3]);
    } else if ((argc == 2) && !strcmp(argv[1], "ucp")) {
        run_ucp();
    } else {
        fprintf(stderr, "usage: %s uct DEV_A DEV_B | ucp\n", argv[0]);
        return 2;
    }

    return uct_test_summary();
}
