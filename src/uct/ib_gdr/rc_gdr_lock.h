/**
 * The registration cache's lock: recursive, and biased towards the thread
 * that uses it, so that a cache hit pays no atomic instruction.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_RC_GDR_LOCK_H_
#define UCT_RC_GDR_LOCK_H_

#include <ucs/debug/assert.h>
#include <ucs/sys/compiler_def.h>

#include <pthread.h>
#include <stdint.h>

BEGIN_C_DECLS

/*
 * A hit takes the lock twice (get and put), and on a server CPU each locked
 * compare-exchange costs about as much as the rest of the hit (measured:
 * doc/MEASUREMENTS.md). Most caches are used by one thread at a time for
 * long stretches, so the lock is biased, as a JVM biases a monitor:
 *
 * - The lock word (owner) is the holder's thread id, NULL when free: taking
 *   it is one compare-exchange, whose failure also tells a re-entry, and
 *   letting it go a plain store.
 * - The thread named by bias enters with plain stores instead: it raises
 *   its flag, then reads bias again, and is inside if bias is unchanged.
 * - Any other thread takes the lock word, then revokes the bias: it marks
 *   bias (low bit), runs membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which
 *   makes every thread of the process execute a full barrier, and waits for
 *   the flag to fall. After the barrier either it sees the biased thread
 *   inside, or that thread sees the mark and takes the lock word instead:
 *   the store-to-load order the biased thread skipped is paid for by the
 *   revoker, once.
 * - A thread letting go of the lock word grants the bias to itself when
 *   nobody holds it, at most UCT_RC_GDR_LOCK_BIAS_GRANTS times per lock, so
 *   threads that take turns pay a bounded number of barriers and then use
 *   the lock word alone. Without membarrier the lock is never biased.
 * - Each grant has a flag of its own, and bias says which (bits 1-3 beside
 *   the thread id, whose low 4 bits are 0): a thread that read a bias
 *   naming it and was descheduled before it raised the flag may enter
 *   late, after its bias went to another thread. With one flag for all, its
 *   step back out would clear the new holder's flag, and a revoker would
 *   walk in beside it. A flag has one writer over the lock's life.
 *
 * Invariant: while a thread holds the lock word the bias names nobody (a
 * grant happens as the lock word is let go), so how a thread got in is told
 * by whether bias names it.
 */

/* Times one lock grants its bias, and so at most runs membarrier(); the
   grant numbers fit in bits 1-3 of the bias word */
#define UCT_RC_GDR_LOCK_BIAS_GRANTS     8

#define UCT_RC_GDR_LOCK_BIAS_REVOKE     1ul
#define UCT_RC_GDR_LOCK_BIAS_GRANT_MASK 0xeul /* grant number << 1 */
#define UCT_RC_GDR_LOCK_BIAS_ID_MASK    (~0xful)

typedef struct uct_rc_gdr_lock {
    void      *owner;      /* holder of the lock word, NULL when free */
    unsigned  depth;       /* re-entries of the thread inside */
    unsigned  grants_left; /* biases it may still grant */
    uintptr_t bias;        /* thread that enters by plain stores, with its
                              grant number << 1; 0 if none; bit 0: being
                              revoked */
    /* per grant, at grant number << 1 (the bias word's bits are the index,
       and the odd bytes are unused): its thread is inside; written by that
       thread alone */
    uint8_t   bias_in[UCT_RC_GDR_LOCK_BIAS_GRANTS * 2];
} uct_rc_gdr_lock_t;


void uct_rc_gdr_lock_init(uct_rc_gdr_lock_t *lock);

/* Take the lock, waiting for another holder; recursive */
void uct_rc_gdr_lock_acquire(uct_rc_gdr_lock_t *lock);

/* Let go of one level of uct_rc_gdr_lock_acquire() */
void uct_rc_gdr_lock_release(uct_rc_gdr_lock_t *lock);

/*
 * Take the lock if nobody else holds it, never waiting (recursive, and it
 * revokes no bias): 1 when taken. For a fork handler.
 */
int uct_rc_gdr_lock_try(uct_rc_gdr_lock_t *lock);

/* Whether this process can bias locks (membarrier is there) */
int uct_rc_gdr_lock_bias_supported(void);

/* For uct_rc_gdr_lock_leave_once(): the holder of the lock word takes the
   bias as it lets the word go */
void uct_rc_gdr_lock_grant(uct_rc_gdr_lock_t *lock);


/* What tells threads apart: the thread pointer where the compiler reads it
   in one instruction, else the pthread id; a grant needs its low 4 bits 0
   (both are aligned at least so on the systems that bias) */
static UCS_F_ALWAYS_INLINE uintptr_t uct_rc_gdr_lock_self(void)
{
#if defined(__x86_64__) || defined(__aarch64__)
    return (uintptr_t)__builtin_thread_pointer();
#else
    return (uintptr_t)pthread_self();
#endif
}

/* The thread a bias word names */
static UCS_F_ALWAYS_INLINE uintptr_t uct_rc_gdr_lock_bias_thread(uintptr_t bias)
{
    return bias & UCT_RC_GDR_LOCK_BIAS_ID_MASK;
}

/* The flag of the grant a bias word names */
static UCS_F_ALWAYS_INLINE uint8_t *
uct_rc_gdr_lock_bias_flag(uct_rc_gdr_lock_t *lock, uintptr_t bias)
{
    return &lock->bias_in[bias & UCT_RC_GDR_LOCK_BIAS_GRANT_MASK];
}

/*
 * The biased thread enters with @a bias, the bias word it read naming it
 * (unmarked): its flag up, then bias read again. No fence: a revoker's
 * membarrier() orders the two for it.
 */
static UCS_F_ALWAYS_INLINE int
uct_rc_gdr_lock_bias_enter(uct_rc_gdr_lock_t *lock, uintptr_t bias)
{
    uint8_t *flag = uct_rc_gdr_lock_bias_flag(lock, bias);

    __atomic_store_n(flag, 1, __ATOMIC_RELAXED);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (ucs_likely(__atomic_load_n(&lock->bias, __ATOMIC_ACQUIRE) == bias)) {
        return 1;
    }

    /* Being revoked, or gone: step out, and take the lock word instead */
    __atomic_store_n(flag, 0, __ATOMIC_RELEASE);
    return 0;
}

/*
 * How the thread inside got in, for uct_rc_gdr_lock_leave_once(): the
 * address of the flag its bias raised, or UCT_RC_GDR_LOCK_ENTRY_WORD; 0 for
 * not in. Kept by the caller, so that letting go reads nothing again.
 */
typedef uintptr_t uct_rc_gdr_lock_entry_t;

#define UCT_RC_GDR_LOCK_ENTRY_WORD 1ul

/* How the thread inside at its outermost level got in */
static UCS_F_ALWAYS_INLINE uct_rc_gdr_lock_entry_t
uct_rc_gdr_lock_entry(uct_rc_gdr_lock_t *lock)
{
    uintptr_t bias = __atomic_load_n(&lock->bias, __ATOMIC_RELAXED);

    return (uct_rc_gdr_lock_bias_thread(bias) == uct_rc_gdr_lock_self()) ?
           (uintptr_t)uct_rc_gdr_lock_bias_flag(lock, bias) :
           UCT_RC_GDR_LOCK_ENTRY_WORD;
}

/*
 * Take the lock if it is free, by the bias or by the lock word: how it got
 * in. 0 when anything else is needed (a holder, a re-entry, a bias to
 * revoke): take uct_rc_gdr_lock_acquire() then. What this takes is let go
 * by uct_rc_gdr_lock_leave_once().
 */
static UCS_F_ALWAYS_INLINE uct_rc_gdr_lock_entry_t
uct_rc_gdr_lock_enter_free(uct_rc_gdr_lock_t *lock)
{
    uintptr_t self = uct_rc_gdr_lock_self();
    uintptr_t bias = __atomic_load_n(&lock->bias, __ATOMIC_RELAXED);
    void *owner    = NULL;
    uint8_t *flag;

    /* Names this thread and is not being revoked */
    if (ucs_likely((bias & ~UCT_RC_GDR_LOCK_BIAS_GRANT_MASK) == self)) {
        flag = uct_rc_gdr_lock_bias_flag(lock, bias);
        return (!__atomic_load_n(flag, __ATOMIC_RELAXED) &&
                uct_rc_gdr_lock_bias_enter(lock, bias)) ? (uintptr_t)flag : 0;
    }

    if ((bias != 0) ||
        !__atomic_compare_exchange_n(&lock->owner, &owner, (void*)self, 0,
                                     __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        return 0;
    }

    /* A bias granted while we looked: acquire() revokes it */
    if (ucs_unlikely(__atomic_load_n(&lock->bias, __ATOMIC_RELAXED) != 0)) {
        __atomic_store_n(&lock->owner, NULL, __ATOMIC_RELEASE);
        return 0;
    }

    return UCT_RC_GDR_LOCK_ENTRY_WORD;
}

/* Let go of what uct_rc_gdr_lock_enter_free() took, or of the outermost
   level of acquire(), as @a entry tells it got in */
static UCS_F_ALWAYS_INLINE void
uct_rc_gdr_lock_leave_once(uct_rc_gdr_lock_t *lock,
                           uct_rc_gdr_lock_entry_t entry)
{
    ucs_assert(lock->depth == 0);
    if (ucs_likely(entry != UCT_RC_GDR_LOCK_ENTRY_WORD)) {
        __atomic_store_n((uint8_t*)entry, 0, __ATOMIC_RELEASE);
        return;
    }

    ucs_assert(__atomic_load_n(&lock->owner, __ATOMIC_RELAXED) ==
               (void*)uct_rc_gdr_lock_self());
    if (ucs_unlikely(lock->grants_left > 0)) {
        uct_rc_gdr_lock_grant(lock);
    }
    __atomic_store_n(&lock->owner, NULL, __ATOMIC_RELEASE);
}

END_C_DECLS

#endif
