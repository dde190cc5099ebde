/* Fixture: stores a callback and calls it, which is no call of its file */
#include "low.h"

static low_cb_t low_saved_cb;

/* a comment's opener inside a string opens nothing: "}" */
static const char *low_paths[] = {"/sys/devices/*/config", "/*}"};

void low_slow(int x)
{
    low_fast(x - 1);
    if (low_saved_cb != NULL) {
        low_saved_cb(x); /* through a pointer: not an edge */
    }
}

void low_set_cb(low_cb_t cb)
{
    low_saved_cb = cb;
}
