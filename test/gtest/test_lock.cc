/**
 * Unit tests of the registration cache's biased recursive lock.
 *
 * See file LICENSE for terms.
 */

#include <uct/ib_gdr/rc_gdr_lock.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace {

/* Longest a step that must finish may take before the test calls it a hang */
const std::chrono::seconds HANG_TIMEOUT(20);

class lock : public ::testing::Test {
protected:
    void SetUp() override
    {
        uct_rc_gdr_lock_init(&m_lock);
    }

    void TearDown() override
    {
        EXPECT_EQ(0u, m_lock.depth);
        for (int flag : m_lock.bias_in) {
            EXPECT_EQ(0, flag);
        }
        EXPECT_EQ(nullptr, m_lock.owner);
    }

    void require_bias()
    {
        if (!uct_rc_gdr_lock_bias_supported()) {
            GTEST_SKIP() << "no expedited membarrier here: locks are not "
                            "biased";
        }
    }

    /* The first use grants the bias to this thread, as it lets go */
    void take_bias()
    {
        uct_rc_gdr_lock_acquire(&m_lock);
        EXPECT_EQ(0u, m_lock.bias) << "granted while the lock word is held";
        uct_rc_gdr_lock_release(&m_lock);
        ASSERT_EQ(uct_rc_gdr_lock_self(), bias_thread());
    }

    uintptr_t bias_thread() const
    {
        return uct_rc_gdr_lock_bias_thread(m_lock.bias);
    }

    /* The flag of the grant the bias names now */
    int bias_flag()
    {
        return *uct_rc_gdr_lock_bias_flag(&m_lock, m_lock.bias);
    }

    /* One turn inside, by the fast entry unless @a slow: counts an overlap
       if another thread is inside too, and one guarded update */
    void take_turn(bool slow, bool yield_inside)
    {
        uct_rc_gdr_lock_entry_t entry = slow ? 0 :
                                        uct_rc_gdr_lock_enter_free(&m_lock);

        if (entry == 0) {
            uct_rc_gdr_lock_acquire(&m_lock);
        }
        if (m_inside.fetch_add(1, std::memory_order_relaxed) != 0) {
            ++m_overlaps;
        }
        ++m_counter;
        if (yield_inside) {
            std::this_thread::yield(); /* hold it across a switch */
        }
        m_inside.fetch_sub(1, std::memory_order_relaxed);
        if (entry != 0) {
            uct_rc_gdr_lock_leave_once(&m_lock, entry);
        } else {
            uct_rc_gdr_lock_release(&m_lock);
        }
    }

    /* A thread inside the lock until @a left is ready (by the bias, which
       it takes first, if @a biased); returns once it is in */
    std::thread hold_until(std::shared_future<void> left, bool biased,
                           uintptr_t *id = nullptr)
    {
        std::promise<void> inside;
        std::future<void> in = inside.get_future();
        std::thread holder([this, left, biased, id,
                            inside = std::move(inside)]() mutable {
            if (biased) {
                take_bias();
            }
            if (id != nullptr) {
                *id = uct_rc_gdr_lock_self();
            }
            uct_rc_gdr_lock_acquire(&m_lock);
            inside.set_value();
            left.wait();
            uct_rc_gdr_lock_release(&m_lock);
        });

        in.wait();
        return holder;
    }

    /* At least 4 threads, and one per CPU up to 16 */
    static unsigned num_threads()
    {
        return std::max(4u, std::min(16u,
                                     std::thread::hardware_concurrency()));
    }

    /* Runs @a func on another thread; false if it did not end in time */
    template <typename F> static bool run_bounded(F func)
    {
        std::packaged_task<void()> task(func);
        std::future<void> done = task.get_future();
        std::thread thread(std::move(task));

        if (done.wait_for(HANG_TIMEOUT) != std::future_status::ready) {
            thread.detach();
            return false;
        }
        thread.join();
        return true;
    }

    uct_rc_gdr_lock_t     m_lock;
    std::atomic<unsigned> m_inside{0};
    std::atomic<unsigned> m_overlaps{0};
    unsigned long         m_counter = 0; /* guarded by the lock alone */
};

} // namespace


/* The biased thread gets in and out without the lock word */
TEST_F(lock, biased_enter_leaves_word_alone) {
    require_bias();
    take_bias();

    uct_rc_gdr_lock_entry_t entry = uct_rc_gdr_lock_enter_free(&m_lock);
    ASSERT_NE(0u, entry);
    EXPECT_EQ(entry, uct_rc_gdr_lock_entry(&m_lock));
    EXPECT_NE(UCT_RC_GDR_LOCK_ENTRY_WORD, entry);
    EXPECT_EQ(1, bias_flag());
    EXPECT_EQ(nullptr, m_lock.owner);
    uct_rc_gdr_lock_leave_once(&m_lock, entry);
    EXPECT_EQ(0, bias_flag());

    uct_rc_gdr_lock_acquire(&m_lock);
    EXPECT_EQ(1, bias_flag());
    EXPECT_EQ(nullptr, m_lock.owner);
    uct_rc_gdr_lock_release(&m_lock);
    EXPECT_EQ(UCT_RC_GDR_LOCK_BIAS_GRANTS - 1u, m_lock.grants_left);
}

/* A re-entry is never "free": the fast path hands it to acquire() */
TEST_F(lock, reentry) {
    for (int biased = 0; biased < 2; ++biased) {
        if (biased) {
            if (!uct_rc_gdr_lock_bias_supported()) {
                break;
            }
            uct_rc_gdr_lock_init(&m_lock);
            take_bias();
        } else {
            m_lock.grants_left = 0; /* as without membarrier */
        }

        uct_rc_gdr_lock_entry_t entry = uct_rc_gdr_lock_enter_free(&m_lock);
        ASSERT_NE(0u, entry);
        EXPECT_EQ(biased ? entry : UCT_RC_GDR_LOCK_ENTRY_WORD,
                  uct_rc_gdr_lock_entry(&m_lock));
        EXPECT_EQ(0u, uct_rc_gdr_lock_enter_free(&m_lock));
        uct_rc_gdr_lock_acquire(&m_lock);
        EXPECT_TRUE(uct_rc_gdr_lock_try(&m_lock));
        EXPECT_EQ(2u, m_lock.depth);
        uct_rc_gdr_lock_release(&m_lock);
        uct_rc_gdr_lock_release(&m_lock);
        uct_rc_gdr_lock_leave_once(&m_lock, entry);
        EXPECT_EQ(biased ? uct_rc_gdr_lock_self() : 0u, bias_thread());
    }
}

/* Another thread revokes the bias, waiting until the biased thread is out */
TEST_F(lock, revoke_waits_for_biased_thread) {
    std::atomic<bool> other_in(false);
    std::thread other;

    require_bias();

    /* The biased side on a thread of its own, so that a deadlock fails the
       test instead of hanging it */
    ASSERT_TRUE(run_bounded([&]() {
        take_bias();
        uct_rc_gdr_lock_acquire(&m_lock);

        other = std::thread([&]() {
            uct_rc_gdr_lock_acquire(&m_lock);
            other_in = true;
            uct_rc_gdr_lock_release(&m_lock);
        });

        /* The revoker marks the bias, then must wait for us */
        while (!(__atomic_load_n(&m_lock.bias, __ATOMIC_RELAXED) &
                 UCT_RC_GDR_LOCK_BIAS_REVOKE)) {
            std::this_thread::yield();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        EXPECT_FALSE(other_in);

        /* A re-entry while being revoked goes on by the bias: waiting for
           the lock word would wait for the revoker, which waits for us */
        uct_rc_gdr_lock_acquire(&m_lock);
        EXPECT_EQ(1u, m_lock.depth);
        uct_rc_gdr_lock_release(&m_lock);
        uct_rc_gdr_lock_release(&m_lock);
    })) << "the biased thread hung";

    other.join();
    EXPECT_TRUE(other_in);

    /* The other thread let the word go last and took the bias; it is out
       (gone), so even try() takes the bias back */
    EXPECT_NE(uct_rc_gdr_lock_self(), bias_thread());
    EXPECT_NE(0u, m_lock.bias);
    ASSERT_TRUE(uct_rc_gdr_lock_try(&m_lock));
    EXPECT_EQ(0u, m_lock.bias);
    EXPECT_EQ((void*)uct_rc_gdr_lock_self(), m_lock.owner);
    uct_rc_gdr_lock_release(&m_lock);
    EXPECT_EQ(uct_rc_gdr_lock_self(), bias_thread());
    EXPECT_EQ(UCT_RC_GDR_LOCK_BIAS_GRANTS - 3u, m_lock.grants_left);
}

/* try() does not wait for a biased thread inside: the mark it leaves makes
   the next taker of the lock word finish the revocation */
TEST_F(lock, try_leaves_revocation_to_next) {
    std::promise<void> leave;
    uintptr_t holder_id = 0;

    require_bias();
    std::thread holder = hold_until(leave.get_future().share(), true,
                                    &holder_id);
    EXPECT_FALSE(uct_rc_gdr_lock_try(&m_lock));
    EXPECT_EQ(holder_id, bias_thread());
    EXPECT_TRUE(m_lock.bias & UCT_RC_GDR_LOCK_BIAS_REVOKE);
    EXPECT_EQ(nullptr, m_lock.owner);
    leave.set_value();
    holder.join();

    uct_rc_gdr_lock_acquire(&m_lock);
    EXPECT_EQ(0u, m_lock.bias);
    EXPECT_EQ((void*)uct_rc_gdr_lock_self(), m_lock.owner);
    uct_rc_gdr_lock_release(&m_lock);
}

/* try() never waits for the holder of the lock word */
TEST_F(lock, try_never_waits) {
    std::promise<void> leave;
    std::thread holder = hold_until(leave.get_future().share(), false);

    EXPECT_FALSE(uct_rc_gdr_lock_try(&m_lock));
    leave.set_value();
    holder.join();
}

/*
 * Threads taking turns, through both entries: nobody is ever inside with
 * another, no update is lost, and the bias stops moving after its grants.
 */
TEST_F(lock, threads_exclude) {
    const unsigned nthreads = num_threads();
    const unsigned iters    = 20000;
    std::vector<std::thread> threads;

    for (unsigned t = 0; t < nthreads; ++t) {
        threads.emplace_back([&, t]() {
            for (unsigned i = 0; i < iters; ++i) {
                take_turn((i + t) % 3 == 0, i % 64 == 0);
            }
        });
    }

    for (std::thread &thread : threads) {
        thread.join();
    }

    EXPECT_EQ(0u, m_overlaps.load());
    EXPECT_EQ((unsigned long)nthreads * iters, m_counter);
    EXPECT_EQ(0u, m_lock.grants_left) << "threads taking turns use up the "
                                         "grants";
}

/*
 * As threads_exclude, over many fresh locks, so that grants and revocations
 * happen all the time: a thread whose bias was revoked and given to another
 * while it was on its way in must not touch the new holder's state.
 */
TEST_F(lock, threads_exclude_across_grants) {
    const unsigned nthreads = num_threads();
    const unsigned rounds   = 300;
    const unsigned iters    = 64;
    std::atomic<unsigned> round(0), done(0);
    std::vector<std::thread> threads;

    require_bias();
    for (unsigned t = 0; t < nthreads; ++t) {
        threads.emplace_back([&, t]() {
            for (unsigned r = 1; r <= rounds; ++r) {
                /* everyone starts a round on a fresh lock */
                while (round.load() < r) {
                    std::this_thread::yield();
                }
                for (unsigned i = 0; i < iters; ++i) {
                    take_turn((i + t) % 4 == 0, false);
                }
                ++done;
            }
        });
    }

    for (unsigned r = 1; r <= rounds; ++r) {
        uct_rc_gdr_lock_init(&m_lock);
        round = r;
        while (done.load() < r * nthreads) {
            std::this_thread::yield();
        }
    }
    for (std::thread &thread : threads) {
        thread.join();
    }

    EXPECT_EQ(0u, m_overlaps.load());
    EXPECT_EQ((unsigned long)nthreads * rounds * iters, m_counter);
}

/*
 * A thread that read the bias naming itself, and was descheduled before it
 * raised its flag, enters late: by then its bias was revoked and granted to
 * another thread, which is inside. Its step back out must leave the new
 * holder inside, so that a third thread still waits for it.
 */
TEST_F(lock, stale_bias_entry_leaves_new_holder_inside) {
    std::atomic<bool> third_in(false);
    uintptr_t stale_bias = 0;

    require_bias();
    std::thread([&]() {
        take_bias();
        stale_bias = __atomic_load_n(&m_lock.bias, __ATOMIC_RELAXED);
    }).join();

    /* This thread revokes that bias, takes it, and goes in by it */
    take_bias();
    ASSERT_NE(stale_bias, m_lock.bias);
    uct_rc_gdr_lock_entry_t entry = uct_rc_gdr_lock_enter_free(&m_lock);
    ASSERT_NE(0u, entry);

    /* The late entry, as the descheduled thread would make it */
    std::thread([&]() {
        EXPECT_FALSE(uct_rc_gdr_lock_bias_enter(&m_lock, stale_bias));
    }).join();

    std::thread third([&]() {
        uct_rc_gdr_lock_acquire(&m_lock);
        third_in = true;
        uct_rc_gdr_lock_release(&m_lock);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (third_in) {
        /* Two were inside: the lock is past repair, start it afresh */
        third.join();
        uct_rc_gdr_lock_init(&m_lock);
        FAIL() << "a third thread got in while the bias holder was inside";
    }

    uct_rc_gdr_lock_leave_once(&m_lock, entry);
    third.join();
    EXPECT_TRUE(third_in);
}
