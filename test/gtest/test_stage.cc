/**
 * Tests of the bounce lane's staging engine (src/uct/ib_gdr/rc_gdr_stage.h):
 * the pinned staging pool and the chunk pipeline, in both directions, over
 * a loopback "wire" that this file provides.
 *
 * They run against whatever driver the binary opened (test_cuda.cc chooses,
 * before main: the emulated driver by default, a real one with
 * RC_GDR_TEST_CUDA=real), so they never touch "GPU" memory from the CPU:
 * data goes in and out with the shim's synchronous copies. With the
 * emulation every copy is synchronous and every event is complete at once;
 * the orders the engine must keep are exercised by the test wire instead,
 * which can hold chunks and finish them in any order.
 */

#include <uct/ib_gdr/rc_gdr_stage.h>

#include <ucs/debug/log_def.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

namespace {

#define STAGE_ASSERT_OK(_expr) \
    do { \
        ucs_status_t _status = (_expr); \
        ASSERT_EQ(UCS_OK, _status) << #_expr << ": " \
                                   << ucs_status_string(_status); \
    } while (0)

const size_t KIB = 1024;


/* The owner's registration callbacks, counted */
struct reg_counter {
    std::vector<std::pair<void*, size_t>> regs;
    unsigned                              deregs   = 0;
    int                                   fail_at  = -1; /* reg index */
    unsigned                              next_key = 0x100;

    static ucs_status_t reg(void *arg, void *addr, size_t length,
                            void **memh_p)
    {
        reg_counter *self = (reg_counter*)arg;

        if ((int)self->regs.size() == self->fail_at) {
            return UCS_ERR_IO_ERROR;
        }
        self->regs.push_back({addr, length});
        *memh_p = (void*)(uintptr_t)self->next_key++;
        return UCS_OK;
    }

    static void dereg(void *arg, void *addr, size_t length, void *memh)
    {
        reg_counter *self = (reg_counter*)arg;
        bool known        = false;

        for (auto &r : self->regs) {
            known |= (r.first == addr) && (r.second == length);
        }
        EXPECT_TRUE(known) << "dereg of " << addr << " never registered";
        EXPECT_NE(nullptr, memh);
        ++self->deregs;
    }
};

const uct_rc_gdr_stage_reg_ops_t reg_counter_ops = {
    .reg   = reg_counter::reg,
    .dereg = reg_counter::dereg
};


/*
 * A loopback wire: the other side is a plain host buffer ("remote"). For
 * D2H_WIRE a finished chunk is copied from staging to remote, for WIRE_H2D
 * from remote into staging.
 *   SYNC   post() moves the chunk and answers UCS_OK;
 *   ASYNC  post() queues the chunk (UCS_INPROGRESS); the test finishes
 *          queued chunks in the order it wants (finish()), as a NIC would
 *          report RDMA completions.
 */
struct test_wire {
    enum mode_t { SYNC, ASYNC };
    enum order_t { FIFO, LIFO, RANDOM };

    struct post_rec {
        unsigned               chunk;
        uct_rc_gdr_stage_buf_t *buf;
        size_t                 length;
        size_t                 offset;
    };

    mode_t                  mode          = SYNC;
    uct_rc_gdr_stage_dir_t  dir           = UCT_RC_GDR_STAGE_D2H_WIRE;
    uint8_t                 *remote       = nullptr;
    uct_rc_gdr_stage_xfer_t *xfer         = nullptr;
    size_t                  length        = 0; /* of the message */
    size_t                  first_size    = 0; /* of its chunk 0 */
    size_t                  chunk_size    = 0; /* of the others */
    std::vector<post_rec>   posts;        /* accepted posts, in call order */
    std::deque<post_rec>    on_wire;      /* ASYNC: not finished yet */
    std::vector<unsigned>   finished;     /* wire completions, in order */
    std::vector<unsigned>   chunks_done;  /* ops->chunk_done, in order */
    std::vector<size_t>     done_offsets;
    size_t                  max_on_wire   = 0;
    size_t                  num_chunks    = 0;
    size_t                  hold          = 0; /* finish nothing while fewer
                                                  are posted and not retired,
                                                  unless all were posted */
    unsigned                post_calls    = 0;
    unsigned                no_resource_every = 0; /* every n-th call */
    int                     fail_chunk    = -1;
    ucs_status_t            fail_status   = UCS_ERR_IO_ERROR;
    int                     completions   = 0;
    ucs_status_t            status        = UCS_ERR_LAST;
    std::mt19937            rng{12345};

    static ucs_status_t post(void *arg, unsigned chunk,
                             uct_rc_gdr_stage_buf_t *buf, size_t length,
                             size_t offset)
    {
        test_wire *self = (test_wire*)arg;
        post_rec rec    = {chunk, buf, length, offset};
        size_t expect_offset, expect_length;

        ++self->post_calls;
        EXPECT_EQ(0, self->completions) << "post after completion";
        EXPECT_NE(nullptr, buf);
        EXPECT_GT(length, 0u);
        uct_rc_gdr_stage_chunk(self->length, self->first_size,
                               self->chunk_size, chunk, &expect_offset,
                               &expect_length);
        EXPECT_EQ(expect_offset, offset) << "chunk " << chunk;
        EXPECT_EQ(expect_length, length) << "chunk " << chunk;

        if ((self->no_resource_every != 0) &&
            ((self->post_calls % self->no_resource_every) == 0)) {
            return UCS_ERR_NO_RESOURCE;
        }
        if ((int)chunk == self->fail_chunk) {
            return self->fail_status;
        }

        self->posts.push_back(rec);
        if (self->mode == SYNC) {
            self->move(rec);
            return UCS_OK;
        }

        self->on_wire.push_back(rec);
        self->max_on_wire = std::max(self->max_on_wire,
                                     self->on_wire.size());
        return UCS_INPROGRESS;
    }

    static void chunk_done(void *arg, unsigned chunk, size_t length,
                           size_t offset)
    {
        test_wire *self = (test_wire*)arg;

        self->chunks_done.push_back(chunk);
        self->done_offsets.push_back(offset);
    }

    static void complete(void *arg, ucs_status_t status)
    {
        test_wire *self = (test_wire*)arg;

        ++self->completions;
        self->status = status;
        self->xfer   = nullptr;
    }

    void move(const post_rec &rec)
    {
        if (remote == nullptr) {
            return;
        }
        if (dir == UCT_RC_GDR_STAGE_D2H_WIRE) {
            memcpy(remote + rec.offset, rec.buf->addr, rec.length);
        } else {
            memcpy(rec.buf->addr, remote + rec.offset, rec.length);
        }
    }

    /* Finish one chunk on the wire, chosen by order */
    bool finish_one(order_t order)
    {
        size_t i;

        /* chunks finished but not retired still take a place in the
           engine's window */
        if (on_wire.empty() ||
            (((posts.size() - chunks_done.size()) < hold) &&
             (posts.size() < num_chunks))) {
            return false;
        }

        i = (order == FIFO) ? 0 :
            (order == LIFO) ? (on_wire.size() - 1) :
            (rng() % on_wire.size());
        post_rec rec = on_wire[i];
        on_wire.erase(on_wire.begin() + i);
        move(rec);
        finished.push_back(rec.chunk);
        EXPECT_EQ(UCS_OK, uct_rc_gdr_stage_wire_done(xfer, rec.chunk));
        return true;
    }
};

const uct_rc_gdr_stage_ops_t test_wire_ops = {
    .post       = test_wire::post,
    .chunk_done = test_wire::chunk_done,
    .complete   = test_wire::complete
};


/*
 * Errors and warnings are captured instead of printed: a test that provokes
 * one checks its text, and every test ends with none left unchecked (a pool
 * destroyed with buffers still out warns, for one).
 */
std::vector<std::string> logged;

ucs_log_func_rc_t capture_log(const char *file, unsigned line,
                              const char *function, ucs_log_level_t level,
                              const ucs_log_component_config_t *comp_conf,
                              const char *message, va_list ap)
{
    char buf[512];
    va_list aq;

    if (level > UCS_LOG_LEVEL_WARN) {
        return UCS_LOG_FUNC_RC_CONTINUE;
    }

    va_copy(aq, ap);
    vsnprintf(buf, sizeof(buf), message, aq);
    va_end(aq);
    logged.push_back(buf);
    return UCS_LOG_FUNC_RC_STOP;
}


class stage : public ::testing::Test {
protected:
    void SetUp() override
    {
        int count = 0;

        logged.clear();
        ucs_log_push_handler(capture_log);
        m_log_pushed = true;

        if (uct_rc_gdr_cuda_init() != UCS_OK) {
            GTEST_SKIP() << "no usable CUDA driver ("
                         << uct_rc_gdr_cuda_library_name() << ")";
        }
        if ((uct_rc_gdr_cuda_device_count(&count) != UCS_OK) ||
            (count == 0)) {
            GTEST_SKIP() << "the CUDA driver reports no device";
        }

        STAGE_ASSERT_OK(uct_rc_gdr_cuda_ctx_activate(0, &m_ctx));
        m_ctx_retained = true;
    }

    void TearDown() override
    {
        destroy();
        for (void *p : m_gpu_bufs) {
            uct_rc_gdr_cuda_mem_free(p);
        }
        m_gpu_bufs.clear();
        if (m_ctx_retained) {
            uct_rc_gdr_cuda_ctx_release(0);
        }
        if (m_log_pushed) {
            ucs_log_pop_handler();
            for (const std::string &msg : logged) {
                ADD_FAILURE() << "unexpected log message: " << msg;
            }
            logged.clear();
        }
    }

    /* The messages logged since the last call; each must contain `what` */
    void expect_logged(size_t count, const char *what)
    {
        EXPECT_EQ(count, logged.size());
        for (const std::string &msg : logged) {
            EXPECT_NE(std::string::npos, msg.find(what)) << msg;
        }
        logged.clear();
    }

    void create(size_t chunk_size, unsigned pool_size, unsigned depth,
                unsigned num_streams = 1, bool with_reg = true)
    {
        uct_rc_gdr_stage_pool_params_t pool_params   = {};
        uct_rc_gdr_stage_engine_params_t eng_params = {};

        destroy();
        m_chunk_size           = chunk_size;
        pool_params.chunk_size = chunk_size;
        pool_params.pool_size  = pool_size;
        pool_params.reg_ops    = with_reg ? &reg_counter_ops : nullptr;
        pool_params.reg_arg    = &m_reg;
        pool_params.name       = "test";
        STAGE_ASSERT_OK(uct_rc_gdr_stage_pool_create(&pool_params, &m_pool));

        eng_params.pool        = m_pool;
        eng_params.depth       = depth;
        eng_params.num_streams = num_streams;
        eng_params.name        = "test";
        STAGE_ASSERT_OK(uct_rc_gdr_stage_engine_create(&eng_params,
                                                       &m_engine));
    }

    void destroy()
    {
        uct_rc_gdr_stage_engine_destroy(m_engine);
        m_engine = nullptr;
        uct_rc_gdr_stage_pool_destroy(m_pool);
        m_pool = nullptr;
    }

    void *gpu_alloc(size_t length)
    {
        void *ptr = nullptr;

        EXPECT_EQ(UCS_OK, uct_rc_gdr_cuda_mem_alloc(std::max<size_t>(length,
                                                                     1),
                                                    &ptr));
        if (ptr != nullptr) {
            m_gpu_bufs.push_back(ptr);
        }
        return ptr;
    }

    static std::vector<uint8_t> pattern(size_t length, unsigned seed)
    {
        std::vector<uint8_t> data(length);

        for (size_t i = 0; i < length; ++i) {
            data[i] = (uint8_t)((i * 131 + (i >> 8) * 7 + seed * 29) ^ seed);
        }
        return data;
    }

    void *gpu_with(const std::vector<uint8_t> &data)
    {
        void *ptr = gpu_alloc(data.size());

        if ((ptr != nullptr) && !data.empty()) {
            EXPECT_EQ(UCS_OK, uct_rc_gdr_cuda_memcpy_htod(ptr, data.data(),
                                                          data.size()));
        }
        return ptr;
    }

    std::vector<uint8_t> gpu_read(const void *ptr, size_t length)
    {
        std::vector<uint8_t> data(length);

        if (length > 0) {
            EXPECT_EQ(UCS_OK, uct_rc_gdr_cuda_memcpy_dtoh(data.data(), ptr,
                                                          length));
        }
        return data;
    }

    ucs_status_t start(test_wire &wire, uct_rc_gdr_stage_dir_t dir,
                       void *gpu_addr, size_t length, unsigned depth = 0)
    {
        uct_rc_gdr_stage_xfer_params_t params = {};
        ucs_status_t status;

        wire.dir          = dir;
        wire.length       = length;
        wire.first_size   = uct_rc_gdr_stage_chunk_first(length,
                                                         m_chunk_size);
        wire.chunk_size   = uct_rc_gdr_stage_chunk_size(length,
                                                        m_chunk_size);
        wire.num_chunks   = uct_rc_gdr_stage_num_chunks(length,
                                                        wire.first_size,
                                                        wire.chunk_size);
        params.dir        = dir;
        params.gpu_addr   = gpu_addr;
        params.length     = length;
        params.depth      = depth;
        params.ops        = &test_wire_ops;
        params.arg        = &wire;
        status            = uct_rc_gdr_stage_xfer_start(m_engine, &params,
                                                        &wire.xfer);
        if (status != UCS_INPROGRESS) {
            wire.xfer = nullptr;
        }
        return status;
    }

    /* Progress (and finish wire chunks in `order`) until every wire in
     * `wires` has completed; false on timeout */
    bool run(std::vector<test_wire*> wires,
             test_wire::order_t order = test_wire::FIFO)
    {
        auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::seconds(20);
        bool all_done;

        do {
            uct_rc_gdr_stage_progress(m_engine);
            all_done = true;
            for (test_wire *w : wires) {
                if (w->completions == 0) {
                    all_done = false;
                    if (w->xfer != nullptr) {
                        w->finish_one(order);
                    }
                }
            }
        } while (!all_done && (std::chrono::steady_clock::now() < deadline));

        return all_done;
    }

    bool run(test_wire &wire, test_wire::order_t order = test_wire::FIFO)
    {
        return run(std::vector<test_wire*>{&wire}, order);
    }

    /* Progress until cond() holds: at once with the emulated driver, after
     * the copies in flight with a real one */
    template <typename F> bool settle(F cond)
    {
        auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::seconds(20);

        do {
            uct_rc_gdr_stage_progress(m_engine);
            if (cond()) {
                return true;
            }
        } while (std::chrono::steady_clock::now() < deadline);

        return false;
    }

    uct_rc_gdr_stage_pool_stats_t pool_stats()
    {
        uct_rc_gdr_stage_pool_stats_t stats;

        uct_rc_gdr_stage_pool_stats(m_pool, &stats);
        return stats;
    }

    uct_rc_gdr_stage_engine_stats_t engine_stats()
    {
        uct_rc_gdr_stage_engine_stats_t stats;

        uct_rc_gdr_stage_engine_stats(m_engine, &stats);
        return stats;
    }

    /* GPU -> wire -> remote, then remote -> wire -> GPU, byte-exact */
    void round_trip(size_t length, unsigned depth, unsigned seed,
                    test_wire::mode_t mode = test_wire::SYNC,
                    test_wire::order_t order = test_wire::FIFO)
    {
        std::vector<uint8_t> src_data = pattern(length, seed);
        std::vector<uint8_t> remote(length + 1, 0xee);
        void *src = gpu_with(src_data);
        void *dst = gpu_with(std::vector<uint8_t>(length, 0x5a));
        test_wire send, recv;

        ASSERT_NE(nullptr, src);
        ASSERT_NE(nullptr, dst);

        send.mode   = mode;
        send.remote = remote.data();
        ASSERT_EQ(UCS_INPROGRESS, start(send, UCT_RC_GDR_STAGE_D2H_WIRE, src,
                                        length, depth));
        ASSERT_TRUE(run(send, order)) << "send of " << length << " bytes";
        ASSERT_EQ(UCS_OK, send.status);
        ASSERT_EQ(0, memcmp(remote.data(), src_data.data(), length))
                << "remote copy of " << length << " bytes";
        EXPECT_EQ(0xee, remote[length]) << "written past the message";

        recv.mode   = mode;
        recv.remote = remote.data();
        ASSERT_EQ(UCS_INPROGRESS, start(recv, UCT_RC_GDR_STAGE_WIRE_H2D, dst,
                                        length, depth));
        ASSERT_TRUE(run(recv, order)) << "receive of " << length << " bytes";
        ASSERT_EQ(UCS_OK, recv.status);
        EXPECT_TRUE(gpu_read(dst, length) == src_data)
                << "round trip of " << length << " bytes, depth " << depth;

        EXPECT_EQ(0u, pool_stats().in_use);
        EXPECT_EQ(1, send.completions);
        EXPECT_EQ(1, recv.completions);
    }

    uct_rc_gdr_cuda_ctx_h        m_ctx          = nullptr;
    bool                         m_ctx_retained = false;
    bool                         m_log_pushed   = false;
    uct_rc_gdr_stage_pool_t      *m_pool        = nullptr;
    uct_rc_gdr_stage_engine_t    *m_engine      = nullptr;
    size_t                       m_chunk_size   = 0;
    reg_counter                  m_reg;
    std::vector<void*>           m_gpu_bufs;
};


TEST_F(stage, chunk_geometry)
{
    const size_t chunk = 4096;
    size_t offset, length;

    EXPECT_EQ(0u, uct_rc_gdr_stage_num_chunks(0, chunk, chunk));
    EXPECT_EQ(1u, uct_rc_gdr_stage_num_chunks(1, chunk, chunk));
    EXPECT_EQ(1u, uct_rc_gdr_stage_num_chunks(chunk, chunk, chunk));
    EXPECT_EQ(2u, uct_rc_gdr_stage_num_chunks(chunk + 1, chunk, chunk));
    EXPECT_EQ(4u, uct_rc_gdr_stage_num_chunks(3 * chunk + 17, chunk, chunk));

    uct_rc_gdr_stage_chunk(3 * chunk + 17, chunk, chunk, 3, &offset, &length);
    EXPECT_EQ(3 * chunk, offset);
    EXPECT_EQ(17u, length);
    uct_rc_gdr_stage_chunk(3 * chunk + 17, chunk, chunk, 1, &offset, &length);
    EXPECT_EQ(chunk, offset);
    EXPECT_EQ(chunk, length);
    uct_rc_gdr_stage_chunk(2 * chunk, chunk, chunk, 1, &offset, &length);
    EXPECT_EQ(chunk, length);

    /* a shorter first chunk */
    const size_t first = chunk / 2;
    EXPECT_EQ(1u, uct_rc_gdr_stage_num_chunks(first, first, chunk));
    EXPECT_EQ(2u, uct_rc_gdr_stage_num_chunks(first + 1, first, chunk));
    EXPECT_EQ(2u, uct_rc_gdr_stage_num_chunks(first + chunk, first, chunk));
    EXPECT_EQ(4u, uct_rc_gdr_stage_num_chunks(first + 2 * chunk + 1, first,
                                              chunk));
    uct_rc_gdr_stage_chunk(first + 2 * chunk + 1, first, chunk, 0, &offset,
                           &length);
    EXPECT_EQ(0u, offset);
    EXPECT_EQ(first, length);
    uct_rc_gdr_stage_chunk(first + 2 * chunk + 1, first, chunk, 2, &offset,
                           &length);
    EXPECT_EQ(first + chunk, offset);
    EXPECT_EQ(chunk, length);
    uct_rc_gdr_stage_chunk(first + 2 * chunk + 1, first, chunk, 3, &offset,
                           &length);
    EXPECT_EQ(first + 2 * chunk, offset);
    EXPECT_EQ(1u, length);
    uct_rc_gdr_stage_chunk(first - 5, first, chunk, 0, &offset, &length);
    EXPECT_EQ(first - 5, length);
}

/* The chunks of a message: below two buffers, two halves of at least
 * SPLIT_MIN; from two buffers on, half a buffer first, then whole buffers;
 * buffers up to SPLIT_MIN (1 MiB: the old default) always whole */
TEST_F(stage, chunk_size_per_message)
{
    const size_t MIB   = 1024 * KIB;
    const size_t split = UCT_RC_GDR_STAGE_SPLIT_MIN;
    const size_t align = UCT_RC_GDR_STAGE_SPLIT_ALIGN;
    const size_t buf   = 4 * MIB;
    const struct {
        size_t length;
        size_t first;
        size_t chunk;
        size_t num_chunks;
    } cases[] = {
        {1,                   split,           split,           1},
        {64 * KIB,            split,           split,           1},
        {split,               split,           split,           1},
        {split + 1,           split,           split,           2},
        {3 * MIB / 2,         split,           split,           2},
        {2 * MIB,             1 * MIB,         1 * MIB,         2},
        {2 * MIB + 1,         1 * MIB + align, 1 * MIB + align, 2},
        {3 * MIB,             3 * MIB / 2,     3 * MIB / 2,     2},
        {4 * MIB,             2 * MIB,         2 * MIB,         2},
        {4 * MIB + 1,         2 * MIB + align, 2 * MIB + align, 2},
        {7 * MIB,             7 * MIB / 2,     7 * MIB / 2,     2},
        {8 * MIB - 1,         buf,             buf,             2},
        {8 * MIB,             buf / 2,         buf,             3},
        {9 * MIB + 3,         buf / 2,         buf,             3},
        {10 * MIB,            buf / 2,         buf,             3},
        {10 * MIB + 1,        buf / 2,         buf,             4},
        {64 * MIB,            buf / 2,         buf,             17}
    };

    ASSERT_EQ(1 * MIB, split) << "the cases below assume it";
    for (const auto &c : cases) {
        size_t first = uct_rc_gdr_stage_chunk_first(c.length, buf);
        size_t chunk = uct_rc_gdr_stage_chunk_size(c.length, buf);
        size_t num   = uct_rc_gdr_stage_num_chunks(c.length, first, chunk);
        size_t offset, length, covered = 0;

        SCOPED_TRACE(c.length);
        EXPECT_EQ(c.first, first);
        EXPECT_EQ(c.chunk, chunk);
        EXPECT_EQ(c.num_chunks, num);
        for (size_t i = 0; i < num; ++i) {
            uct_rc_gdr_stage_chunk(c.length, first, chunk, i, &offset,
                                   &length);
            EXPECT_EQ(covered, offset);
            EXPECT_GT(length, 0u);
            EXPECT_LE(length, buf);
            covered += length;
        }
        EXPECT_EQ(c.length, covered);
    }

    /* buffers up to SPLIT_MIN: always whole */
    for (size_t b : {(size_t)4096, 12 * KIB + 100, split - 1, split}) {
        for (size_t length : {(size_t)1, b - 1, b, b + 1, 2 * b - 1, 2 * b,
                              5 * b + 3}) {
            EXPECT_EQ(b, uct_rc_gdr_stage_chunk_size(length, b))
                    << "buffer " << b << " length " << length;
            EXPECT_EQ(b, uct_rc_gdr_stage_chunk_first(length, b))
                    << "buffer " << b << " length " << length;
        }
    }

    /* a buffer between SPLIT_MIN and twice it */
    const size_t b = split + 2 * align;
    EXPECT_EQ(split + align, uct_rc_gdr_stage_chunk_size(2 * split + 3, b));
    EXPECT_EQ(b, uct_rc_gdr_stage_chunk_size(2 * split + 5 * align, b));
    EXPECT_EQ(b, uct_rc_gdr_stage_chunk_size(3 * b, b));
    EXPECT_EQ(split, uct_rc_gdr_stage_chunk_first(3 * b, b));
}

TEST_F(stage, pool_buffers_registered_once)
{
    const unsigned num = 6;
    const size_t chunk = 12 * KIB + 100; /* not a page multiple */
    std::set<uintptr_t> addrs;
    uct_rc_gdr_cuda_mem_info_t info;

    create(chunk, num, 2);
    ASSERT_EQ(num, m_reg.regs.size());
    EXPECT_EQ(chunk, uct_rc_gdr_stage_pool_chunk_size(m_pool));

    for (auto &r : m_reg.regs) {
        EXPECT_EQ(chunk, r.second);
        EXPECT_EQ(0u, (uintptr_t)r.first % 4096) << r.first;
        addrs.insert((uintptr_t)r.first);
        /* pinned host memory, from cuMemHostAlloc */
        ASSERT_EQ(UCS_OK, uct_rc_gdr_cuda_mem_query(r.first, chunk, &info));
        EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_PINNED, info.kind);
    }
    ASSERT_EQ(num, addrs.size());
    /* no two buffers overlap */
    uintptr_t prev = 0;
    for (uintptr_t a : addrs) {
        EXPECT_GE(a, prev);
        prev = a + chunk;
    }

    /* buffers handed out carry their registration */
    uct_rc_gdr_stage_buf_t *buf;
    STAGE_ASSERT_OK(uct_rc_gdr_stage_pool_get(m_pool, &buf));
    EXPECT_NE(nullptr, buf->memh);
    STAGE_ASSERT_OK(uct_rc_gdr_stage_pool_put(m_pool, buf));

    /* a transfer registers nothing more */
    round_trip(5 * chunk + 3, 3, 1);
    EXPECT_EQ(num, m_reg.regs.size());

    destroy();
    EXPECT_EQ(num, m_reg.deregs);
}

TEST_F(stage, pool_registration_failure_unwinds)
{
    uct_rc_gdr_stage_pool_params_t params = {};
    uct_rc_gdr_stage_pool_t *pool         = nullptr;

    m_reg.fail_at     = 3;
    params.chunk_size = 8 * KIB;
    params.pool_size  = 8;
    params.reg_ops    = &reg_counter_ops;
    params.reg_arg    = &m_reg;
    EXPECT_EQ(UCS_ERR_IO_ERROR, uct_rc_gdr_stage_pool_create(&params, &pool));
    EXPECT_EQ(nullptr, pool);
    EXPECT_EQ(3u, m_reg.regs.size());
    EXPECT_EQ(3u, m_reg.deregs);
}

TEST_F(stage, pool_invalid_params)
{
    uct_rc_gdr_stage_pool_params_t params = {};
    uct_rc_gdr_stage_pool_t *pool         = nullptr;

    params.chunk_size = 100;
    params.pool_size  = 4;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_stage_pool_create(&params, &pool));
    params.chunk_size = 8 * KIB;
    params.pool_size  = 0;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_stage_pool_create(&params, &pool));
    EXPECT_EQ(nullptr, pool);
    expect_logged(2, "invalid staging pool");
}

TEST_F(stage, pool_exhaustion)
{
    const unsigned num = 4;
    std::vector<uct_rc_gdr_stage_buf_t*> bufs(num);
    uct_rc_gdr_stage_buf_t *extra = nullptr;
    uct_rc_gdr_stage_pool_stats_t stats;

    create(8 * KIB, num, 2);
    for (unsigned i = 0; i < num; ++i) {
        STAGE_ASSERT_OK(uct_rc_gdr_stage_pool_get(m_pool, &bufs[i]));
    }

    EXPECT_EQ(UCS_ERR_NO_RESOURCE, uct_rc_gdr_stage_pool_get(m_pool, &extra));
    EXPECT_EQ(nullptr, extra);
    stats = pool_stats();
    EXPECT_EQ(num, stats.num_bufs);
    EXPECT_EQ(num, stats.in_use);
    EXPECT_EQ(num, stats.in_use_max);
    EXPECT_EQ(1u, stats.no_resource);

    STAGE_ASSERT_OK(uct_rc_gdr_stage_pool_put(m_pool, bufs[2]));
    EXPECT_EQ(num - 1, pool_stats().in_use);
    STAGE_ASSERT_OK(uct_rc_gdr_stage_pool_get(m_pool, &extra));
    EXPECT_EQ(bufs[2], extra);

    /* a double put is refused and changes nothing */
    STAGE_ASSERT_OK(uct_rc_gdr_stage_pool_put(m_pool, bufs[0]));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_stage_pool_put(m_pool, bufs[0]));
    EXPECT_EQ(num - 1, pool_stats().in_use);

    /* so is a buffer of no pool */
    uct_rc_gdr_stage_buf_t foreign = {};
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_stage_pool_put(m_pool, &foreign));
    expect_logged(2, "is not out of this pool");

    for (unsigned i = 1; i < num; ++i) {
        STAGE_ASSERT_OK(uct_rc_gdr_stage_pool_put(m_pool, bufs[i]));
    }
    stats = pool_stats();
    EXPECT_EQ(0u, stats.in_use);
    EXPECT_EQ(num, stats.in_use_max);
}

TEST_F(stage, pool_destroy_with_buffers_out_warns)
{
    uct_rc_gdr_stage_buf_t *buf;

    create(8 * KIB, 2, 2);
    STAGE_ASSERT_OK(uct_rc_gdr_stage_pool_get(m_pool, &buf));
    destroy();
    expect_logged(1, "1 buffers still out");
    EXPECT_EQ(2u, m_reg.deregs);
}

/* An exhausted pool refuses a new transfer (nothing started, no callback);
 * the same transfer starts once buffers are back */
TEST_F(stage, xfer_backpressure_no_resource)
{
    const size_t chunk  = 8 * KIB;
    const size_t length = 10 * chunk;
    std::vector<uint8_t> data = pattern(length, 3);
    std::vector<uint8_t> remote_a(length), remote_b(length);
    void *src = gpu_with(data);
    test_wire a, b;

    create(chunk, 2, 2);
    a.mode   = test_wire::ASYNC;
    a.remote = remote_a.data();
    ASSERT_EQ(UCS_INPROGRESS, start(a, UCT_RC_GDR_STAGE_D2H_WIRE, src,
                                    length));
    ASSERT_TRUE(settle([&] { return a.on_wire.size() == 2; }));
    EXPECT_EQ(2u, pool_stats().in_use);

    b.remote = remote_b.data();
    EXPECT_EQ(UCS_ERR_NO_RESOURCE, start(b, UCT_RC_GDR_STAGE_D2H_WIRE, src,
                                         length));
    EXPECT_EQ(nullptr, b.xfer);
    EXPECT_EQ(0u, b.post_calls);
    EXPECT_EQ(2u, pool_stats().in_use);

    ASSERT_TRUE(run(a));
    EXPECT_EQ(UCS_OK, a.status);
    EXPECT_EQ(0u, pool_stats().in_use);

    /* the queued operation is retried and goes through */
    ASSERT_EQ(UCS_INPROGRESS, start(b, UCT_RC_GDR_STAGE_D2H_WIRE, src,
                                    length));
    ASSERT_TRUE(run(b));
    EXPECT_EQ(UCS_OK, b.status);
    EXPECT_EQ(0, memcmp(remote_a.data(), data.data(), length));
    EXPECT_EQ(0, memcmp(remote_b.data(), data.data(), length));
    EXPECT_EQ(1, b.completions);
    EXPECT_EQ(1, a.completions);
    EXPECT_EQ(0u, pool_stats().in_use);
}

/* A transfer that got fewer buffers than its depth shares the pool with
 * one that holds the rest, and both finish: none waits forever for buffers
 * another one holds */
TEST_F(stage, xfer_shares_small_pool)
{
    const size_t chunk  = 4 * KIB;
    const size_t length = 37 * chunk + 123;
    const unsigned num  = 3;
    std::vector<uint8_t> data = pattern(length, 4);
    std::vector<std::vector<uint8_t>> remote(num,
                                             std::vector<uint8_t>(length));
    std::vector<test_wire> wires(num);
    void *src = gpu_with(data);

    create(chunk, 5, 4);
    for (unsigned i = 0; i < num; ++i) {
        wires[i].mode   = test_wire::ASYNC;
        wires[i].remote = remote[i].data();
    }

    ASSERT_EQ(UCS_INPROGRESS, start(wires[0], UCT_RC_GDR_STAGE_D2H_WIRE, src,
                                    length));
    EXPECT_EQ(4u, pool_stats().in_use);
    ASSERT_EQ(UCS_INPROGRESS, start(wires[1], UCT_RC_GDR_STAGE_D2H_WIRE, src,
                                    length));
    EXPECT_EQ(5u, pool_stats().in_use);
    EXPECT_EQ(UCS_ERR_NO_RESOURCE, start(wires[2], UCT_RC_GDR_STAGE_D2H_WIRE,
                                         src, length));

    ASSERT_TRUE(run({&wires[0], &wires[1]}, test_wire::RANDOM));
    EXPECT_GT(engine_stats().buf_waits, 0u);
    EXPECT_EQ(0u, pool_stats().in_use);

    ASSERT_EQ(UCS_INPROGRESS, start(wires[2], UCT_RC_GDR_STAGE_D2H_WIRE, src,
                                    length));
    ASSERT_TRUE(run(wires[2], test_wire::RANDOM));
    for (test_wire &w : wires) {
        EXPECT_EQ(UCS_OK, w.status);
        EXPECT_EQ(1, w.completions);
        EXPECT_EQ(0, memcmp(w.remote, data.data(), length));
    }
    EXPECT_EQ(0u, pool_stats().in_use);
    EXPECT_EQ(5u, pool_stats().in_use_max);
}

TEST_F(stage, buffers_returned_after_completion)
{
    const size_t chunk = 8 * KIB;
    const unsigned depth = 3;
    uct_rc_gdr_stage_engine_stats_t stats;

    uint64_t moved = 0;

    create(chunk, 8, depth);
    for (unsigned i = 0; i < 5; ++i) {
        round_trip(chunk * (i + 2) + i, depth, i);
        moved += 2 * (chunk * (i + 2) + i); /* D2H, then H2D */
        EXPECT_EQ(0u, pool_stats().in_use) << i;
    }

    EXPECT_LE(pool_stats().in_use_max, depth);
    EXPECT_EQ(moved, pool_stats().staged_bytes);
    stats = engine_stats();
    EXPECT_EQ(10u, stats.xfers_started);
    EXPECT_EQ(10u, stats.xfers_completed);
    EXPECT_EQ(0u, stats.xfers_failed);
    EXPECT_EQ(0u, stats.active);
}

/* The peer dies mid-transfer: its chunks never finish on the wire; the
 * owner cancels, and every staging buffer is back in the pool */
TEST_F(stage, cancel_returns_buffers)
{
    const size_t chunk  = 8 * KIB;
    const size_t length = 20 * chunk;
    std::vector<uint8_t> remote(length);
    void *gpu = gpu_with(pattern(length, 5));

    create(chunk, 6, 4);
    for (auto dir : {UCT_RC_GDR_STAGE_D2H_WIRE, UCT_RC_GDR_STAGE_WIRE_H2D}) {
        test_wire wire;

        SCOPED_TRACE(uct_rc_gdr_stage_dir_str(dir));
        wire.mode   = test_wire::ASYNC;
        wire.remote = remote.data();
        ASSERT_EQ(UCS_INPROGRESS, start(wire, dir, gpu, length));
        ASSERT_TRUE(settle([&] { return wire.on_wire.size() == 4; }));
        wire.finish_one(test_wire::FIFO);
        /* chunk 0 retires, chunk 4 takes its buffer and goes out */
        ASSERT_TRUE(settle([&] { return wire.posts.size() == 5; }));
        EXPECT_EQ(4u, wire.on_wire.size());
        EXPECT_EQ(4u, pool_stats().in_use);

        /* the peer is gone: nothing on the wire will complete */
        uct_rc_gdr_stage_xfer_cancel(wire.xfer, UCS_ERR_ENDPOINT_TIMEOUT);
        EXPECT_EQ(1, wire.completions);
        EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, wire.status);
        EXPECT_EQ(0u, pool_stats().in_use);
        EXPECT_EQ(0u, engine_stats().active);

        /* nothing more happens for it */
        unsigned posts = wire.post_calls;
        uct_rc_gdr_stage_progress(m_engine);
        EXPECT_EQ(posts, wire.post_calls);
        EXPECT_EQ(1, wire.completions);
    }

    /* the whole pool serves a new transfer */
    round_trip(length, 6, 6);
    EXPECT_EQ(2u, engine_stats().xfers_failed);
}

/* Destroying the engine cancels what is active and returns its buffers */
TEST_F(stage, engine_destroy_cancels)
{
    const size_t chunk  = 8 * KIB;
    const size_t length = 9 * chunk;
    void *gpu = gpu_with(pattern(length, 7));
    test_wire a, b;

    create(chunk, 8, 3);
    a.mode = test_wire::ASYNC;
    b.mode = test_wire::ASYNC;
    ASSERT_EQ(UCS_INPROGRESS, start(a, UCT_RC_GDR_STAGE_D2H_WIRE, gpu,
                                    length));
    ASSERT_EQ(UCS_INPROGRESS, start(b, UCT_RC_GDR_STAGE_WIRE_H2D, gpu,
                                    length));
    ASSERT_TRUE(settle([&] {
        return (a.on_wire.size() == 3) && (b.on_wire.size() == 3);
    }));
    EXPECT_EQ(6u, pool_stats().in_use);

    uct_rc_gdr_stage_engine_destroy(m_engine);
    m_engine = nullptr;
    EXPECT_EQ(1, a.completions);
    EXPECT_EQ(UCS_ERR_CANCELED, a.status);
    EXPECT_EQ(1, b.completions);
    EXPECT_EQ(UCS_ERR_CANCELED, b.status);
    EXPECT_EQ(0u, pool_stats().in_use);
}

/* A wire error fails the transfer, but only once the chunks still on the
 * wire are reported: the NIC may use their buffers until then */
TEST_F(stage, wire_error_waits_for_posted_chunks)
{
    const size_t chunk  = 8 * KIB;
    const size_t length = 12 * chunk;
    void *gpu = gpu_with(pattern(length, 8));

    create(chunk, 8, 4);
    for (auto dir : {UCT_RC_GDR_STAGE_D2H_WIRE, UCT_RC_GDR_STAGE_WIRE_H2D}) {
        std::vector<uint8_t> remote(length);
        test_wire wire;

        SCOPED_TRACE(uct_rc_gdr_stage_dir_str(dir));
        wire.mode   = test_wire::ASYNC;
        wire.remote = remote.data();
        ASSERT_EQ(UCS_INPROGRESS, start(wire, dir, gpu, length));
        ASSERT_TRUE(settle([&] { return wire.on_wire.size() == 4; }));

        /* chunk 1 fails (e.g. retry count exceeded) */
        EXPECT_EQ(UCS_OK, uct_rc_gdr_stage_wire_error(
                                  wire.xfer, 1, UCS_ERR_ENDPOINT_TIMEOUT));
        wire.on_wire.erase(wire.on_wire.begin() + 1);
        uct_rc_gdr_stage_progress(m_engine);
        EXPECT_EQ(0, wire.completions);
        EXPECT_EQ(4u, pool_stats().in_use);

        /* the rest come back (as flushed work requests would) */
        while (!wire.on_wire.empty()) {
            wire.finish_one(test_wire::LIFO);
            uct_rc_gdr_stage_progress(m_engine);
        }
        EXPECT_TRUE(settle([&] { return wire.completions > 0; }));
        EXPECT_EQ(1, wire.completions);
        EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, wire.status);
        EXPECT_EQ(4u, wire.post_calls) << "posted after the error";
        EXPECT_EQ(0u, pool_stats().in_use);
    }
}

TEST_F(stage, post_error_fails_xfer)
{
    const size_t chunk  = 8 * KIB;
    const size_t length = 10 * chunk;
    void *gpu = gpu_with(pattern(length, 9));

    create(chunk, 8, 3);
    for (auto dir : {UCT_RC_GDR_STAGE_D2H_WIRE, UCT_RC_GDR_STAGE_WIRE_H2D}) {
        std::vector<uint8_t> remote(length);
        test_wire wire;

        SCOPED_TRACE(uct_rc_gdr_stage_dir_str(dir));
        wire.remote      = remote.data();
        wire.fail_chunk  = 4;
        wire.fail_status = UCS_ERR_UNREACHABLE;
        ASSERT_EQ(UCS_INPROGRESS, start(wire, dir, gpu, length));
        ASSERT_TRUE(run(wire));
        EXPECT_EQ(UCS_ERR_UNREACHABLE, wire.status);
        EXPECT_EQ(1, wire.completions);
        EXPECT_EQ(4u, wire.posts.size());
        EXPECT_EQ(0u, pool_stats().in_use);
    }
}

/* post() answering "not now" is retried for the same chunk, in order */
TEST_F(stage, wire_no_resource_retried_in_order)
{
    const size_t chunk = 4 * KIB;

    create(chunk, 8, 4);
    for (auto mode : {test_wire::SYNC, test_wire::ASYNC}) {
        const size_t length = 23 * chunk + 5;
        std::vector<uint8_t> data = pattern(length, 10);
        std::vector<uint8_t> remote(length);
        void *gpu = gpu_with(data);
        test_wire wire;

        wire.mode              = mode;
        wire.remote            = remote.data();
        wire.no_resource_every = 3;
        ASSERT_EQ(UCS_INPROGRESS, start(wire, UCT_RC_GDR_STAGE_D2H_WIRE, gpu,
                                        length));
        ASSERT_TRUE(run(wire));
        EXPECT_EQ(UCS_OK, wire.status);
        ASSERT_EQ(24u, wire.posts.size());
        for (unsigned i = 0; i < wire.posts.size(); ++i) {
            EXPECT_EQ(i, wire.posts[i].chunk);
        }
        EXPECT_EQ(0, memcmp(remote.data(), data.data(), length));
    }
    EXPECT_GT(engine_stats().wire_retries, 0u);
}

TEST_F(stage, wire_done_unknown_chunk)
{
    const size_t chunk  = 8 * KIB;
    const size_t length = 6 * chunk;
    void *gpu = gpu_with(pattern(length, 11));
    test_wire wire;

    create(chunk, 4, 2);
    wire.mode = test_wire::ASYNC;
    ASSERT_EQ(UCS_INPROGRESS, start(wire, UCT_RC_GDR_STAGE_D2H_WIRE, gpu,
                                    length));
    ASSERT_TRUE(settle([&] { return wire.on_wire.size() == 2; }));

    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_rc_gdr_stage_wire_done(wire.xfer, 2));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_stage_wire_done(wire.xfer, 100));
    ASSERT_TRUE(wire.finish_one(test_wire::FIFO));
    /* twice is once too many */
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_rc_gdr_stage_wire_done(wire.xfer, 0));
    expect_logged(3, "is not on the wire");

    ASSERT_TRUE(run(wire));
    EXPECT_EQ(UCS_OK, wire.status);
}

TEST_F(stage, zero_length_and_invalid)
{
    uct_rc_gdr_stage_xfer_params_t params = {};
    uct_rc_gdr_stage_xfer_t *xfer         = nullptr;
    void *gpu = gpu_alloc(4096);
    test_wire wire;

    create(8 * KIB, 2, 2);
    EXPECT_EQ(UCS_OK, start(wire, UCT_RC_GDR_STAGE_D2H_WIRE, gpu, 0));
    uct_rc_gdr_stage_progress(m_engine);
    EXPECT_EQ(0, wire.completions);
    EXPECT_EQ(0u, wire.post_calls);

    params.dir      = UCT_RC_GDR_STAGE_D2H_WIRE;
    params.gpu_addr = gpu;
    params.length   = 100;
    params.ops      = nullptr;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_stage_xfer_start(m_engine, &params, &xfer));
    params.ops      = &test_wire_ops;
    params.arg      = &wire;
    params.gpu_addr = nullptr;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_stage_xfer_start(m_engine, &params, &xfer));
    params.gpu_addr = gpu;
    params.depth    = UCT_RC_GDR_STAGE_DEPTH_MAX + 1;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_stage_xfer_start(m_engine, &params, &xfer));
    expect_logged(3, "invalid transfer");
    EXPECT_EQ(0u, pool_stats().in_use);
}

/* Sizes around and between chunk boundaries: every chunk is posted once,
 * in order, with the right offset and length, covering the message */
TEST_F(stage, chunking_sizes)
{
    const size_t chunk = 4 * KIB;
    const size_t sizes[] = {1, 100, chunk - 1, chunk, chunk + 1,
                            2 * chunk - 1, 3 * chunk + 17, 16 * chunk,
                            16 * chunk + 4095};

    create(chunk, 8, 3);
    for (size_t length : sizes) {
        std::vector<uint8_t> data = pattern(length, 12);
        std::vector<uint8_t> remote(length);
        void *gpu = gpu_with(data);
        size_t expected_chunks = (length + chunk - 1) / chunk;
        size_t covered         = 0;
        test_wire wire;

        SCOPED_TRACE(length);
        wire.remote = remote.data();
        ASSERT_EQ(UCS_INPROGRESS, start(wire, UCT_RC_GDR_STAGE_D2H_WIRE, gpu,
                                        length));
        ASSERT_TRUE(run(wire));
        ASSERT_EQ(expected_chunks, wire.posts.size());
        for (size_t i = 0; i < wire.posts.size(); ++i) {
            EXPECT_EQ(i, wire.posts[i].chunk);
            EXPECT_EQ(covered, wire.posts[i].offset);
            EXPECT_EQ(std::min(chunk, length - covered),
                      wire.posts[i].length);
            covered += wire.posts[i].length;
        }
        EXPECT_EQ(length, covered);
        EXPECT_EQ(0, memcmp(remote.data(), data.data(), length));
        EXPECT_EQ(expected_chunks, wire.chunks_done.size());
    }
}

/* GPU -> staging -> wire -> remote -> wire -> staging -> GPU, byte-exact,
 * for many sizes, a synchronous and an asynchronous wire */
TEST_F(stage, round_trip_many_sizes)
{
    const size_t chunk = 16 * KIB;
    std::vector<size_t> sizes = {1, 7, 4095, 4096, 4097, chunk - 1, chunk,
                                 chunk + 1, 2 * chunk, 3 * chunk + 12289,
                                 65536, 100000, 256 * KIB + 3, 1024 * KIB};
    std::mt19937 rng(777);

    for (int i = 0; i < 12; ++i) {
        sizes.push_back(1 + (rng() % (600 * KIB)));
    }

    create(chunk, 6, 3);
    unsigned seed = 20;
    for (size_t length : sizes) {
        SCOPED_TRACE(length);
        round_trip(length, 3, seed++, test_wire::SYNC);
        round_trip(length, 3, seed++, test_wire::ASYNC, test_wire::RANDOM);
    }
}

/* Buffers of several MiB: the chunks the engine posts for messages below
 * and above two buffers, contiguous and in order, and the data */
TEST_F(stage, round_trip_per_message_chunks)
{
    const size_t MIB = 1024 * KIB;
    const size_t buf = 2 * MIB;
    const struct {
        size_t              length;
        std::vector<size_t> chunks;
    } cases[] = {
        {512 * KIB + 3,   {512 * KIB + 3}},
        {3 * MIB / 2 + 1, {1 * MIB, MIB / 2 + 1}},
        {3 * MIB + 5,     {1600 * KIB, 1472 * KIB + 5}},
        {4 * MIB,         {1 * MIB, 2 * MIB, 1 * MIB}},
        {5 * MIB + 7,     {1 * MIB, 2 * MIB, 2 * MIB, 7}}
    };

    ASSERT_EQ(1 * MIB, UCT_RC_GDR_STAGE_SPLIT_MIN);
    ASSERT_EQ(64 * KIB, UCT_RC_GDR_STAGE_SPLIT_ALIGN);
    create(buf, 4, 2);
    unsigned seed = 60;
    for (const auto &c : cases) {
        std::vector<uint8_t> data = pattern(c.length, seed++);
        std::vector<uint8_t> remote(c.length + 1, 0xee);
        void *gpu      = gpu_with(data);
        size_t covered = 0;
        test_wire wire;

        SCOPED_TRACE(c.length);
        ASSERT_NE(nullptr, gpu);
        wire.mode   = test_wire::ASYNC;
        wire.remote = remote.data();
        ASSERT_EQ(UCS_INPROGRESS, start(wire, UCT_RC_GDR_STAGE_D2H_WIRE, gpu,
                                        c.length));
        ASSERT_TRUE(run(wire, test_wire::RANDOM));
        ASSERT_EQ(UCS_OK, wire.status);
        ASSERT_EQ(c.chunks.size(), wire.posts.size());
        for (size_t i = 0; i < c.chunks.size(); ++i) {
            EXPECT_EQ(i, wire.posts[i].chunk);
            EXPECT_EQ(covered, wire.posts[i].offset);
            EXPECT_EQ(c.chunks[i], wire.posts[i].length) << "chunk " << i;
            covered += wire.posts[i].length;
        }
        EXPECT_EQ(c.length, covered);
        EXPECT_EQ(0, memcmp(remote.data(), data.data(), c.length));
        EXPECT_EQ(0xee, remote[c.length]);

        round_trip(c.length, 0, seed++, test_wire::ASYNC, test_wire::RANDOM);
        round_trip(c.length, 1, seed++, test_wire::SYNC);
    }
    EXPECT_LE(pool_stats().in_use_max, 2u);
}

TEST_F(stage, round_trip_several_streams)
{
    const size_t chunk = 8 * KIB;

    create(chunk, 8, 5, 3);
    for (size_t length : {chunk * 17 + 9, chunk * 3, (size_t)777}) {
        SCOPED_TRACE(length);
        round_trip(length, 0, 40, test_wire::ASYNC, test_wire::RANDOM);
        round_trip(length, 0, 41, test_wire::SYNC);
    }
}

/* Whatever order the wire finishes chunks in, posts and chunk completions
 * are in chunk order, and at most `depth` chunks are in flight */
TEST_F(stage, chunk_completion_order)
{
    const size_t chunk    = 4 * KIB;
    const size_t length   = 29 * chunk + 1000;
    const unsigned depth  = 5;
    const unsigned chunks = 30;

    create(chunk, 8, depth);
    for (auto dir : {UCT_RC_GDR_STAGE_D2H_WIRE, UCT_RC_GDR_STAGE_WIRE_H2D}) {
        for (auto order : {test_wire::FIFO, test_wire::LIFO,
                           test_wire::RANDOM}) {
            std::vector<uint8_t> data = pattern(length, 50 + order);
            std::vector<uint8_t> remote(length);
            void *gpu;
            test_wire wire;

            SCOPED_TRACE(std::string(uct_rc_gdr_stage_dir_str(dir)) +
                         " order " + std::to_string(order));
            if (dir == UCT_RC_GDR_STAGE_D2H_WIRE) {
                gpu = gpu_with(data);
            } else {
                remote = data;
                gpu    = gpu_with(std::vector<uint8_t>(length, 0));
            }

            wire.mode   = test_wire::ASYNC;
            wire.remote = remote.data();
            wire.hold   = depth; /* a full window, also with a real GPU */
            ASSERT_EQ(UCS_INPROGRESS, start(wire, dir, gpu, length));
            ASSERT_TRUE(run(wire, order));
            ASSERT_EQ(UCS_OK, wire.status);

            ASSERT_EQ(chunks, wire.posts.size());
            ASSERT_EQ(chunks, wire.chunks_done.size());
            for (unsigned i = 0; i < chunks; ++i) {
                EXPECT_EQ(i, wire.posts[i].chunk);
                EXPECT_EQ(i, wire.chunks_done[i]);
                EXPECT_EQ(i * chunk, wire.done_offsets[i]);
            }
            EXPECT_LE(wire.max_on_wire, depth);
            EXPECT_EQ(depth, wire.max_on_wire);
            if (order != test_wire::FIFO) {
                EXPECT_FALSE(std::is_sorted(wire.finished.begin(),
                                            wire.finished.end()))
                        << "the wire should have finished out of order";
            }

            if (dir == UCT_RC_GDR_STAGE_D2H_WIRE) {
                EXPECT_EQ(0, memcmp(remote.data(), data.data(), length));
            } else {
                EXPECT_TRUE(gpu_read(gpu, length) == data);
            }
        }
    }
}

/* Depth changes how much is in flight, never what is moved */
TEST_F(stage, depth_1_and_n_equivalent)
{
    const size_t chunk  = 4 * KIB;
    const size_t length = 19 * chunk + 333;
    std::vector<uint8_t> data = pattern(length, 60);
    std::vector<std::vector<test_wire::post_rec>> posts;
    std::vector<std::vector<unsigned>> dones;
    std::vector<uint8_t> reference;

    create(chunk, 8, 1);
    for (unsigned depth : {1u, 2u, 4u, 8u}) {
        std::vector<uint8_t> remote(length);
        void *src = gpu_with(data);
        void *dst = gpu_with(std::vector<uint8_t>(length, 0));
        test_wire send, recv;

        SCOPED_TRACE(depth);
        /* a fresh pool each time, for the high-water mark */
        create(chunk, 8, depth);

        send.mode   = test_wire::ASYNC;
        send.remote = remote.data();
        send.hold   = depth;
        ASSERT_EQ(UCS_INPROGRESS, start(send, UCT_RC_GDR_STAGE_D2H_WIRE, src,
                                        length));
        ASSERT_TRUE(run(send, test_wire::RANDOM));
        recv.mode   = test_wire::ASYNC;
        recv.remote = remote.data();
        ASSERT_EQ(UCS_INPROGRESS, start(recv, UCT_RC_GDR_STAGE_WIRE_H2D, dst,
                                        length));
        ASSERT_TRUE(run(recv, test_wire::RANDOM));
        EXPECT_EQ(UCS_OK, send.status);
        EXPECT_EQ(UCS_OK, recv.status);

        EXPECT_EQ(depth, send.max_on_wire);
        EXPECT_EQ(depth, pool_stats().in_use_max);
        EXPECT_EQ(0u, pool_stats().in_use);

        std::vector<uint8_t> result = gpu_read(dst, length);
        EXPECT_TRUE(result == data);
        if (reference.empty()) {
            reference = remote;
        } else {
            EXPECT_TRUE(reference == remote);
        }
        posts.push_back(send.posts);
        dones.push_back(send.chunks_done);
    }

    for (size_t d = 1; d < posts.size(); ++d) {
        ASSERT_EQ(posts[0].size(), posts[d].size());
        for (size_t i = 0; i < posts[0].size(); ++i) {
            EXPECT_EQ(posts[0][i].chunk, posts[d][i].chunk);
            EXPECT_EQ(posts[0][i].offset, posts[d][i].offset);
            EXPECT_EQ(posts[0][i].length, posts[d][i].length);
        }
        EXPECT_EQ(dones[0], dones[d]);
    }
}

/* The engine works in its own context and leaves the caller's alone */
TEST_F(stage, caller_context_kept)
{
    const size_t chunk  = 8 * KIB;
    const size_t length = 5 * chunk + 1;
    std::vector<uint8_t> data = pattern(length, 70);
    std::vector<uint8_t> remote(length);
    void *gpu = gpu_with(data);
    uct_rc_gdr_cuda_ctx_h current;
    test_wire wire;

    create(chunk, 4, 2);
    STAGE_ASSERT_OK(uct_rc_gdr_cuda_ctx_set_current(nullptr));

    wire.remote = remote.data();
    ASSERT_EQ(UCS_INPROGRESS, start(wire, UCT_RC_GDR_STAGE_D2H_WIRE, gpu,
                                    length));
    STAGE_ASSERT_OK(uct_rc_gdr_cuda_ctx_get_current(&current));
    EXPECT_EQ(nullptr, current);
    ASSERT_TRUE(run(wire));
    STAGE_ASSERT_OK(uct_rc_gdr_cuda_ctx_get_current(&current));
    EXPECT_EQ(nullptr, current);
    EXPECT_EQ(UCS_OK, wire.status);
    EXPECT_EQ(0, memcmp(remote.data(), data.data(), length));

    STAGE_ASSERT_OK(uct_rc_gdr_cuda_ctx_set_current(m_ctx));
}

/* A pool without registration callbacks (the benchmark's) works the same */
TEST_F(stage, pool_without_registration)
{
    create(8 * KIB, 4, 2, 1, false);
    EXPECT_TRUE(m_reg.regs.empty());
    round_trip(50 * KIB + 1, 2, 80);
}

} // namespace
