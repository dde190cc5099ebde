/*
 * rc_gdr glue: UCS's arithmetic helpers (ucs_align_*, ucs_min, ...) wherever
 * this UCX release keeps them: ucs/sys/math.h, and ucs/sys/ptr_arith.h where
 * the release has it (1.17 on; configure looks). Core files include this instead of ucs/sys/math.h.
 */

#ifndef UCT_RC_GDR_GLUE_MATH_H_
#define UCT_RC_GDR_GLUE_MATH_H_

#include <ucs/sys/math.h>
#if RC_GDR_UCX_HAVE_PTR_ARITH_H
#  include <ucs/sys/ptr_arith.h>
#endif

#endif
