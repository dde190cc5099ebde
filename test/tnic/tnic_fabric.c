/*
 * The stand-in NIC's fabric: the wire between the devices of all processes
 * on this machine that use the same fabric name.
 *
 * - A registry (/dev/shm/rc_gdr_tnic.<fabric>.reg): one slot per process,
 *   claimed by compare-and-swap of its pid. A QPN carries the slot of the
 *   process that owns the QP (QPN = slot << 16 | index), so a request is
 *   routed to the process whose memory it targets, as a packet to a host.
 * - An inbox per process (/dev/shm/rc_gdr_tnic.<fabric>.<slot>): a bounded
 *   multi-producer ring of cells (Vyukov's sequence-numbered queue) that
 *   carries request segments, responses and ACK/NAKs. Only the owner
 *   consumes it; an idle owner sleeps on a futex in the ring. A producer
 *   killed between claiming a cell and filling it would wedge the ring, as
 *   a wire never does: each producer names itself in the inbox while it
 *   writes, and the owner skips a cell that stays empty once every such
 *   writer is dead.
 * - A backlog of cells that did not fit a full ring: no producer ever blocks
 *   on a peer (two devices feeding each other's full rings would otherwise
 *   deadlock); it is FIFO per destination, so a QP's order is kept and a
 *   slow peer holds back only what goes to it.
 *
 * No process maps another process's memory: only registries and inboxes.
 */

#define _GNU_SOURCE
#include "tnic.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define TNIC_INBOX_MAGIC 0x74696e6963626f78ull

typedef struct tnic_slot {
    volatile int32_t    pid;
    volatile uint32_t   generation;
    volatile uint64_t   start_time;  /* /proc/<pid>/stat: pid reuse check */
    volatile uint32_t   ready;
    uint32_t            pad[9];
} tnic_slot_t;

typedef struct tnic_registry {
    tnic_slot_t         slots[TNIC_MAX_SLOTS + 1];
    volatile uint64_t   drops;   /* messages the drop fault lost, anywhere */
} tnic_registry_t;

typedef struct tnic_cell {
    volatile uint64_t   seq;
    tnic_msg_hdr_t      hdr;
    uint8_t             data[TNIC_SEG_MAX];
} tnic_cell_t;

typedef struct tnic_inbox {
    uint64_t            magic;
    uint64_t            pad0[7];
    volatile uint64_t   tail __attribute__((aligned(64)));
    volatile uint64_t   head __attribute__((aligned(64)));
    volatile uint32_t   futex __attribute__((aligned(64)));
    volatile uint32_t   sleeping;
    volatile uint64_t   polled_ns;   /* the owner's last ibv_poll_cq */
    /* the pid of each slot's process while it writes a cell here */
    volatile int32_t    writer[TNIC_MAX_SLOTS + 1];
    tnic_cell_t         cells[TNIC_RING_CELLS] __attribute__((aligned(64)));
} tnic_inbox_t;

typedef struct tnic_peer_map {
    tnic_inbox_t        *inbox;
    uint32_t            generation;
} tnic_peer_map_t;

typedef struct tnic_backlog_entry {
    struct tnic_backlog_entry *next;
    tnic_msg_hdr_t            hdr;
    uint8_t                   data[];
} tnic_backlog_entry_t;

/* The cells waiting for one destination's ring, oldest first: a flush
 * stops at the first that does not fit, so a large message held back costs
 * each later cell O(1), not a walk of all before it */
typedef struct tnic_backlog {
    tnic_backlog_entry_t *head;
    tnic_backlog_entry_t *tail;
    unsigned             count;
} tnic_backlog_t;

static tnic_peer_map_t      tnic_peers[TNIC_MAX_SLOTS + 1];
static tnic_backlog_t       tnic_backlogs[TNIC_MAX_SLOTS + 1];
static unsigned             tnic_backlog_total; /* cells, all destinations */
static char                 tnic_fabric_name[128];
static pid_t                tnic_fabric_owner; /* who unlinks at exit */

/* The owner's view of a head cell that stays claimed and empty */
static uint64_t             tnic_stuck_head = UINT64_MAX;
static uint64_t             tnic_stuck_since_ns;

static tnic_registry_t *tnic_registry(void)
{
    return tnic_proc.registry;
}

static void tnic_fabric_path(char *buf, size_t max, const char *what)
{
    snprintf(buf, max, "/dev/shm/rc_gdr_tnic.%s.%s", tnic_fabric_name, what);
}

static void tnic_fabric_inbox_path(char *buf, size_t max, uint32_t slot)
{
    char what[16];

    snprintf(what, sizeof(what), "%u", slot);
    tnic_fabric_path(buf, max, what);
}

static uint64_t tnic_pid_start_time(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long long start = 0;
    int fd, i;
    ssize_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    /* the command name may hold spaces: count fields after its ')' */
    p = strrchr(buf, ')');
    if (p == NULL) {
        return 0;
    }
    for (i = 0; (i < 20) && (p != NULL); ++i) {
        p = strchr(p + 1, ' ');
    }
    if ((p == NULL) || (sscanf(p + 1, "%llu", &start) != 1)) {
        return 0;
    }
    return start;
}

static int tnic_pid_alive(pid_t pid, uint64_t start_time)
{
    if (pid <= 0) {
        return 0;
    }
    if ((kill(pid, 0) != 0) && (errno != EPERM)) {
        return 0;
    }
    /* a reused pid is another process: the owner is gone */
    return (start_time == 0) || (tnic_pid_start_time(pid) == start_time);
}

int tnic_fabric_peer_alive(uint32_t slot)
{
    tnic_slot_t *s;

    if ((slot == 0) || (slot > TNIC_MAX_SLOTS) ||
        (tnic_registry() == NULL)) {
        return 0;
    }
    if (slot == (uint32_t)tnic_proc.slot) {
        return 1;
    }
    s = &tnic_registry()->slots[slot];
    return s->ready && tnic_pid_alive(s->pid, s->start_time);
}

pid_t tnic_fabric_slot_pid(uint32_t slot)
{
    if ((slot == 0) || (slot > TNIC_MAX_SLOTS) || (tnic_registry() == NULL)) {
        return 0;
    }
    return tnic_registry()->slots[slot].pid;
}

static void *tnic_fabric_map(const char *path, size_t size, int create)
{
    void *ptr;
    int fd;

    fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
    if (fd < 0) {
        return NULL;
    }
    if (create && (ftruncate(fd, size) != 0)) {
        close(fd);
        return NULL;
    }
    ptr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return (ptr == MAP_FAILED) ? NULL : ptr;
}

static void tnic_fabric_detach(void)
{
    char path[256];
    tnic_slot_t *s;

    if ((tnic_proc.slot == 0) || (tnic_fabric_owner != getpid())) {
        return;
    }
    s = &tnic_registry()->slots[tnic_proc.slot];
    s->ready = 0;
    tnic_fabric_inbox_path(path, sizeof(path), tnic_proc.slot);
    unlink(path);
    __atomic_store_n(&s->pid, 0, __ATOMIC_SEQ_CST);
}

static void tnic_fabric_reap(void)
{
    tnic_registry_t *reg = tnic_registry();
    char path[256];
    int32_t pid;
    uint32_t i;

    /* slots of processes that died without detaching */
    for (i = 1; i < TNIC_MAX_SLOTS; ++i) {
        pid = reg->slots[i].pid;
        if ((pid == 0) ||
            tnic_pid_alive(pid, reg->slots[i].ready ?
                                reg->slots[i].start_time : 0)) {
            continue;
        }
        if (__atomic_compare_exchange_n(&reg->slots[i].pid, &pid, -1, 0,
                                        __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            reg->slots[i].ready = 0;
            tnic_fabric_inbox_path(path, sizeof(path), i);
            unlink(path);
            __atomic_store_n(&reg->slots[i].pid, 0, __ATOMIC_SEQ_CST);
        }
    }
}

int tnic_fabric_attach(void)
{
    const char *name = getenv("RC_GDR_TNIC_FABRIC");
    char path[256];
    tnic_registry_t *reg;
    tnic_inbox_t *inbox;
    int32_t expected;
    uint32_t i;

    if (tnic_proc.slot != 0) {
        return 0;
    }
    if ((name != NULL) && (name[0] != '\0')) {
        snprintf(tnic_fabric_name, sizeof(tnic_fabric_name), "%s", name);
    } else {
        snprintf(tnic_fabric_name, sizeof(tnic_fabric_name), "u%u",
                 (unsigned)getuid());
    }

    if (tnic_proc.registry == NULL) {
        tnic_fabric_path(path, sizeof(path), "reg");
        /* zero is a valid empty registry: no initialization race */
        tnic_proc.registry = tnic_fabric_map(path, sizeof(tnic_registry_t),
                                             1);
        if (tnic_proc.registry == NULL) {
            TNIC_LOG("cannot map %s: %m", path);
            return errno ? errno : ENOMEM;
        }
    }
    reg = tnic_registry();
    tnic_fabric_reap();

    for (i = 1; i < TNIC_MAX_SLOTS; ++i) {
        expected = 0;
        if (__atomic_compare_exchange_n(&reg->slots[i].pid, &expected,
                                        tnic_proc.pid, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST)) {
            break;
        }
    }
    if (i == TNIC_MAX_SLOTS) {
        TNIC_LOG("fabric '%s' is full", tnic_fabric_name);
        return ENOSPC;
    }

    tnic_fabric_inbox_path(path, sizeof(path), i);
    unlink(path);
    inbox = tnic_fabric_map(path, sizeof(tnic_inbox_t), 1);
    if (inbox == NULL) {
        TNIC_LOG("cannot create inbox %s: %m", path);
        __atomic_store_n(&reg->slots[i].pid, 0, __ATOMIC_SEQ_CST);
        return ENOMEM;
    }
    for (expected = 0; expected < TNIC_RING_CELLS; ++expected) {
        inbox->cells[expected].seq = expected;
    }
    inbox->magic             = TNIC_INBOX_MAGIC;
    tnic_proc.inbox          = inbox;
    tnic_proc.slot           = i;
    reg->slots[i].start_time = tnic_pid_start_time(tnic_proc.pid);
    __atomic_add_fetch(&reg->slots[i].generation, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&reg->slots[i].ready, 1, __ATOMIC_SEQ_CST);
    if (tnic_fabric_owner == 0) {
        atexit(tnic_fabric_detach);
    }
    tnic_fabric_owner = tnic_proc.pid;
    return 0;
}

void tnic_fabric_fork_child(void)
{
    uint32_t i;

    /* the parent's inbox and peer maps stay mapped but are not ours */
    tnic_proc.slot   = 0;
    tnic_proc.inbox  = NULL;
    for (i = 0; i <= TNIC_MAX_SLOTS; ++i) {
        tnic_peers[i].inbox = NULL;
    }
    memset(tnic_backlogs, 0, sizeof(tnic_backlogs));
    tnic_backlog_total = 0;
}

static tnic_inbox_t *tnic_fabric_peer_inbox(uint32_t slot)
{
    tnic_slot_t *s = &tnic_registry()->slots[slot];
    tnic_peer_map_t *peer = &tnic_peers[slot];
    char path[256];
    uint32_t generation;

    if (!s->ready) {
        return NULL;
    }
    generation = s->generation;
    if ((peer->inbox != NULL) && (peer->generation == generation)) {
        return peer->inbox;
    }
    if (peer->inbox != NULL) {
        munmap(peer->inbox, sizeof(tnic_inbox_t));
        peer->inbox = NULL;
    }
    if (slot == (uint32_t)tnic_proc.slot) {
        peer->inbox = tnic_proc.inbox;
    } else {
        tnic_fabric_inbox_path(path, sizeof(path), slot);
        peer->inbox = tnic_fabric_map(path, sizeof(tnic_inbox_t), 0);
        if ((peer->inbox != NULL) &&
            (peer->inbox->magic != TNIC_INBOX_MAGIC)) {
            munmap(peer->inbox, sizeof(tnic_inbox_t));
            peer->inbox = NULL;
        }
    }
    peer->generation = generation;
    return peer->inbox;
}

static long tnic_futex(volatile uint32_t *uaddr, int op, uint32_t val,
                       const struct timespec *ts)
{
    return syscall(SYS_futex, uaddr, op, val, ts, NULL, 0);
}

/* 0 on success, EAGAIN when the ring is full */
static int tnic_fabric_enqueue(tnic_inbox_t *inbox, const tnic_msg_hdr_t *hdr,
                               const void *data)
{
    tnic_cell_t *cell;
    volatile int32_t *writer = &inbox->writer[tnic_proc.slot];
    uint64_t pos, seq;

    /* before the claim: the owner must see a live writer of any claimed
     * cell (one writer per process: callers hold tnic_proc.lock) */
    __atomic_store_n(writer, tnic_proc.pid, __ATOMIC_SEQ_CST);
    pos = __atomic_load_n(&inbox->tail, __ATOMIC_RELAXED);
    for (;;) {
        cell = &inbox->cells[pos % TNIC_RING_CELLS];
        seq  = __atomic_load_n(&cell->seq, __ATOMIC_ACQUIRE);
        if (seq == pos) {
            if (__atomic_compare_exchange_n(&inbox->tail, &pos, pos + 1, 1,
                                            __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED)) {
                break;
            }
        } else if (seq < pos) {
            __atomic_store_n(writer, 0, __ATOMIC_RELEASE);
            return EAGAIN;
        } else {
            pos = __atomic_load_n(&inbox->tail, __ATOMIC_RELAXED);
        }
    }

    cell->hdr = *hdr;
    if (hdr->len > 0) {
        memcpy(cell->data, data, hdr->len);
    }
    __atomic_store_n(&cell->seq, pos + 1, __ATOMIC_RELEASE);
    __atomic_store_n(writer, 0, __ATOMIC_SEQ_CST);

    /* the owner's device thread may have gone to sleep: wake it (seq_cst
     * pairs with its store of 'sleeping' before it looks at the ring
     * again), unless the application polls: then the thread sleeps
     * briefly only, and waking it would take a core from the poller */
    if (__atomic_load_n(&inbox->sleeping, __ATOMIC_SEQ_CST) &&
        (tnic_time_ns() - inbox->polled_ns > TNIC_POLLING_NS)) {
        __atomic_add_fetch(&inbox->futex, 1, __ATOMIC_SEQ_CST);
        tnic_futex(&inbox->futex, FUTEX_WAKE, 1, NULL);
    }
    return 0;
}

static int tnic_fabric_backlog_add(uint32_t dst_slot,
                                   const tnic_msg_hdr_t *hdr,
                                   const void *data)
{
    tnic_backlog_t *bl = &tnic_backlogs[dst_slot];
    tnic_backlog_entry_t *e;

    e = malloc(sizeof(*e) + hdr->len);
    if (e == NULL) {
        return ENOMEM;
    }
    e->next = NULL;
    e->hdr  = *hdr;
    memcpy(e->data, data, hdr->len);
    if (bl->tail == NULL) {
        bl->head = e;
    } else {
        bl->tail->next = e;
    }
    bl->tail = e;
    ++bl->count;
    __atomic_add_fetch(&tnic_backlog_total, 1, __ATOMIC_RELAXED);
    return 0;
}

/* Moves one destination's held cells into its ring while they fit; what
 * goes to a dead peer is lost, as on a wire */
static void tnic_fabric_flush_slot(uint32_t slot)
{
    tnic_backlog_t *bl = &tnic_backlogs[slot];
    tnic_inbox_t *inbox = tnic_fabric_peer_inbox(slot);
    tnic_backlog_entry_t *e;

    while ((e = bl->head) != NULL) {
        if ((inbox != NULL) &&
            (tnic_fabric_enqueue(inbox, &e->hdr, e->data) == EAGAIN) &&
            tnic_fabric_peer_alive(slot)) {
            return;     /* full: the rest waits behind it, in order */
        }
        bl->head = e->next;
        if (bl->head == NULL) {
            bl->tail = NULL;
        }
        --bl->count;
        __atomic_sub_fetch(&tnic_backlog_total, 1, __ATOMIC_RELAXED);
        free(e);
    }
}

/* FIFO per destination: a peer whose ring is full holds back only what
 * goes to it */
int tnic_fabric_flush_backlog(void)
{
    uint32_t slot;
    unsigned before = tnic_backlog_total;

    for (slot = 1; (slot <= TNIC_MAX_SLOTS) && (tnic_backlog_total > 0);
         ++slot) {
        if (tnic_backlogs[slot].count > 0) {
            tnic_fabric_flush_slot(slot);
        }
    }
    return before - tnic_backlog_total;
}

int tnic_fabric_send(uint32_t dst_slot, const tnic_msg_hdr_t *hdr,
                     const void *data)
{
    tnic_inbox_t *inbox;

    if ((dst_slot == 0) || (dst_slot > TNIC_MAX_SLOTS)) {
        return 0;   /* no such host: the packet is lost */
    }
    if (tnic_fault_drop(dst_slot, hdr->src_lid, hdr->dst_lid)) {
        tnic_fabric_note_drop();
        return 0;
    }
    if (tnic_backlogs[dst_slot].count > 0) {
        tnic_fabric_flush_slot(dst_slot);
        if (tnic_backlogs[dst_slot].count > 0) {
            return tnic_fabric_backlog_add(dst_slot, hdr, data);
        }
    }
    inbox = tnic_fabric_peer_inbox(dst_slot);
    if (inbox == NULL) {
        return 0;
    }
    if (tnic_fabric_enqueue(inbox, hdr, data) == EAGAIN) {
        return tnic_fabric_backlog_add(dst_slot, hdr, data);
    }
    return 0;
}

/* The cell at the head of this process's inbox when a message is ready in
 * it, else NULL */
static tnic_cell_t *tnic_fabric_head_cell(void)
{
    tnic_inbox_t *inbox = tnic_proc.inbox;
    tnic_cell_t *cell;
    uint64_t head;

    if (inbox == NULL) {
        return NULL;
    }
    head = inbox->head;
    cell = &inbox->cells[head % TNIC_RING_CELLS];
    return (__atomic_load_n(&cell->seq, __ATOMIC_ACQUIRE) == head + 1) ?
           cell : NULL;
}

/* 1 when no live process is writing into this inbox (the caller saw the
 * head cell claimed and still empty) */
static int tnic_fabric_writers_dead(tnic_inbox_t *inbox)
{
    int32_t pid;
    uint32_t i;

    for (i = 1; i <= TNIC_MAX_SLOTS; ++i) {
        pid = __atomic_load_n(&inbox->writer[i], __ATOMIC_SEQ_CST);
        if (tnic_pid_alive(pid, 0)) {
            return 0;
        }
    }
    return 1;
}

/* A head cell claimed (the tail is past it) and empty for 10 ms whose
 * writer is dead is passed over, as a packet lost with its sender: the
 * transports above retransmit. Single consumer: the caller holds
 * tnic_proc.lock. */
static void tnic_fabric_skip_abandoned(void)
{
    tnic_inbox_t *inbox = tnic_proc.inbox;
    uint64_t head = inbox->head, now;
    tnic_cell_t *cell;

    if (__atomic_load_n(&inbox->tail, __ATOMIC_SEQ_CST) == head) {
        return;     /* nothing claimed: empty */
    }
    now = tnic_time_ns();
    if (tnic_stuck_head != head) {
        tnic_stuck_head     = head;
        tnic_stuck_since_ns = now;
        return;
    }
    if ((now - tnic_stuck_since_ns < 10000000ull) ||
        !tnic_fabric_writers_dead(inbox)) {
        return;
    }
    /* a live writer clears its mark only after it fills the cell: look at
     * the cell again after the marks */
    cell = &inbox->cells[head % TNIC_RING_CELLS];
    if (__atomic_load_n(&cell->seq, __ATOMIC_SEQ_CST) == head + 1) {
        return;
    }
    TNIC_LOG("inbox cell %" PRIu64 " abandoned by a dead writer: skipped",
             head);
    __atomic_store_n(&cell->seq, head + TNIC_RING_CELLS, __ATOMIC_RELEASE);
    inbox->head     = head + 1;
    tnic_stuck_head = UINT64_MAX;
}

int tnic_fabric_inbox_empty(void)
{
    return tnic_fabric_head_cell() == NULL;
}

/* 1 when a message was taken, 0 when the inbox is empty. Single consumer:
 * the caller holds tnic_proc.lock. */
int tnic_fabric_recv(tnic_msg_hdr_t *hdr, void *data)
{
    tnic_inbox_t *inbox = tnic_proc.inbox;
    tnic_cell_t *cell = tnic_fabric_head_cell();
    uint64_t head;

    if (cell == NULL) {
        if (inbox != NULL) {
            tnic_fabric_skip_abandoned();
        }
        return 0;
    }
    head = inbox->head;
    *hdr = cell->hdr;
    if (hdr->len > TNIC_SEG_MAX) {
        hdr->len = TNIC_SEG_MAX;
    }
    memcpy(data, cell->data, hdr->len);
    __atomic_store_n(&cell->seq, head + TNIC_RING_CELLS, __ATOMIC_RELEASE);
    inbox->head = head + 1;
    return 1;
}

void tnic_fabric_polled(void)
{
    if (tnic_proc.inbox != NULL) {
        ((tnic_inbox_t*)tnic_proc.inbox)->polled_ns = tnic_time_ns();
    }
}

/* Sleep until a producer rings or the timeout passes. Called without the
 * lock by the device thread only. */
void tnic_fabric_wait(uint64_t timeout_ns)
{
    tnic_inbox_t *inbox = tnic_proc.inbox;
    struct timespec ts;
    uint32_t val;

    if ((inbox != NULL) &&
        (tnic_time_ns() - inbox->polled_ns < 10 * TNIC_POLLING_NS) &&
        (timeout_ns > TNIC_POLLING_NS)) {
        /* producers do not ring while the application polls */
        timeout_ns = TNIC_POLLING_NS;
    }

    ts.tv_sec  = timeout_ns / 1000000000ull;
    ts.tv_nsec = timeout_ns % 1000000000ull;
    if (inbox == NULL) {
        nanosleep(&ts, NULL);
        return;
    }
    val = __atomic_load_n(&inbox->futex, __ATOMIC_SEQ_CST);
    __atomic_store_n(&inbox->sleeping, 1, __ATOMIC_SEQ_CST);
    if (tnic_fabric_inbox_empty()) {
        tnic_futex(&inbox->futex, FUTEX_WAIT, val, &ts);
    }
    __atomic_store_n(&inbox->sleeping, 0, __ATOMIC_SEQ_CST);
}

/* a hint without the lock (the device thread looks before it locks) */
int tnic_fabric_backlog_pending(void)
{
    return __atomic_load_n(&tnic_backlog_total, __ATOMIC_RELAXED) != 0;
}

/* Test API (tnic_test_inbox_abandon_cell): claims a cell in a slot's inbox
 * and leaves it empty, with this process named as its writer, as a
 * process killed between the claim and the fill leaves it. Under
 * tnic_proc.lock. */
int tnic_fabric_abandon_cell(uint32_t slot)
{
    tnic_inbox_t *inbox;
    uint64_t pos;

    if ((slot == 0) || (slot > TNIC_MAX_SLOTS) || (tnic_proc.slot == 0)) {
        return EINVAL;
    }
    inbox = tnic_fabric_peer_inbox(slot);
    if (inbox == NULL) {
        return ENOENT;
    }
    __atomic_store_n(&inbox->writer[tnic_proc.slot], tnic_proc.pid,
                     __ATOMIC_SEQ_CST);
    pos = __atomic_load_n(&inbox->tail, __ATOMIC_RELAXED);
    while (__atomic_load_n(&inbox->cells[pos % TNIC_RING_CELLS].seq,
                           __ATOMIC_ACQUIRE) == pos) {
        if (__atomic_compare_exchange_n(&inbox->tail, &pos, pos + 1, 0,
                                        __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
            return 0;
        }
    }
    __atomic_store_n(&inbox->writer[tnic_proc.slot], 0, __ATOMIC_SEQ_CST);
    return EAGAIN;
}

/* The rings lose nothing: only the drop fault does. Requesters try again
 * after a timeout only when the fabric lost something since their try
 * (tnic_engine_timers); a try of a long message that is merely slow is not
 * repeated, which would never end. */
void tnic_fabric_note_drop(void)
{
    if (tnic_registry() != NULL) {
        __atomic_add_fetch(&tnic_registry()->drops, 1, __ATOMIC_RELAXED);
    }
}

uint64_t tnic_fabric_drops(void)
{
    return (tnic_registry() == NULL) ? 0 :
           __atomic_load_n(&tnic_registry()->drops, __ATOMIC_RELAXED);
}
