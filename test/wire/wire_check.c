/*
 * wire_check: UCP traffic between two hosts with every byte checked, and
 * the time an error takes to be reported. For test/wire/run.sh, run across
 * the two guests of contrib/rxe-vm.sh --hosts 2 (or any two hosts).
 *
 *   wire_check -s [-p PORT] [-u]                             server
 *   wire_check -c HOST [-p PORT] [-n ITERS] [-t SEC] [-w SEC] [-m MAXSIZE]
 *              [-o all|put|idle]
 *
 * The client connects to the server over TCP (addresses and a remote key
 * only), then runs iterations until ITERS are done or SEC seconds have
 * passed. One iteration, at a size cycling through 8 B .. MAXSIZE:
 *   put:  ucp_put_nbx of a pattern into the server's buffer, flush;
 *   get:  ucp_get_nbx of it back, compared with what was put;
 *   tag:  a tagged send of the pattern; the server checks every byte
 *         itself and sends it back; the echo is compared too.
 * Every request is waited for at most -w SEC (default 120): a request that
 * neither completes nor fails by then is reported as a hang.
 * -u (server): each receive is posted only once its message has arrived
 * (ucp_tag_probe_nb), so that every one takes UCP's path for a message
 * that came first (test/tnic/run.sh checks that path with it).
 * -o put: iterations of put + flush of MAXSIZE only, so that writes are in
 * flight nearly all the time; -o idle: one iteration, then a receive of a
 * message the server never sends, with nothing in flight (how long a
 * silent peer takes to be found when the endpoint does not send).
 *
 * Endpoints use UCP's peer error handling, so a failed peer ends requests
 * with an error. The client's last line is one of
 *   RESULT ok iters=N bytes=B bad=0 elapsed=S
 *   RESULT bad iters=N bytes=B bad=K elapsed=S          (bytes differed)
 *   RESULT error status="..." op=OP iters=N last_ok=T error_at=T elapsed=S
 *   RESULT hang op=OP iters=N last_ok=T waited=W elapsed=S
 * (T are CLOCK_REALTIME seconds, so a runner can subtract the time it
 * injected a fault.) Before it, once the first iteration has completed
 * (the endpoint wired up, every lane UCP uses connected), the client
 * prints "READY at=T": a runner that kills the peer host waits for it, so
 * that what it times is the transport's detection, not UCP's wire-up. Exit status: 0 ok, 1 bad bytes, 2 error, 3 hang,
 * 4 set-up failure.
 */

#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>


#define WIRE_TAG_DATA  0x1000ull
#define WIRE_TAG_ECHO  0x2000ull
#define WIRE_TAG_DONE  0x3000ull
#define WIRE_TAG_MASK  0xf000ull

static const size_t wire_sizes[] = {8, 1000, 8192, 65536, 262144, 1048576};

static ucp_context_h context;
static ucp_worker_h  worker;
static ucp_ep_h      ep;
static ucs_status_t  ep_status = UCS_OK;
static double        ep_error_at;
static double        wait_limit = 120;
static int           recv_late;  /* -u */


static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}


static void pattern_fill(uint8_t *buf, size_t size, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    size_t i;

    for (i = 0; i < size; ++i) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        buf[i] = (uint8_t)x;
    }
}


static size_t bytes_differing(const uint8_t *a, const uint8_t *b, size_t size)
{
    size_t i, n = 0;

    for (i = 0; i < size; ++i) {
        n += (a[i] != b[i]);
    }
    return n;
}


static void ep_error_cb(void *arg, ucp_ep_h e, ucs_status_t status)
{
    if (ep_status == UCS_OK) {
        ep_status   = status;
        ep_error_at = now_s();
    }
}


static void req_done_cb(void *request, ucs_status_t status, void *user)
{
}


static void tag_done_cb(void *request, ucs_status_t status,
                        const ucp_tag_recv_info_t *info, void *user)
{
}


/* Waits for REQ: UCS_OK, the request's error, or UCS_ERR_TIMED_OUT after
 * wait_limit seconds. */
static ucs_status_t request_wait(void *req)
{
    double deadline = now_s() + wait_limit;
    ucs_status_t status;
    unsigned n = 0;

    if (req == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(req)) {
        return UCS_PTR_STATUS(req);
    }

    while ((status = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
        if (ep_status != UCS_OK) {
            return ep_status; /* a receive is not failed with its peer */
        }
        if ((++n % 1024 == 0) && (now_s() > deadline)) {
            return UCS_ERR_TIMED_OUT; /* the request is leaked on purpose */
        }
    }
    ucp_request_free(req);
    return status;
}


static int sock_io(int fd, void *buf, size_t len, int send_it)
{
    size_t done = 0;
    ssize_t r;

    while (done < len) {
        r = send_it ? send(fd, (char*)buf + done, len - done, 0) :
                      recv(fd, (char*)buf + done, len - done, 0);
        if (r <= 0) {
            return -1;
        }
        done += r;
    }
    return 0;
}


static int blob_send(int fd, const void *p, uint64_t len)
{
    return sock_io(fd, &len, sizeof(len), 1) ||
           sock_io(fd, (void*)p, len, 1);
}


static void *blob_recv(int fd, uint64_t *len_p)
{
    void *p;

    if (sock_io(fd, len_p, sizeof(*len_p), 0) || (*len_p > (1u << 20)) ||
        ((p = malloc(*len_p + 1)) == NULL)) {
        return NULL;
    }
    if (sock_io(fd, p, *len_p, 0)) {
        free(p);
        return NULL;
    }
    return p;
}


/* A hang: rc_gdr's state, on the signal UCX_RC_GDR_STATE_SIGNAL names (a
 * number, USR1 or USR2, as the runner sets it), logged at the next progress;
 * nothing without it. */
static void state_dump(void)
{
    const char *name = getenv("UCX_RC_GDR_STATE_SIGNAL");
    double end;
    int signo;

    if (name == NULL) {
        return;
    }
    if (!strncmp(name, "SIG", 3)) {
        name += 3;
    }
    signo = !strcmp(name, "USR1") ? SIGUSR1 :
            !strcmp(name, "USR2") ? SIGUSR2 : atoi(name);
    if (signo <= 0) {
        return;
    }
    raise(signo);
    for (end = now_s() + 0.5; now_s() < end;) {
        ucp_worker_progress(worker);
    }
    fflush(stdout);
}


static int ucp_setup(void)
{
    ucp_params_t params     = {0};
    ucp_worker_params_t wparams = {0};
    ucs_status_t status;

    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_TAG | UCP_FEATURE_RMA;
    status = ucp_init(&params, NULL, &context);
    if (status != UCS_OK) {
        fprintf(stderr, "wire_check: ucp_init: %s\n", ucs_status_string(status));
        return -1;
    }
    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    status = ucp_worker_create(context, &wparams, &worker);
    if (status != UCS_OK) {
        fprintf(stderr, "wire_check: ucp_worker_create: %s\n",
                ucs_status_string(status));
        return -1;
    }
    return 0;
}


static int ep_create(const void *peer_addr)
{
    ucp_ep_params_t params = {0};
    ucs_status_t status;

    params.field_mask      = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                             UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                             UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address         = peer_addr;
    params.err_mode        = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb  = ep_error_cb;
    params.err_handler.arg = NULL;
    status = ucp_ep_create(worker, &params, &ep);
    if (status != UCS_OK) {
        fprintf(stderr, "wire_check: ucp_ep_create: %s\n",
                ucs_status_string(status));
        return -1;
    }
    return 0;
}


/* A receive that completes at once (the message had arrived) returns NULL
 * and fills INFO. */
static void *tag_recv(void *buf, size_t size, ucp_tag_t tag, ucp_tag_t mask,
                      ucp_tag_recv_info_t *info)
{
    ucp_request_param_t p = {0};

    /* Always a request, whose info ucp_tag_recv_request_test() gives: UCX
     * 1.13 leaves recv_info unwritten when the message had arrived before
     * the receive (its ucp.h promises it; ucp_tag_recv_nbx never reads it).
     * The server then echoed the 8 B message that follows a 256 KiB echo
     * under the previous tag and length, a rendezvous nobody received, and
     * both sides waited forever (doc/MEASUREMENTS.md, 2026-12-05). */
    p.op_attr_mask        = UCP_OP_ATTR_FIELD_CALLBACK |
                            UCP_OP_ATTR_FIELD_RECV_INFO |
                            UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv             = tag_done_cb;
    p.recv_info.tag_info  = info;
    return ucp_tag_recv_nbx(worker, buf, size, tag, mask, &p);
}


static void *tag_send(const void *buf, size_t size, ucp_tag_t tag)
{
    ucp_request_param_t p = {0};

    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
    p.cb.send      = req_done_cb;
    return ucp_tag_send_nbx(ep, buf, size, tag, &p);
}


static void *req_param_op(int op, void *buf, size_t size, uint64_t raddr,
                          ucp_rkey_h rkey)
{
    ucp_request_param_t p = {0};

    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
    p.cb.send      = req_done_cb;
    switch (op) {
    case 0:  return ucp_put_nbx(ep, buf, size, raddr, rkey, &p);
    case 1:  return ucp_get_nbx(ep, buf, size, raddr, rkey, &p);
    default: return ucp_ep_flush_nbx(ep, &p);
    }
}


/* The exchange fails instead of hanging when the peer host is gone (on
 * Linux the send timeout bounds connect() as well). */
static void sock_timeout(int fd, int seconds)
{
    struct timeval tv = {.tv_sec = seconds};

    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}


static int tcp_connect(const char *host, int port)
{
    struct addrinfo hints = {0}, *res;
    char port_s[16];
    double deadline;
    int fd;

    hints.ai_family   = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port_s, sizeof(port_s), "%d", port);
    if (getaddrinfo(host, port_s, &hints, &res) != 0) {
        fprintf(stderr, "wire_check: cannot resolve %s\n", host);
        return -1;
    }
    /* the server may still be starting; a host that is gone answers no
       SYN, and each connect() would wait minutes for it: 60 s in all */
    deadline = now_s() + 60;
    while (now_s() < deadline) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        sock_timeout(fd, 5);
        if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
            freeaddrinfo(res);
            sock_timeout(fd, 60);
            return fd;
        }
        close(fd);
        usleep(100000);
    }
    freeaddrinfo(res);
    fprintf(stderr, "wire_check: cannot connect to %s:%d: %m\n", host, port);
    return -1;
}


static int tcp_accept(int port)
{
    struct sockaddr_in sa = {0};
    int lfd, fd, one = 1;

    lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sa.sin_family      = AF_INET;
    sa.sin_port        = htons(port);
    sa.sin_addr.s_addr = INADDR_ANY;
    if (bind(lfd, (struct sockaddr*)&sa, sizeof(sa)) || listen(lfd, 1)) {
        fprintf(stderr, "wire_check: listen on %d: %m\n", port);
        return -1;
    }
    fd = accept(lfd, NULL, NULL);
    close(lfd);
    if (fd >= 0) {
        sock_timeout(fd, 60);
    }
    return fd;
}


/* The server: exposes a buffer for put/get, checks and echoes tagged
 * messages until the client says it is done or the endpoint fails. */
static int run_server(int port, size_t max_size)
{
    ucp_mem_map_params_t mp = {0};
    ucp_mem_h memh;
    void *rkey_buf, *peer, *req;
    size_t rkey_len, addr_len, bad = 0, msgs = 0, size;
    ucp_address_t *addr;
    uint8_t *region, *buf, *want;
    uint64_t len, raddr;
    ucp_tag_recv_info_t info, pinfo;
    ucs_status_t status;
    int fd;

    region = calloc(1, max_size);
    buf    = malloc(max_size);
    want   = malloc(max_size);
    if ((fd = tcp_accept(port)) < 0) {
        return 4;
    }
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                    UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address    = region;
    mp.length     = max_size;
    if ((ucp_mem_map(context, &mp, &memh) != UCS_OK) ||
        (ucp_rkey_pack(context, memh, &rkey_buf, &rkey_len) != UCS_OK) ||
        (ucp_worker_get_address(worker, &addr, &addr_len) != UCS_OK)) {
        fprintf(stderr, "wire_check: server set-up failed\n");
        return 4;
    }
    raddr = (uintptr_t)region;
    if (blob_send(fd, addr, addr_len) || blob_send(fd, rkey_buf, rkey_len) ||
        blob_send(fd, &raddr, sizeof(raddr)) ||
        ((peer = blob_recv(fd, &len)) == NULL) || ep_create(peer)) {
        fprintf(stderr, "wire_check: server exchange failed\n");
        return 4;
    }
    printf("wire_check: server ready\n");
    fflush(stdout);

    for (;;) {
        while (recv_late && (ep_status == UCS_OK) &&
               (ucp_tag_probe_nb(worker, 0, 0, 0, &pinfo) == NULL)) {
            ucp_worker_progress(worker);
        }
        memset(&info, 0, sizeof(info)); /* never a previous message's */
        req = tag_recv(buf, max_size, 0, 0, &info);
        if (UCS_PTR_IS_ERR(req)) {
            status = UCS_PTR_STATUS(req);
            break;
        }
        while ((status = ucp_request_check_status(req)) == UCS_INPROGRESS) {
            ucp_worker_progress(worker);
            if (ep_status != UCS_OK) {
                break;
            }
        }
        if (status == UCS_INPROGRESS) {
            status = ep_status;
            break;
        }
        ucp_tag_recv_request_test(req, &info);
        ucp_request_free(req);
        if ((status != UCS_OK) ||
            ((info.sender_tag & WIRE_TAG_MASK) == WIRE_TAG_DONE)) {
            break;
        }
        size = info.length;
        pattern_fill(want, size, info.sender_tag & ~WIRE_TAG_MASK);
        bad += bytes_differing(buf, want, size);
        ++msgs;
        status = request_wait(tag_send(buf, size, WIRE_TAG_ECHO |
                                       (info.sender_tag & ~WIRE_TAG_MASK)));
        if (status != UCS_OK) {
            break;
        }
    }
    printf("wire_check: server: %zu messages checked, %zu bad bytes, "
           "ended with %s\n", msgs, bad, ucs_status_string(status));
    return bad ? 1 : (status == UCS_OK) ? 0 : 2;
}


static const char *op_names[] = {"put", "get", "flush", "tag_send",
                                 "tag_echo", "idle_recv"};
static const char *mode = "all";


/* After the first iteration: the endpoint is wired up and its lanes work */
static void client_ready(long i, double at)
{
    if (i == 0) {
        printf("READY at=%.3f\n", at);
        fflush(stdout);
    }
}


static int run_client(const char *host, int port, long iters,
                      double seconds, size_t max_size)
{
    uint8_t *src, *dst;
    uint64_t len, raddr, *raddr_p;
    void *peer, *rkey_buf, *req[2];
    ucp_address_t *addr;
    size_t addr_len, size, bad = 0, bytes = 0;
    ucp_tag_recv_info_t rinfo;
    ucp_rkey_h rkey;
    ucs_status_t status = UCS_OK;
    double t0, last_ok;
    long i;
    int fd, op = 0, nsizes = 0;

    while ((nsizes < (int)(sizeof(wire_sizes) / sizeof(wire_sizes[0]))) &&
           (wire_sizes[nsizes] <= max_size)) {
        ++nsizes;
    }
    src = malloc(max_size);
    dst = malloc(max_size);
    if ((fd = tcp_connect(host, port)) < 0) {
        return 4;
    }
    if (((peer = blob_recv(fd, &len)) == NULL) ||
        ((rkey_buf = blob_recv(fd, &len)) == NULL) ||
        ((raddr_p = blob_recv(fd, &len)) == NULL) || ep_create(peer) ||
        (ucp_ep_rkey_unpack(ep, rkey_buf, &rkey) != UCS_OK) ||
        (ucp_worker_get_address(worker, &addr, &addr_len) != UCS_OK) ||
        blob_send(fd, addr, addr_len)) {
        fprintf(stderr, "wire_check: client exchange failed\n");
        return 4;
    }
    raddr   = *raddr_p;
    t0      = now_s();
    last_ok = t0;

    for (i = 0; ((iters <= 0) || (i < iters)) &&
                ((seconds <= 0) || (now_s() - t0 < seconds)); ++i) {
        size = wire_sizes[i % nsizes];
        if (!strcmp(mode, "put")) {
            op     = 0;
            status = request_wait(req_param_op(0, src, max_size, raddr, rkey));
            if (status == UCS_OK) {
                op     = 2;
                status = request_wait(req_param_op(2, NULL, 0, 0, NULL));
            }
            if (status != UCS_OK) {
                break;
            }
            bytes  += max_size;
            last_ok = now_s();
            client_ready(i, last_ok);
            continue;
        }
        if (!strcmp(mode, "idle") && (i == 1)) {
            op     = 5;
            status = request_wait(tag_recv(dst, size, WIRE_TAG_DONE, ~0ull,
                                           &rinfo));
            break;
        }
        pattern_fill(src, size, i);
        memset(dst, 0, size);
        /* put + flush, then get it back */
        op     = 0;
        status = request_wait(req_param_op(0, src, size, raddr, rkey));
        if (status == UCS_OK) {
            op     = 2;
            status = request_wait(req_param_op(2, NULL, 0, 0, NULL));
        }
        if (status == UCS_OK) {
            op     = 1;
            status = request_wait(req_param_op(1, dst, size, raddr, rkey));
        }
        if (status != UCS_OK) {
            break;
        }
        bad += bytes_differing(src, dst, size);
        /* tag: the server checks, and echoes */
        memset(dst, 0, size);
        req[1] = tag_recv(dst, size, WIRE_TAG_ECHO | i, ~0ull, &rinfo);
        op     = 3;
        status = request_wait(tag_send(src, size, WIRE_TAG_DATA | i));
        if (status != UCS_OK) {
            break;
        }
        op     = 4;
        status = request_wait(req[1]);
        if (status != UCS_OK) {
            break;
        }
        bad    += bytes_differing(src, dst, size);
        bytes  += 3 * size;
        last_ok = now_s();
        client_ready(i, last_ok);
        if (ep_status != UCS_OK) {
            status = ep_status;
            break;
        }
    }

    if (status == UCS_ERR_TIMED_OUT) {
        state_dump();
        printf("RESULT hang op=%s iters=%ld last_ok=%.3f waited=%.0f "
               "elapsed=%.3f\n", op_names[op], i, last_ok, wait_limit,
               now_s() - t0);
        return 3;
    }
    if (status != UCS_OK) {
        printf("RESULT error status=\"%s\" op=%s iters=%ld last_ok=%.3f "
               "error_at=%.3f elapsed=%.3f\n", ucs_status_string(status),
               op_names[op], i, last_ok, ep_error_at ? ep_error_at : now_s(),
               now_s() - t0);
        return 2;
    }
    /* tell the server to stop; best effort */
    request_wait(tag_send(src, 0, WIRE_TAG_DONE));
    request_wait(req_param_op(2, NULL, 0, 0, NULL));
    printf("RESULT %s iters=%ld bytes=%zu bad=%zu elapsed=%.3f\n",
           bad ? "bad" : "ok", i, bytes, bad, now_s() - t0);
    return bad ? 1 : 0;
}


int main(int argc, char **argv)
{
    const char *host = NULL;
    size_t max_size  = 1048576;
    double seconds   = 0;
    long iters       = 0;
    int server = 0, port = 13600, c;

    while ((c = getopt(argc, argv, "sc:p:n:t:w:m:o:u")) != -1) {
        switch (c) {
        case 's': server = 1; break;
        case 'u': recv_late = 1; break;
        case 'c': host = optarg; break;
        case 'p': port = atoi(optarg); break;
        case 'n': iters = atol(optarg); break;
        case 't': seconds = atof(optarg); break;
        case 'w': wait_limit = atof(optarg); break;
        case 'm': max_size = strtoul(optarg, NULL, 0); break;
        case 'o': mode = optarg; break;
        default:
            fprintf(stderr, "usage: wire_check -s [-u] | -c HOST [-p PORT] "
                    "[-n ITERS] [-t SEC] [-w SEC] [-m MAXSIZE] [-o all|put|idle]\n");
            return 4;
        }
    }
    if ((server == (host != NULL)) || (max_size < 8)) {
        fprintf(stderr, "wire_check: one of -s and -c HOST\n");
        return 4;
    }
    if ((iters <= 0) && (seconds <= 0)) {
        iters = 50;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (ucp_setup()) {
        return 4;
    }
    return server ? run_server(port, max_size) :
                    run_client(host, port, iters, seconds, max_size);
}
