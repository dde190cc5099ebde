/**
 * The registration cache's biased recursive lock (rc_gdr_lock.h says how).
 * Written here because no library of the design provides one: UCS and
 * pthread locks always pay an atomic instruction to enter.
 *
 * See file LICENSE for terms.
 */

#include "rc_gdr_lock.h"

#include <ucs/debug/log.h>

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#if defined(__NR_membarrier)
#  include <linux/membarrier.h>
#endif


/* Attempts before a waiter yields, and the pause between */
#define UCT_RC_GDR_LOCK_SPINS 100
#if defined(__x86_64__)
#  define UCT_RC_GDR_LOCK_CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#  define UCT_RC_GDR_LOCK_CPU_RELAX() __asm__ __volatile__("yield")
#else
#  define UCT_RC_GDR_LOCK_CPU_RELAX() do {} while (0)
#endif


static pthread_once_t uct_rc_gdr_lock_bias_once = PTHREAD_ONCE_INIT;
static int            uct_rc_gdr_lock_bias_ok;


#if defined(__NR_membarrier)
static int uct_rc_gdr_lock_membarrier(int cmd)
{
    return syscall(__NR_membarrier, cmd, 0, 0);
}
#endif

/* Biasing needs the expedited private barrier (Linux 4.14); a process
   registers for it once */
static void uct_rc_gdr_lock_bias_probe(void)
{
#if defined(__NR_membarrier)
    int cmds = uct_rc_gdr_lock_membarrier(MEMBARRIER_CMD_QUERY);

    if ((cmds < 0) || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED)) {
        ucs_debug("rc_gdr lock: no expedited membarrier (%s): locks are not"
                  " biased", (cmds < 0) ? strerror(errno) : "not offered");
        return;
    }

    if ((uct_rc_gdr_lock_membarrier(
                 MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0) ||
        (uct_rc_gdr_lock_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0)) {
        ucs_debug("rc_gdr lock: expedited membarrier failed (%s): locks"
                  " are not biased", strerror(errno));
        return;
    }

    uct_rc_gdr_lock_bias_ok = 1;
#else
    ucs_debug("rc_gdr lock: no membarrier on this system: locks are not"
              " biased");
#endif
}

int uct_rc_gdr_lock_bias_supported(void)
{
    pthread_once(&uct_rc_gdr_lock_bias_once, uct_rc_gdr_lock_bias_probe);
    return uct_rc_gdr_lock_bias_ok;
}

void uct_rc_gdr_lock_init(uct_rc_gdr_lock_t *lock)
{
    lock->owner       = NULL;
    lock->depth       = 0;
    lock->bias        = 0;
    memset(lock->bias_in, 0, sizeof(lock->bias_in));
    lock->grants_left = uct_rc_gdr_lock_bias_supported() ?
                        UCT_RC_GDR_LOCK_BIAS_GRANTS : 0;
}

static void uct_rc_gdr_lock_pause(unsigned *spins)
{
    if (++(*spins) < UCT_RC_GDR_LOCK_SPINS) {
        UCT_RC_GDR_LOCK_CPU_RELAX();
    } else {
        /* The holder may be pinning pages for milliseconds */
        sched_yield();
    }
}

/* A full barrier in every thread of the process */
static void uct_rc_gdr_lock_barrier_all(void)
{
#if defined(__NR_membarrier)
    /* The registration survives fork(); registering again costs nothing
       where it is there already */
    if ((uct_rc_gdr_lock_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) ||
        ((uct_rc_gdr_lock_membarrier(
                  MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0) &&
         (uct_rc_gdr_lock_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0))) {
        return;
    }
#endif
    /* Unreachable: a bias is granted only after membarrier worked, and
       without the barrier two threads could be inside at once */
    ucs_fatal("rc_gdr lock: membarrier() failed (%s): a lock bias cannot be"
              " revoked", strerror(errno));
}

/*
 * With the lock word held: take the bias away, once the biased thread is out.
 * Without @a wait, a biased thread found inside keeps the lock and the mark
 * stays: whoever takes the lock word next finishes the revocation. Returns
 * 1 when the bias is gone.
 */
static UCS_F_NOINLINE int uct_rc_gdr_lock_revoke(uct_rc_gdr_lock_t *lock,
                                                 int wait)
{
    uintptr_t bias = __atomic_load_n(&lock->bias, __ATOMIC_RELAXED);
    uint8_t *flag  = uct_rc_gdr_lock_bias_flag(lock, bias);
    unsigned spins = 0;

    __atomic_store_n(&lock->bias, bias | UCT_RC_GDR_LOCK_BIAS_REVOKE,
                     __ATOMIC_RELAXED);
    uct_rc_gdr_lock_barrier_all();
    while (__atomic_load_n(flag, __ATOMIC_ACQUIRE)) {
        if (!wait) {
            return 0;
        }
        uct_rc_gdr_lock_pause(&spins);
    }
    __atomic_store_n(&lock->bias, 0, __ATOMIC_RELEASE);
    ucs_trace("rc_gdr lock %p: bias of thread 0x%lx revoked, %u grants left",
              lock, uct_rc_gdr_lock_bias_thread(bias), lock->grants_left);
    return 1;
}

void uct_rc_gdr_lock_grant(uct_rc_gdr_lock_t *lock)
{
    uintptr_t self = uct_rc_gdr_lock_self();
    unsigned grant = UCT_RC_GDR_LOCK_BIAS_GRANTS - lock->grants_left;

    ucs_assert(__atomic_load_n(&lock->bias, __ATOMIC_RELAXED) == 0);
    if (ucs_unlikely(uct_rc_gdr_lock_bias_thread(self) != self)) {
        /* No room for the grant number beside this thread's id. Such ids
           come from the platform, so the lock stops granting: otherwise
           every release of the lock word would come here again */
        lock->grants_left = 0;
        return;
    }

    --lock->grants_left;
    __atomic_store_n(&lock->bias, self | ((uintptr_t)grant << 1),
                     __ATOMIC_RELAXED);
}

/* A re-entry of the thread inside, or the bias taken: 1 when in */
static UCS_F_ALWAYS_INLINE int
uct_rc_gdr_lock_enter_own(uct_rc_gdr_lock_t *lock, uintptr_t self)
{
    uintptr_t bias = __atomic_load_n(&lock->bias, __ATOMIC_RELAXED);

    /* Inside by the bias, even one being revoked: the revoker waits for us */
    if (uct_rc_gdr_lock_bias_thread(bias) == self) {
        if (__atomic_load_n(uct_rc_gdr_lock_bias_flag(lock, bias),
                            __ATOMIC_RELAXED)) {
            ++lock->depth;
            return 1;
        }
        return !(bias & UCT_RC_GDR_LOCK_BIAS_REVOKE) &&
               uct_rc_gdr_lock_bias_enter(lock, bias);
    }

    return 0;
}

/* One attempt at the lock word: 1 taken, 0 held by another, -1 ours */
static UCS_F_ALWAYS_INLINE int
uct_rc_gdr_lock_word_try(uct_rc_gdr_lock_t *lock, uintptr_t self)
{
    void *owner = NULL;

    if (__atomic_compare_exchange_n(&lock->owner, &owner, (void*)self, 0,
                                    __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        return 1;
    }

    if (owner == (void*)self) {
        ++lock->depth;
        return -1;
    }

    return 0;
}

void uct_rc_gdr_lock_acquire(uct_rc_gdr_lock_t *lock)
{
    uintptr_t self = uct_rc_gdr_lock_self();
    unsigned spins = 0;
    int ret;

    if (uct_rc_gdr_lock_enter_own(lock, self)) {
        return;
    }

    while ((ret = uct_rc_gdr_lock_word_try(lock, self)) == 0) {
        do {
            uct_rc_gdr_lock_pause(&spins);
        } while (__atomic_load_n(&lock->owner, __ATOMIC_RELAXED) != NULL);
    }

    if (ret < 0) {
        return;
    }

    if (ucs_unlikely(__atomic_load_n(&lock->bias, __ATOMIC_RELAXED) != 0)) {
        uct_rc_gdr_lock_revoke(lock, 1);
    }
}

void uct_rc_gdr_lock_release(uct_rc_gdr_lock_t *lock)
{
    if (lock->depth > 0) {
        --lock->depth;
        return;
    }

    uct_rc_gdr_lock_leave_once(lock, uct_rc_gdr_lock_entry(lock));
}

int uct_rc_gdr_lock_try(uct_rc_gdr_lock_t *lock)
{
    uintptr_t self = uct_rc_gdr_lock_self();
    int ret;

    if (uct_rc_gdr_lock_enter_own(lock, self)) {
        return 1;
    }

    ret = uct_rc_gdr_lock_word_try(lock, self);
    if (ret <= 0) {
        return ret != 0;
    }

    /* A biased thread that is inside is not waited for */
    if ((__atomic_load_n(&lock->bias, __ATOMIC_RELAXED) != 0) &&
        !uct_rc_gdr_lock_revoke(lock, 0)) {
        __atomic_store_n(&lock->owner, NULL, __ATOMIC_RELEASE);
        return 0;
    }

    return 1;
}
