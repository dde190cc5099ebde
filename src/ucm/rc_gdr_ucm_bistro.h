/**
 * rc_gdr: patching a function's entry point so that every caller reaches a
 * hook, with a trampoline that calls the original (see rc_gdr_ucm_bistro.c).
 * What to patch, and what the hooks do, is rc_gdr_ucm_cuda.c's.
 */

#ifndef RC_GDR_UCM_BISTRO_H_
#define RC_GDR_UCM_BISTRO_H_

#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>

BEGIN_C_DECLS

/**
 * Make func jump to hook. *orig_p is set to a trampoline that calls the
 * original before the patch is applied (the hook may run at once). libucm's
 * patcher first; on x86-64 a prologue it cannot relocate is relocated here.
 * Nothing is ever unpatched. Callers serialize their calls.
 *
 * @param name      for log messages
 * @param method_p  on success, which patcher did it ("ucm_bistro",
 *                  "rc_gdr_bistro")
 */
ucs_status_t rc_gdr_ucm_bistro_patch(void *func, void *hook, const char *name,
                                     void **orig_p, const char **method_p);

/**
 * Whether func's first instruction jumps into another loaded object: someone
 * else (UCM's CUDA module) patched it, and its hook reports the call. Where
 * this cannot be told, every address counts as patched.
 */
int rc_gdr_ucm_bistro_is_patched(const void *func);

/**
 * Where the jump that func begins with leads, or NULL: how an entry point
 * UCM's patcher rewrote looks ("jmp rel32"; "movabs $hook,%rax; jmp *%rax"
 * in UCX 1.22, with %r11 in older releases). NULL off x86-64.
 */
const void *rc_gdr_ucm_bistro_jump_target(const void *func);

END_C_DECLS

#endif
