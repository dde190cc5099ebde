/*
 * The stand-in NIC: a user-space RC/UD device behind a replacement
 * libibverbs.so.1, for tests only (test/tnic/README.md).
 *
 * Internal header shared by the units:
 *   tnic_verbs.c   the verbs entry points and the objects they make
 *   tnic_fabric.c  the shared-memory registry of processes and their inboxes
 *   tnic_engine.c  the device's executor: requests, responses, timers
 *   tnic_fault.c   faults on demand (RC_GDR_TNIC_FAULT, tnic_test_fault_set)
 *   tnic_mem.c     the memory accessor of a registration
 *
 * Concurrency: one process-wide lock (tnic_proc.lock) guards every object of
 * the stand-in; the device thread and ibv_poll_cq take it to serve the
 * inbox. It is a test double: simple and checkable beats fast.
 */

#ifndef TNIC_H_
#define TNIC_H_

#include <infiniband/verbs.h>

#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#define TNIC_MAX_DEVICES     16
#define TNIC_DEFAULT_DEVICES 2
#define TNIC_SEG_MAX         4096    /* payload bytes in one ring cell */
#define TNIC_RING_CELLS      1024    /* cells in a process's inbox */
#define TNIC_MAX_SLOTS       255     /* processes on one fabric (1..254) */
#define TNIC_MAX_SGE         16
#define TNIC_MAX_INLINE      1024
#define TNIC_MAX_QP_WR       16384
#define TNIC_MAX_SRQ_WR      32767
#define TNIC_MAX_CQE         (4 * 1024 * 1024 - 1)
#define TNIC_MAX_RD_ATOM     16
#define TNIC_MAX_QPS         65535   /* QPN = slot << 16 | index */
#define TNIC_MAX_MR_MSG      (1ul << 31)  /* one message */
#define TNIC_MAX_MR_SIZE     (1ull << 46) /* one registration */
#define TNIC_GRH_LEN         40
#define TNIC_UD_MTU          4096
#define TNIC_VENDOR_ID       0x7e57  /* not Mellanox: UCX keeps to verbs */
#define TNIC_VENDOR_PART_ID  0x0001
#define TNIC_GUID_BASE       0x7e57000000000000ull
#define TNIC_MR_INDEX_BITS   20
#define TNIC_POLLING_NS      200000  /* an application polled this recently */

/* Messages between devices (one ring cell each) */
enum {
    TNIC_MSG_REQ = 1,      /* send / write / read / atomic request segment */
    TNIC_MSG_UD,           /* a UD datagram */
    TNIC_MSG_ACK,          /* a request message executed */
    TNIC_MSG_NAK,          /* refused: status says why (RNR included) */
    TNIC_MSG_READ_RESP,    /* read response segment */
    TNIC_MSG_ATOMIC_RESP,  /* the original value at the target */
    TNIC_MSG_LOST          /* not a packet: the request reached no QP that
                              takes it (destroyed, not connected, in
                              error), where a fabric answers with silence;
                              it lets the requester's transport timer count
                              the try as lost */
};

enum {
    TNIC_MSG_F_FIRST     = 1u << 0,
    TNIC_MSG_F_LAST      = 1u << 1,
    TNIC_MSG_F_SOLICITED = 1u << 2,
    TNIC_MSG_F_IMM       = 1u << 3,
    TNIC_MSG_F_GRH       = 1u << 4
};

#define TNIC_NAK_RNR 0xffff  /* a NAK's status: receiver not ready */

typedef struct tnic_msg_hdr {
    uint8_t     type;
    uint8_t     opcode;        /* enum ibv_wr_opcode of the request */
    uint16_t    flags;
    uint32_t    len;           /* payload bytes in this cell */
    uint32_t    src_slot;
    uint32_t    src_qpn;
    uint32_t    dst_qpn;
    uint32_t    psn;           /* message number within the initiator QP */
    uint32_t    epoch;         /* bumped by each go-back (an RNR NAK, the
                                  transport timer) */
    uint32_t    status;        /* NAK: enum ibv_wc_status or TNIC_NAK_RNR */
    uint32_t    imm;
    uint32_t    rkey;
    uint32_t    qkey;
    uint16_t    src_lid;
    uint16_t    dst_lid;
    uint64_t    raddr;
    uint64_t    offset;        /* of this segment within the message */
    uint64_t    total_len;
    uint64_t    compare_add;
    uint64_t    swap;
} tnic_msg_hdr_t;

/* Memory accessor of a registration: the engine reaches registered memory
 * only through it, as a NIC reaches memory over PCIe. Host memory is a
 * memcpy; a later change can reach device memory through its driver. */
typedef struct tnic_mem_ops {
    int (*read)(void *mr_priv, uint64_t addr, void *dst, size_t len);
    int (*write)(void *mr_priv, uint64_t addr, const void *src, size_t len);
    /* 8-byte atomic at addr: fetch-and-add or compare-and-swap */
    int (*atomic)(void *mr_priv, uint64_t addr, int is_cswap,
                  uint64_t compare_add, uint64_t swap, uint64_t *orig_p);
    /* at deregistration: what the accessor kept for the MR (may be NULL) */
    void (*release)(void *mr_priv);
} tnic_mem_ops_t;

extern const tnic_mem_ops_t tnic_mem_host_ops;

/* tnic_cuda.c: which accessor reaches [addr, addr + length): host memory,
 * or device memory through the CUDA driver (peermem); an errno when the
 * NIC cannot register it */
int tnic_cuda_reg_classify(void *addr, size_t length,
                           const tnic_mem_ops_t **ops_p, void **priv_p);
/* An exported dma-buf of device memory, reached at [iova, iova + length) */
int tnic_dmabuf_resolve(int fd, uint64_t offset, size_t length,
                        uint64_t iova, const tnic_mem_ops_t **ops_p,
                        void **priv_p);

typedef struct tnic_device {
    struct ibv_device   ibdev;
    int                 index;
    uint16_t            lid;
    uint64_t            guid;      /* host order */
} tnic_device_t;

typedef struct tnic_context {
    char                 pad[512]; /* members later rdma-core releases
                                      prepend to struct verbs_context */
    struct verbs_context vctx;     /* its ibv_context is the last member */
    tnic_device_t        *dev;
    int                  async_wfd;
} tnic_context_t;

typedef struct tnic_pd {
    struct ibv_pd       pd;
    tnic_context_t      *ctx;
} tnic_pd_t;

typedef struct tnic_mr {
    struct ibv_mr       mr;
    tnic_pd_t           *pd;
    int                 access;
    uint64_t            iova;
    uint32_t            index;
    const tnic_mem_ops_t *mem_ops;
    void                *mem_priv;
} tnic_mr_t;

typedef struct tnic_cqe {
    struct ibv_wc       wc;
    uint64_t            visible_ns;  /* the delay fault holds it until then */
} tnic_cqe_t;

typedef struct tnic_comp_channel {
    struct ibv_comp_channel chan;
    int                     wfd;
} tnic_comp_channel_t;

typedef struct tnic_cq {
    struct ibv_cq       cq;
    tnic_context_t      *ctx;
    tnic_cqe_t          *ring;
    unsigned            size;       /* real room (the cq fault may shrink) */
    unsigned            head;
    unsigned            count;
    int                 armed;      /* 0, 1 = next, 2 = solicited only */
    int                 overrun;
} tnic_cq_t;

typedef struct tnic_recv_wqe {
    uint64_t            wr_id;
    int                 num_sge;
    struct ibv_sge      sg[TNIC_MAX_SGE];
} tnic_recv_wqe_t;

typedef struct tnic_rq {
    tnic_recv_wqe_t     *wqes;
    unsigned            size;
    unsigned            head;
    unsigned            count;
    unsigned            max_sge;
} tnic_rq_t;

typedef struct tnic_srq {
    struct ibv_srq      srq;
    tnic_pd_t           *pd;
    tnic_rq_t           rq;
    unsigned            limit;      /* armed limit, 0 = not armed */
} tnic_srq_t;

enum {
    TNIC_WQE_POSTED = 0,   /* not yet transmitted */
    TNIC_WQE_SENT,         /* waiting for its ACK / response */
    TNIC_WQE_DONE          /* answered, waiting for its turn to complete */
};

typedef struct tnic_send_wqe {
    uint64_t            wr_id;
    uint32_t            psn;
    int                 opcode;     /* enum ibv_wr_opcode */
    unsigned            send_flags;
    int                 state;
    int                 status;     /* enum ibv_wc_status once done */
    int                 num_sge;
    struct ibv_sge      sg[TNIC_MAX_SGE];
    uint64_t            total_len;
    uint32_t            imm;
    uint32_t            rkey;
    uint64_t            raddr;
    uint64_t            compare_add;
    uint64_t            swap;
    /* UD */
    uint32_t            ud_qpn;
    uint32_t            ud_qkey;
    uint16_t            ud_dlid;
    int                 ud_global;
    /* transport timer */
    uint64_t            deadline_ns;
    uint64_t            drops_at;      /* the fabric's drops at this try */
    unsigned            retries;
    int                 lost;          /* TNIC_MSG_LOST came for this try */
    int                 forced_status; /* the wc_error fault, -1 = none */
    uint8_t             *inline_data;  /* IBV_SEND_INLINE copy */
} tnic_send_wqe_t;

/* An atomic the responder executed: its result, for a repeat of it */
typedef struct tnic_rx_atomic {
    uint32_t            psn;
    int                 valid;
    uint64_t            value;
} tnic_rx_atomic_t;

typedef struct tnic_qp {
    struct ibv_qp       qp;
    tnic_context_t      *ctx;
    tnic_pd_t           *pd;
    tnic_cq_t           *send_cq;
    tnic_cq_t           *recv_cq;
    tnic_srq_t          *srq;
    int                 sq_sig_all;
    struct ibv_qp_cap   cap;
    struct ibv_qp_attr  attr;       /* what modify_qp set */
    /* send queue: psn of the oldest uncompleted, the next to transmit and
     * the next to post */
    tnic_send_wqe_t     *sq;
    uint32_t            sq_head;
    uint32_t            sq_tx;
    uint32_t            sq_tail;
    uint32_t            epoch;
    int                 rnr_wait;
    uint64_t            rnr_resend_ns;
    uint64_t            answered_ns;  /* the last answer that moved us on */
    unsigned            rnr_retries;
    tnic_rq_t           rq;
    /* responder */
    uint32_t            rx_psn;     /* the message expected next */
    int                 rx_dropping;
    uint32_t            rx_nak_epoch;
    int                 rx_active;  /* a multi-segment message is open */
    uint32_t            rx_epoch;   /* the try it came with */
    tnic_recv_wqe_t     rx_wqe;
    int                 rx_has_wqe;
    /* the last atomics executed, answered again to their repeats */
    tnic_rx_atomic_t    rx_atomics[TNIC_MAX_RD_ATOM];
    tnic_mr_t           *rx_mr;
    uint32_t            rx_mr_key;
    struct tnic_qp      *next;      /* the process's QP list */
} tnic_qp_t;

typedef struct tnic_ah {
    struct ibv_ah       ah;
    struct ibv_ah_attr  attr;
} tnic_ah_t;

typedef struct tnic_counters_int {
    long                pds, mrs, cqs, srqs, qps, ahs, wrs;
    uint64_t            reg_bytes;
} tnic_counters_int_t;

/* Everything of this process */
typedef struct tnic_proc {
    pthread_mutex_t     lock;
    int                 initialized;
    pid_t               pid;
    int                 num_devices;
    tnic_device_t       devices[TNIC_MAX_DEVICES];
    /* fabric */
    int                 slot;       /* this process's slot, 0 = not attached */
    void                *registry;
    void                *inbox;
    int                 thread_started;
    pthread_t           thread;
    /* objects */
    tnic_qp_t           **qps;      /* by QPN index */
    uint32_t            qp_next;
    tnic_mr_t           **mrs;      /* by key index */
    uint32_t            mr_cap;
    uint32_t            mr_next;
    tnic_qp_t           *qp_list;
    tnic_counters_int_t counters;
    uint64_t            rand_state;
} tnic_proc_t;

extern tnic_proc_t tnic_proc;

/* tnic_verbs.c */
void tnic_proc_init(void);
uint64_t tnic_time_ns(void);
uint32_t tnic_rand32(void);
tnic_mr_t *tnic_mr_lookup(uint32_t key);
tnic_qp_t *tnic_qp_lookup(uint32_t qpn);
void tnic_async_event(tnic_context_t *ctx, enum ibv_event_type type,
                      void *element);

/* tnic_cq: completion queue operations (in tnic_verbs.c) */
void tnic_cq_push(tnic_cq_t *cq, const struct ibv_wc *wc, int solicited);

/* tnic_fabric.c */
int tnic_fabric_attach(void);
int tnic_fabric_send(uint32_t dst_slot, const tnic_msg_hdr_t *hdr,
                     const void *data);
int tnic_fabric_recv(tnic_msg_hdr_t *hdr, void *data);
int tnic_fabric_flush_backlog(void);
int tnic_fabric_peer_alive(uint32_t slot);
void tnic_fabric_wait(uint64_t timeout_ns);
void tnic_fabric_fork_child(void);
pid_t tnic_fabric_slot_pid(uint32_t slot);
int tnic_fabric_inbox_empty(void);
int tnic_fabric_backlog_pending(void);
void tnic_fabric_polled(void);
int tnic_fabric_abandon_cell(uint32_t slot);
void tnic_fabric_note_drop(void);
uint64_t tnic_fabric_drops(void);

/* tnic_engine.c */
int tnic_engine_post_send(tnic_qp_t *qp, struct ibv_send_wr *wr);
void tnic_engine_sq_kick(tnic_qp_t *qp);
int tnic_engine_progress(unsigned max_msgs);
void tnic_engine_timers(void);
void tnic_engine_qp_error(tnic_qp_t *qp);
int tnic_engine_rq_post(tnic_rq_t *rq, struct ibv_recv_wr *wr);
void tnic_engine_thread_start(void);

/* What a registration asking IBV_ACCESS_RELAXED_ORDERING gets */
enum {
    TNIC_RELAXED_ORDER_TAKE,   /* recorded with the MR (the default) */
    TNIC_RELAXED_ORDER_REFUSE, /* EINVAL: a library or kernel without it */
    TNIC_RELAXED_ORDER_DROP    /* silently dropped, as rdma-core does where
                                  the kernel lacks optional access flags */
};

/* tnic_fault.c */
typedef struct tnic_fault {
    long                wc_error_after;   /* -1 = off */
    int                 wc_error_status;
    long                qp_error_after;
    uint64_t            reg_budget;       /* 0 = none */
    int                 reg_errno;        /* 0 = none */
    long                reg_errno_after;
    uint64_t            delay_ns;
    unsigned            cq_max;           /* 0 = honour cqe */
    int                 dmabuf;    /* ibv_reg_dmabuf_mr served */
    int                 peermem;   /* ibv_reg_mr reaches device memory */
    int                 relaxed_order; /* TNIC_RELAXED_ORDER_xx */
    int                 drop_all;
    pid_t               drop_pid;
    int                 drop_lid;
    unsigned            dup_pct;   /* RC requests delivered twice, % */
    int                 rnr_all;   /* no SEND finds a receive here */
    uint32_t            dup_seed;
} tnic_fault_t;

extern tnic_fault_t tnic_fault;

int tnic_fault_parse(const char *spec);
void tnic_fault_reset(void);
/* the per-WR fault decisions: 0 = none */
int tnic_fault_on_post(int *status_p, int *qp_error_p);
int tnic_fault_drop(uint32_t slot, uint16_t src_lid, uint16_t dst_lid);
int tnic_fault_dup(void);

#define TNIC_LOG(_fmt, ...) \
    tnic_log(__FILE__, __LINE__, _fmt, ## __VA_ARGS__)
void tnic_log(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
