/*
 * A stand-in for libucp's version query, preloaded before the module: the
 * process then "runs" another UCX release, and the module must refuse to
 * register instead of touching structures of a layout it does not know.
 * RC_GDR_FAKE_UCX_VERSION="major.minor.patch" (default 1.18.1).
 */

#include <stdio.h>
#include <stdlib.h>

void ucp_get_version(unsigned *major, unsigned *minor, unsigned *patch)
{
    const char *env = getenv("RC_GDR_FAKE_UCX_VERSION");

    *major = 1;
    *minor = 18;
    *patch = 1;
    if (env != NULL) {
        sscanf(env, "%u.%u.%u", major, minor, patch);
    }
}
