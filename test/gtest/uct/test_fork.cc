/*
 * Children of a process with registrations: one unmaps a registered buffer
 * (its free hook must leave the parent's MR alone: the child shares the
 * verbs context) and exits, one execs, one writes memory and exits. The
 * parent then writes its buffers (copy-on-write must not move them away
 * from the NIC) and moves them, byte-exact.
 *
 * See file LICENSE for terms.
 */

#include "uct_rc_gdr_test.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>


/* The suite is named "fork": in this namespace the fixture's name hides
 * the system call, which the tests call as ::fork() */
namespace uct_rc_gdr_fork {

/* Memory a child writes: not registered, in the pages around the
 * registered buffers */
static unsigned char scratch[2u * 1024 * 1024];


class fork : public uct_rc_gdr_pair_test {
protected:
    static const size_t LENGTH = 256 * 1024;

    enum child_kind {
        CHILD_UNMAPS,   /* unmaps the extra registered buffer and exits */
        CHILD_EXECS,
        CHILD_WRITES    /* writes unregistered memory and exits */
    };

    void SetUp() override;
    void TearDown() override;
    size_t pair_buf_size() const override;

    /* A put of LENGTH bytes from buf (registered as memh) into b's buffer
     * and a get back into buf, both checked byte by byte */
    void put_get(unsigned char *buf, uct_mem_h memh, unsigned seed,
                 const char *what);

    /* Forks a child of that kind, waits for it, and moves both registered
     * buffers of a afterwards */
    void child_test(child_kind kind);

    unsigned char *extra = (unsigned char*)MAP_FAILED; /* registered too */
    uct_mem_h extra_memh = UCT_MEM_HANDLE_NULL;
    void *extra_rkey     = nullptr;
    uct_rkey_bundle_t rkey;
    bool rkey_unpacked   = false;
};


void fork::SetUp()
{
    uct_rc_gdr_pair_test::SetUp();
    if (IsSkipped() || HasFatalFailure()) {
        return;
    }

    ASSERT_EQ(UCS_OK, uct_rkey_unpack(a->component, wb.rkey, &rkey));
    rkey_unpacked = true;

    extra = (unsigned char*)mmap(NULL, LENGTH, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(MAP_FAILED, (void*)extra) << "mmap: " << strerror(errno);
    uct_test_mem_reg(a, extra, LENGTH, &extra_memh, &extra_rkey);
}

void fork::TearDown()
{
    if (extra_memh != UCT_MEM_HANDLE_NULL) {
        uct_md_mem_dereg(a->md, extra_memh);
    }
    free(extra_rkey);
    if (extra != MAP_FAILED) {
        munmap(extra, LENGTH);
    }
    if (rkey_unpacked) {
        uct_rkey_release(a->component, &rkey);
    }
    uct_rc_gdr_pair_test::TearDown();
}

size_t fork::pair_buf_size() const
{
    return 2u * 1024 * 1024;
}

void fork::put_get(unsigned char *buf, uct_mem_h memh, unsigned seed,
                   const char *what)
{
    unsigned char *dst = (unsigned char*)b->buf;
    uct_test_comp_t wc;
    ucs_status_t status;
    uct_iov_t iov;
    bool ok;

    uct_test_fill(buf, LENGTH, seed);
    memset(dst, 0, LENGTH);
    uct_test_iov_init(&iov, buf, LENGTH, memh);
    uct_test_comp_init(&wc);
    status = UCT_TEST_RETRY(nodes, 2, uct_ep_put_zcopy(a->ep, &iov, 1, wb.buf,
                                                       rkey.rkey, &wc.comp));
    status = uct_test_comp_wait(nodes, 2, status, &wc);
    if (status == UCS_OK) {
        status = uct_test_ep_flush(nodes, 2, a->ep);
    }
    ok = (status == UCS_OK) && !memcmp(dst, buf, LENGTH);

    uct_test_fill(dst, LENGTH, seed + 1);
    memset(buf, 0, LENGTH);
    uct_test_comp_init(&wc);
    status = UCT_TEST_RETRY(nodes, 2, uct_ep_get_zcopy(a->ep, &iov, 1, wb.buf,
                                                       rkey.rkey, &wc.comp));
    status = uct_test_comp_wait(nodes, 2, status, &wc);
    if (status == UCS_OK) {
        status = uct_test_ep_flush(nodes, 2, a->ep);
    }
    ok = ok && (status == UCS_OK) && !memcmp(dst, buf, LENGTH);
    UCT_TEST_EXPECT(ok, "%s: put and get of %zu bytes (%s)", what,
                    (size_t)LENGTH, ucs_status_string(status));
}

void fork::child_test(child_kind kind)
{
    static const char *what[] = {"unmaps a registered buffer", "execs",
                                 "writes memory"};
    int wstatus;
    pid_t pid;

    put_get(extra, extra_memh, 11, "before fork");

    fflush(stdout);
    fflush(stderr);
    pid = ::fork();
    ASSERT_NE(-1, pid) << "fork: " << strerror(errno);
    if (pid == 0) {
        alarm(30);
        if (kind == CHILD_UNMAPS) {
            munmap(extra, LENGTH);
        } else if (kind == CHILD_EXECS) {
            execl("/bin/true", "true", (char*)NULL);
            _exit(4);
        } else {
            /* Fork-safe registrations are not shared with a child: where
             * ibv_fork_init() keeps them out of it, touching them faults,
             * so only the pages around are written */
            memset(scratch, 0xa5, sizeof(scratch));
        }
        _exit(0);
    }

    ASSERT_EQ(pid, waitpid(pid, &wstatus, 0)) << "waitpid: "
                                              << strerror(errno);
    UCT_TEST_EXPECT(WIFEXITED(wstatus) && (WEXITSTATUS(wstatus) == 0),
                    "child (%s) exited normally (status 0x%x)", what[kind],
                    wstatus);

    /* The parent writes its registered buffers after the fork, then the
     * NIC reads and writes them */
    put_get(extra, extra_memh, 21,
            (kind == CHILD_UNMAPS) ? "after fork, the buffer the child "
                                     "unmapped" :
                                     "after fork, the extra registered buffer");
    put_get((unsigned char*)a->buf, a->memh, 31,
            "after fork, the node's buffer");
}


TEST_F(fork, child_unmapping_registered_buffer_leaves_registrations)
{
    child_test(CHILD_UNMAPS);
}

TEST_F(fork, child_exec_leaves_registrations)
{
    child_test(CHILD_EXECS);
}

TEST_F(fork, child_writing_memory_leaves_registrations)
{
    child_test(CHILD_WRITES);
}

} /* namespace uct_rc_gdr_fork */
