/* Fixture for contrib/check-circles.py: the bottom layer. Its inline fast
 * path falls back to low.c (one object, no circle). */
#ifndef LOW_H_
#define LOW_H_

typedef void (*low_cb_t)(int status);

void low_slow(int x);

static inline void low_fast(int x)
{
    if (x > 0) {
        low_slow(x);
    }
}

#endif
