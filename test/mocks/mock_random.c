/**
 * getrandom(2) that can be made to fail (mock_random.h).
 *
 * See file LICENSE for terms.
 */

#include "mock_random.h"

#include <errno.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>


static int      mock_random_errno = 0;
static unsigned mock_random_count = 0;


void mock_random_fail(int err)
{
    __atomic_store_n(&mock_random_errno, err, __ATOMIC_RELAXED);
}

unsigned mock_random_calls(void)
{
    return __atomic_load_n(&mock_random_count, __ATOMIC_RELAXED);
}

ssize_t getrandom(void *buf, size_t buflen, unsigned int flags)
{
    int err = __atomic_load_n(&mock_random_errno, __ATOMIC_RELAXED);

    __atomic_add_fetch(&mock_random_count, 1, __ATOMIC_RELAXED);
    if (err != 0) {
        errno = err;
        return -1;
    }
    return syscall(SYS_getrandom, buf, buflen, flags);
}
