/* Fixture: the top layer calls down and hands its own function up as a
 * callback (a reference, not a call) */
#include "low.h"

void low_set_cb(low_cb_t cb);

static void high_done(int status)
{
    (void)status;
}

static const struct {
    low_cb_t done;
} high_ops = {
    .done = high_done
};

void high_run(void)
{
    low_set_cb(high_ops.done);
    low_set_cb(high_done);
    low_fast(3);
}
