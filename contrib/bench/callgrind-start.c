/*
 * callgrind-start: preloaded into a UCT program run with
 * 'valgrind --tool=callgrind --instr-atstart=no', turns callgrind's
 * instrumentation on when the program creates its first UCT endpoint, so
 * that the start-up before it (UCX's initialisation, every memory domain
 * opened) runs at plain valgrind speed. For contrib/bench-callgrind.sh,
 * which counts only inside operation and progress functions, all called
 * after that point.
 *
 * Built by contrib/bench-callgrind.sh in the guest:
 *   cc -shared -fPIC -o callgrind-start.so callgrind-start.c -ldl
 */

#define _GNU_SOURCE
#include <uct/api/uct.h>
#include <valgrind/callgrind.h>

#include <dlfcn.h>


ucs_status_t uct_ep_create(const uct_ep_params_t *params, uct_ep_h *ep_p)
{
    static ucs_status_t (*next)(const uct_ep_params_t*, uct_ep_h*);
    static int started;

    if (next == NULL) {
        next = (ucs_status_t (*)(const uct_ep_params_t*, uct_ep_h*))
               dlsym(RTLD_NEXT, "uct_ep_create");
        if (next == NULL) {
            return UCS_ERR_NO_ELEM;
        }
    }

    if (!started) {
        started = 1;
        CALLGRIND_START_INSTRUMENTATION;
    }
    return next(params, ep_p);
}
