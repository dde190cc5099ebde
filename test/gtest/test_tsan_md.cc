/*
 * tsan_md's googletest suite: the run of tsan_md.c (free hooks on other
 * threads while the md registers, looks up and reads memory handles, all
 * under ThreadSanitizer) as one test, so that its result is googletest's.
 * A race is a ThreadSanitizer report, and with TSAN_OPTIONS=halt_on_error=1
 * the program dies before googletest's summary.
 */

#include <gtest/gtest.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>


/* tsan_md.c: the errors the run met, each said on stderr */
extern "C" unsigned tsan_md_run(void);


TEST(tsan_md, free_hooks_on_other_threads)
{
    EXPECT_EQ(0u, tsan_md_run());
}


int main(int argc, char **argv)
{
    /* The hooks report unmaps through ucm_vm_munmap() here: UCM's libc
     * hooks (madvise of a thread's stack as it exits) run where TSan's
     * thread state is already gone. UCM reads its mode when libucm loads,
     * so the program starts again with it set. */
    if (getenv("UCX_MEM_MMAP_HOOK_MODE") == NULL) {
        setenv("UCX_MEM_MMAP_HOOK_MODE", "none", 1);
        execv("/proc/self/exe", argv);
        perror("tsan_md: execv");
        return 1;
    }

    testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
