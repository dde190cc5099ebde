#ifndef Q_H_
#define Q_H_

#define Q_CALL_R(_x) \
    r_work(_x)

void r_work(int x);

static inline void q_inline(void)
{
    Q_CALL_R(1);
}

#endif
