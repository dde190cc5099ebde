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
 *   bias_in, then reads bias again, and is inside if bias still names it.
 * - Any other thread takes the lock word, then revokes the bias: it marks
 *   bias (low bit), runs membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which
 *   makes every thread of the process execute a full barrier, and waits for
 *   bias_in to fall. After the barrier either it sees the biased thread
 *   inside, or that thread sees the mark and takes the lock word instead:
 *   the store-to-load order the biased thread skipped is paid for by the
 *   revoker, once.
 * - A thread letting go of the lock word grants the bias to itself when
 *   nobody holds it, at most UCT_RC_GDR_LOCK_BIAS_GRANTS times per lock, so
 *   threads that take turns pay a bounded number of barriers and then use
 *   the lock word alone. Without membarrier the lock is never biased.
 *
 * Invariant: while a thread holds the lock word the bias names nobody (a
 * grant happens as the lock word is let go), so how a thread got in is told
 * by whether bias names it.
 */
typedef struct uct_rc_gdr_lock {
    void     *owner;      /* holder of the lock word, NULL when free */
    unsigned depth;       /* re-entries of the thread inside */
    unsigned grants_left; /* biases it may still grant */
    uintptr_t bias;       /* thread that enters by plain stores, 0 if none;
                             low bit: being revoked */
    int      bias_in;     /* the biased thread is inside; written by it */
} uct_rc_gdr_lock_t;

#define UCT_RC_GDR_LOCK_BIAS_REVOKE 1ul

/* Times one lock grants its bias, and so at most runs membarrier() */
#define UCT_RC_GDR_LOCK_BIAS_GRANTS 8


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
   in one instruction, else the pthread id; never odd (it is aligned) */
static UCS_F_ALWAYS_INLINE uintptr_t uct_rc_gdr_lock_self(void)
{
#if defined(__x86_64__) || defined(__aarch64__)
    return (uintptr_t)__builtin_thread_pointer();
#else
    return (uintptr_t)pthread_self();
#endif
}

/*
 * The biased thread enters: bias_in up, then bias read again. No fence: a
 * revoker's membarrier() orders the two for it.
 */
static UCS_F_ALWAYS_INLINE int
uct_rc_gdr_lock_bias_enter(uct_rc_gdr_lock_t *lock, uintptr_t self)
{
    __atomic_store_n(&lock->bias_in, 1, __ATOMIC_RELAXED);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (ucs_likely(__atomic_load_n(&lock->bias, __ATOMIC_ACQUIRE) == self)) {
        return 1;
    }

    /* Being revoked: step out, and take the lock word instead */
    __atomic_store_n(&lock->bias_in, 0, __ATOMIC_RELEASE);
    return 0;
}

/*
 * Take the lock if it is free, by the bias or by the lock word; 1 when
 * taken. 0 when anything else is needed (a holder, a re-entry, a bias to
 * revoke): take uct_rc_gdr_lock_acquire() then. What this takes is let go
 * by uct_rc_gdr_lock_leave_once().
 */
static UCS_F_ALWAYS_INLINE int
uct_rc_gdr_lock_enter_free(uct_rc_gdr_lock_t *lock)
{
    uintptr_t self = uct_rc_gdr_lock_self();
    uintptr_t bias = __atomic_load_n(&lock->bias, __ATOMIC_RELAXED);
    void *owner    = NULL;

    if (ucs_likely(bias == self)) {
        return !__atomic_load_n(&lock->bias_in, __ATOMIC_RELAXED) &&
               uct_rc_gdr_lock_bias_enter(lock, self);
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

    return 1;
}

/* Let go of what uct_rc_gdr_lock_enter_free() took, or of the outermost
   level of acquire() */
static UCS_F_ALWAYS_INLINE void
uct_rc_gdr_lock_leave_once(uct_rc_gdr_lock_t *lock)
{
    uintptr_t self = uct_rc_gdr_lock_self();

    ucs_assert(lock->depth == 0);
    if (ucs_likely((__atomic_load_n(&lock->bias, __ATOMIC_RELAXED) &
                    ~UCT_RC_GDR_LOCK_BIAS_REVOKE) == self)) {
        __atomic_store_n(&lock->bias_in, 0, __ATOMIC_RELEASE);
        return;
    }

    ucs_assert(__atomic_load_n(&lock->owner, __ATOMIC_RELAXED) ==
               (void*)self);
    if (ucs_unlikely(lock->grants_left > 0)) {
        uct_rc_gdr_lock_grant(lock);
    }
    __atomic_store_n(&lock->owner, NULL, __ATOMIC_RELEASE);
}

END_C_DECLS

#endif
