/* Fixture: p.c -> q.h (an inline) -> r.c (a macro's call) -> p.c */
#include "q.h"

void p_back(void)
{
}

void p_go(void)
{
    q_inline();
}
