/**
 * rc_gdr: CUDA free events.
 *
 * The registration cache must drop a CUDA entry before the allocation under
 * it is released (doc/DESIGN.md, section 2). UCX reports that with
 * UCM_EVENT_MEM_TYPE_FREE, but only from its CUDA module (libucm_cuda); a UCX
 * built without CUDA, such as Debian's 1.13.1, accepts the subscription and
 * never fires it. This module gives the memory domains one subscription that
 * works in both cases:
 *
 *   - when libucm_cuda is loaded, the UCM event is forwarded (mode UCM),
 *     and the entry points UCM does not patch (cuMemFreeAsync_ptsz, what
 *     cuGetProcAddress() gives besides the exports) are hooked here, as in
 *     mode HOOKS: no entry point is patched twice;
 *   - otherwise the CUDA driver's release calls are hooked here (mode HOOKS):
 *     cuMemFree, cuMemFree_v2, cuMemFreeHost, cuMemFreeAsync,
 *     cuMemFreeAsync_ptsz and cuMemUnmap, at the entry points that dlsym()
 *     and cuGetProcAddress() return. The runtime API (cudaFree,
 *     cudaFreeAsync, cudaFreeHost) reaches the driver through those entry
 *     points, so it is covered without hooks of its own (see the .c file).
 *
 * A subscriber is called BEFORE the memory is released, from the thread that
 * releases it, with the whole range that goes away:
 *   - DEVICE:      cuMemFree / cuMemFreeAsync / cudaFree: the allocation
 *                  (cuMemGetAddressRange), also when the call gave only its
 *                  address;
 *   - VMM:         cuMemUnmap: the unmapped range. cuMemRelease is not an
 *                  event: memory that is still mapped stays valid until it is
 *                  unmapped;
 *   - HOST_PINNED: cuMemFreeHost / cudaFreeHost: the pinned allocation.
 *
 * Nothing here needs CUDA: without a driver, install answers
 * UCS_ERR_NO_DEVICE and subscribers are simply never called. The buffer-id
 * check of the registration cache stays in force in every mode: an event
 * that cannot be delivered (a free that happened before install, a
 * stream-ordered pool that recycles a range without a free call) never makes
 * a stale hit.
 *
 * Environment:
 *   RC_GDR_UCM_CUDA_MODE  auto (default): UCM when libucm_cuda is loaded,
 *                         HOOKS otherwise; "hooks" or "ucm" force a mode
 *                         ("ucm" alone: nothing is hooked here),
 *                         "none" installs nothing (UCS_ERR_UNSUPPORTED).
 *                         Read once, by the first install.
 */

#ifndef RC_GDR_UCM_H_
#define RC_GDR_UCM_H_

#include <ucs/type/status.h>
#include <ucs/sys/compiler_def.h>

#include <stddef.h>

BEGIN_C_DECLS

#define RC_GDR_UCM_CUDA_MODE_ENV      "RC_GDR_UCM_CUDA_MODE"

/* Subscribers at one time: one per memory domain, and a few for tests */
#define RC_GDR_UCM_CUDA_MAX_HANDLERS  16


/* What kind of memory a free event releases */
typedef enum {
    RC_GDR_UCM_CUDA_MEM_DEVICE,       /* cuMemAlloc, cuMemAllocAsync (pool),
                                         cuMemAllocManaged */
    RC_GDR_UCM_CUDA_MEM_VMM,          /* one cuMemMap mapping */
    RC_GDR_UCM_CUDA_MEM_HOST_PINNED,  /* cuMemHostAlloc, cudaMallocHost */
    RC_GDR_UCM_CUDA_MEM_LAST
} rc_gdr_ucm_cuda_mem_kind_t;

/* Where free events come from */
typedef enum {
    RC_GDR_UCM_CUDA_MODE_NONE,        /* not installed, or no driver */
    RC_GDR_UCM_CUDA_MODE_HOOKS,       /* driver entry points patched here */
    RC_GDR_UCM_CUDA_MODE_UCM,         /* UCM_EVENT_MEM_TYPE_FREE forwarded */
    RC_GDR_UCM_CUDA_MODE_LAST
} rc_gdr_ucm_cuda_mode_t;


/**
 * Called before [address, address + length) is released. It runs in the
 * thread that frees, possibly in several threads at once, and may itself
 * free CUDA memory (that free is reported as well). It must not call
 * rc_gdr_ucm_cuda_set_free_handler/unset_free_handler.
 */
typedef void (*rc_gdr_ucm_cuda_free_cb_t)(void *address, size_t length,
                                          rc_gdr_ucm_cuda_mem_kind_t kind,
                                          void *arg);

/* One patched entry point, for diagnostics */
typedef struct rc_gdr_ucm_cuda_hook_info {
    const char *name;       /* "cuMemFree_v2", "cuMemFree@proc(13000,0x1)" */
    void       *address;    /* the entry point that was patched */
    const char *method;     /* "ucm_bistro": libucm's patcher built the
                               trampoline; "rc_gdr_bistro": ours did (x86-64,
                               prologues libucm cannot relocate) */
} rc_gdr_ucm_cuda_hook_info_t;


/**
 * Start delivering CUDA free events, once per process: later calls (from any
 * thread) return the first outcome.
 *
 * @return UCS_OK                 events are delivered (see
 *                                rc_gdr_ucm_cuda_mode());
 *         UCS_ERR_NO_DEVICE      no usable CUDA driver (logged at debug
 *                                level only);
 *         UCS_ERR_UNSUPPORTED    RC_GDR_UCM_CUDA_MODE=none, or an entry
 *                                point the driver has could not be patched
 *                                (those that could stay hooked).
 */
ucs_status_t rc_gdr_ucm_cuda_install(void);

/** The mode the first install chose; NONE before it, or when it failed. */
rc_gdr_ucm_cuda_mode_t rc_gdr_ucm_cuda_mode(void);

const char *rc_gdr_ucm_cuda_mode_str(rc_gdr_ucm_cuda_mode_t mode);

const char *rc_gdr_ucm_cuda_mem_kind_str(rc_gdr_ucm_cuda_mem_kind_t kind);

/**
 * Subscribe to free events. May be called before install.
 *
 * @return UCS_ERR_ALREADY_EXISTS for a (cb, arg) already subscribed,
 *         UCS_ERR_EXCEEDS_LIMIT past RC_GDR_UCM_CUDA_MAX_HANDLERS,
 *         UCS_ERR_INVALID_PARAM from inside a free callback.
 */
ucs_status_t rc_gdr_ucm_cuda_set_free_handler(rc_gdr_ucm_cuda_free_cb_t cb,
                                              void *arg);

/**
 * Unsubscribe. When it returns, no call of (cb, arg) is running in any
 * thread and none will start.
 *
 * @return UCS_ERR_NO_ELEM when (cb, arg) is not subscribed,
 *         UCS_ERR_INVALID_PARAM from inside a free callback.
 */
ucs_status_t rc_gdr_ucm_cuda_unset_free_handler(rc_gdr_ucm_cuda_free_cb_t cb,
                                                void *arg);

/**
 * The entry points install patched (mode HOOKS).
 *
 * @return how many there are; up to max of them are written to info.
 */
unsigned rc_gdr_ucm_cuda_hooks(rc_gdr_ucm_cuda_hook_info_t *info,
                               unsigned max);

END_C_DECLS

#endif
