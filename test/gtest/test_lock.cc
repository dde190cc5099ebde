/**
 * Unit tests of the registration cache's biased recursive lock.
 *
 * See file LICENSE for terms.
 */

#include <uct/ib_gdr/rc_gdr_lock.h>

#include <gtest/gtest.h>

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
        EXPECT_EQ(0, m_lock.bias_in);
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
        ASSERT_EQ(uct_rc_gdr_lock_self(), m_lock.bias);
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

    uct_rc_gdr_lock_t m_lock;
};

} // namespace


/* The biased thread gets in and out without the lock word */
TEST_F(lock, biased_enter_leaves_word_alone) {
    require_bias();
    take_bias();

    ASSERT_TRUE(uct_rc_gdr_lock_enter_free(&m_lock));
    EXPECT_EQ(1, m_lock.bias_in);
    EXPECT_EQ(nullptr, m_lock.owner);
    uct_rc_gdr_lock_leave_once(&m_lock);
    EXPECT_EQ(0, m_lock.bias_in);

    uct_rc_gdr_lock_acquire(&m_lock);
    EXPECT_EQ(1, m_lock.bias_in);
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

        ASSERT_TRUE(uct_rc_gdr_lock_enter_free(&m_lock));
        EXPECT_FALSE(uct_rc_gdr_lock_enter_free(&m_lock));
        uct_rc_gdr_lock_acquire(&m_lock);
        EXPECT_TRUE(uct_rc_gdr_lock_try(&m_lock));
        EXPECT_EQ(2u, m_lock.depth);
        uct_rc_gdr_lock_release(&m_lock);
        uct_rc_gdr_lock_release(&m_lock);
        uct_rc_gdr_lock_leave_once(&m_lock);
        EXPECT_EQ(biased ? uct_rc_gdr_lock_self() : 0u, m_lock.bias);
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

    /* The other thread let the word go last and took the bias; it is gone
       now, and the bias is taken back from it at our next acquire() */
    EXPECT_NE(uct_rc_gdr_lock_self(), m_lock.bias);
    EXPECT_NE(0u, m_lock.bias);
    EXPECT_FALSE(uct_rc_gdr_lock_try(&m_lock)) << "try must not revoke";
    uct_rc_gdr_lock_acquire(&m_lock);
    EXPECT_EQ(0u, m_lock.bias);
    EXPECT_EQ((void*)uct_rc_gdr_lock_self(), m_lock.owner);
    uct_rc_gdr_lock_release(&m_lock);
    EXPECT_EQ(uct_rc_gdr_lock_self(), m_lock.bias);
    EXPECT_EQ(UCT_RC_GDR_LOCK_BIAS_GRANTS - 3u, m_lock.grants_left);
}

/* try() never waits, and never revokes a bias another thread holds */
TEST_F(lock, try_never_waits) {
    std::promise<void> inside, leave;
    std::future<void> left = leave.get_future();

    std::thread holder([&]() {
        uct_rc_gdr_lock_acquire(&m_lock);
        inside.set_value();
        left.wait();
        uct_rc_gdr_lock_release(&m_lock);
    });

    inside.get_future().wait();
    EXPECT_FALSE(uct_rc_gdr_lock_try(&m_lock));
    leave.set_value();
    holder.join();
}

/*
 * Threads taking turns, through both entries: nobody is ever inside with
 * another, no update is lost, and the bias stops moving after its grants.
 */
TEST_F(lock, threads_exclude) {
    const unsigned nthreads = 4, iters = 20000;
    std::atomic<unsigned> inside(0);
    std::atomic<unsigned> overlaps(0);
    std::vector<std::thread> threads;
    unsigned long counter = 0; /* guarded by the lock alone */

    for (unsigned t = 0; t < nthreads; ++t) {
        threads.emplace_back([&, t]() {
            for (unsigned i = 0; i < iters; ++i) {
                bool fast = ((i + t) % 3 != 0) &&
                            uct_rc_gdr_lock_enter_free(&m_lock);

                if (!fast) {
                    uct_rc_gdr_lock_acquire(&m_lock);
                }
                if (inside.fetch_add(1, std::memory_order_relaxed) != 0) {
                    ++overlaps;
                }
                ++counter;
                if (i % 64 == 0) {
                    std::this_thread::yield(); /* hold it across a switch */
                }
                inside.fetch_sub(1, std::memory_order_relaxed);
                if (fast) {
                    uct_rc_gdr_lock_leave_once(&m_lock);
                } else {
                    uct_rc_gdr_lock_release(&m_lock);
                }
            }
        });
    }

    for (std::thread &thread : threads) {
        thread.join();
    }

    EXPECT_EQ(0u, overlaps.load());
    EXPECT_EQ((unsigned long)nthreads * iters, counter);
    EXPECT_EQ(0u, m_lock.grants_left) << "threads taking turns use up the "
                                         "grants";
}
