/**
 * rc_gdr: patching a function's entry point ("bistro"), apart from the CUDA
 * hooks that use it (rc_gdr_ucm_cuda.c): how to patch is one concern, which
 * calls to hook another (as UCM's bistro/ and cuda/ are).
 *
 * The patch itself is libucm's (ucm_bistro_patch). On x86-64 the libucm of
 * UCX 1.13 relocates only a few prologue instructions into its trampoline
 * (pushes, "sub $imm32,%rsp", a few movs) and refuses the others; driver
 * entry points often begin with RIP-relative loads, endbr64 or short
 * compares. For those, this file builds the trampoline itself: a small
 * instruction-length decoder copies the displaced instructions to memory
 * mapped within +-2 GiB of the function, where RIP-relative displacements
 * and relative branches only need to be re-aimed, and the function's first
 * five bytes become a near jump to an absolute jump to the hook.
 */

#ifndef _GNU_SOURCE
#  define _GNU_SOURCE /* dladdr, MAP_FIXED_NOREPLACE */
#endif

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "rc_gdr_ucm_bistro.h"

#include <ucs/debug/log_def.h>
#include <ucs/sys/sys.h>
#include <ucm/bistro/bistro.h> /* after ucs/: it uses size_t unincluded */
#include <uct/ib_gdr/rc_gdr_glue_math.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>


#if defined(__x86_64__)

#ifndef MAP_FIXED_NOREPLACE
#  define MAP_FIXED_NOREPLACE 0x100000
#endif

#define RC_GDR_UCM_X86_PATCH_LEN  5     /* jmp rel32 */
#define RC_GDR_UCM_X86_SITE_SIZE  128   /* stub and trampoline of one site */
#define RC_GDR_UCM_X86_TRAMP_OFF  16    /* after the stub, 14 bytes */
#define RC_GDR_UCM_X86_MAX_PAGES  8
/* What a rel32 reaches, less room for the size of the page */
#define RC_GDR_UCM_X86_REACH      ((uintptr_t)INT32_MAX - UCS_MBYTE)
/* No code page below this, nor this close under the stack */
#define RC_GDR_UCM_X86_LOW_LIMIT  (16 * UCS_MBYTE)
#define RC_GDR_UCM_X86_STACK_GAP  (64 * UCS_MBYTE)

enum {
    RC_GDR_UCM_X86_INSN_END  = UCS_BIT(0), /* no fall-through (ret, jmp) */
    RC_GDR_UCM_X86_INSN_RIP  = UCS_BIT(1), /* has a RIP-relative disp32 */
    RC_GDR_UCM_X86_INSN_JCC  = UCS_BIT(2), /* relative conditional jump */
    RC_GDR_UCM_X86_INSN_JMP  = UCS_BIT(3), /* relative jump */
    RC_GDR_UCM_X86_INSN_CALL = UCS_BIT(4)  /* relative call */
};

#define RC_GDR_UCM_X86_INSN_BRANCH \
    (RC_GDR_UCM_X86_INSN_JCC | RC_GDR_UCM_X86_INSN_JMP | \
     RC_GDR_UCM_X86_INSN_CALL)

typedef struct {
    size_t   length;
    size_t   disp_offset;   /* INSN_RIP: where the disp32 is */
    unsigned cond;          /* INSN_JCC: condition code */
    int64_t  rel;           /* INSN_BRANCH: displacement */
    unsigned flags;
} rc_gdr_ucm_x86_insn_t;

/* Executable pages for stubs and trampolines, under the caller's lock */
typedef struct {
    uint8_t *base;
    size_t  size;
    size_t  used;
} rc_gdr_ucm_x86_page_t;

static rc_gdr_ucm_x86_page_t rc_gdr_ucm_x86_pages[RC_GDR_UCM_X86_MAX_PAGES];


/*
 * Length of one instruction, and what in it depends on where it is. Knows
 * the general-purpose, x87 and SSE encodings a function prologue uses; VEX,
 * EVEX and the rarer instructions are refused (the entry point is then not
 * hooked, which is safe).
 */
static ucs_status_t
rc_gdr_ucm_x86_decode(const uint8_t *code, rc_gdr_ucm_x86_insn_t *insn)
{
    const uint8_t *p = code;
    int opsize16     = 0;
    int addr32       = 0;
    int rex_w        = 0;
    int two_byte     = 0;
    int has_modrm    = 0;
    int imm_group    = 0;   /* F6/F7: immediate for /0 and /1 only */
    size_t imm       = 0;
    size_t rel_size  = 0;
    size_t iz;
    int32_t rel32;
    uint8_t op, modrm, mod, rm, reg;

    memset(insn, 0, sizeof(*insn));

    /* Legacy prefixes, then REX */
    for (;; ++p) {
        if (*p == 0x66) {
            opsize16 = 1;
        } else if (*p == 0x67) {
            addr32 = 1;
        } else if ((*p != 0xf0) && (*p != 0xf2) && (*p != 0xf3) &&
                   (*p != 0x2e) && (*p != 0x36) && (*p != 0x3e) &&
                   (*p != 0x26) && (*p != 0x64) && (*p != 0x65)) {
            break;
        }
    }

    if ((*p & 0xf0) == 0x40) {
        rex_w = !!(*p & 0x08);
        ++p;
    }

    iz = opsize16 ? 2 : 4;
    op = *p++;

    if (op == 0x0f) {
        two_byte = 1;
        op       = *p++;
        if (op == 0x38) {
            ++p;
            has_modrm = 1;
        } else if (op == 0x3a) {
            ++p;
            has_modrm = 1;
            imm       = 1;
        } else if ((op >= 0x80) && (op <= 0x8f)) {
            insn->flags = RC_GDR_UCM_X86_INSN_JCC;
            insn->cond  = op & 0xf;
            rel_size    = 4;
        } else if ((op == 0x05) || (op == 0x31) || (op == 0xa2) ||
                   ((op >= 0xc8) && (op <= 0xcf))) {
            /* syscall, rdtsc, cpuid, bswap */
        } else if ((op == 0x70) || (op == 0x71) || (op == 0x72) ||
                   (op == 0x73) || (op == 0xa4) || (op == 0xac) ||
                   (op == 0xba) || (op == 0xc2) || (op == 0xc4) ||
                   (op == 0xc5) || (op == 0xc6)) {
            has_modrm = 1;
            imm       = 1;
        } else if (((op >= 0x10) && (op <= 0x1f)) ||
                   ((op >= 0x28) && (op <= 0x2f)) ||
                   ((op >= 0x40) && (op <= 0x6f)) ||
                   ((op >= 0x74) && (op <= 0x76)) ||
                   (op == 0x7e) || (op == 0x7f) ||
                   ((op >= 0x90) && (op <= 0x9f)) ||
                   (op == 0xa3) || (op == 0xab) || (op == 0xaf) ||
                   (op == 0xb0) || (op == 0xb1) || (op == 0xb3) ||
                   ((op >= 0xb6) && (op <= 0xbf) && (op != 0xba)) ||
                   (op == 0xc0) || (op == 0xc1) || (op == 0xc3) ||
                   (op == 0xc7) || (op >= 0xd0)) {
            has_modrm = 1;
        } else {
            return UCS_ERR_UNSUPPORTED;
        }
    } else if (op < 0x40) {
        /* add, or, adc, sbb, and, sub, xor, cmp */
        switch (op & 7) {
        case 0: case 1: case 2: case 3:
            has_modrm = 1;
            break;
        case 4:
            imm = 1;
            break;
        case 5:
            imm = iz;
            break;
        default:
            return UCS_ERR_UNSUPPORTED;
        }
    } else if ((op >= 0x50) && (op <= 0x5f)) {
        /* push, pop */
    } else if ((op >= 0x70) && (op <= 0x7f)) {
        insn->flags = RC_GDR_UCM_X86_INSN_JCC;
        insn->cond  = op & 0xf;
        rel_size    = 1;
    } else if ((op >= 0xb0) && (op <= 0xb7)) {
        imm = 1;
    } else if ((op >= 0xb8) && (op <= 0xbf)) {
        imm = rex_w ? 8 : iz;
    } else if (((op >= 0x84) && (op <= 0x8f)) || (op == 0x63) ||
               ((op >= 0xd0) && (op <= 0xd3)) ||
               ((op >= 0xd8) && (op <= 0xdf)) || (op == 0xfe)) {
        has_modrm = 1;
    } else if (((op >= 0x90) && (op <= 0x99)) ||
               ((op >= 0x9b) && (op <= 0x9f)) ||
               ((op >= 0xa4) && (op <= 0xa7)) ||
               ((op >= 0xaa) && (op <= 0xaf)) || (op == 0xc9) ||
               (op == 0xf4) || (op == 0xf5) || ((op >= 0xf8) && (op <= 0xfd))) {
        /* nop, xchg, cdq, pushf, string operations, leave, hlt, flag ops */
    } else {
        switch (op) {
        case 0x68: /* push imm */
        case 0xa9: /* test eax, imm */
            imm = iz;
            break;
        case 0x6a: /* push imm8 */
        case 0xa8: /* test al, imm8 */
            imm = 1;
            break;
        case 0x69: /* imul r, r/m, imm */
        case 0x81: /* group 1, imm */
        case 0xc7: /* mov r/m, imm */
            has_modrm = 1;
            imm       = iz;
            break;
        case 0x6b: /* imul r, r/m, imm8 */
        case 0x80: /* group 1, imm8 */
        case 0x83:
        case 0xc0: /* shifts, imm8 */
        case 0xc1:
        case 0xc6: /* mov r/m8, imm8 */
            has_modrm = 1;
            imm       = 1;
            break;
        case 0xa0: /* mov al/eax, moffs: an absolute address */
        case 0xa1:
        case 0xa2:
        case 0xa3:
            imm = addr32 ? 4 : 8;
            break;
        case 0xc2: /* ret imm16 */
            imm         = 2;
            insn->flags = RC_GDR_UCM_X86_INSN_END;
            break;
        case 0xc3: /* ret */
            insn->flags = RC_GDR_UCM_X86_INSN_END;
            break;
        case 0xc8: /* enter */
            imm = 3;
            break;
        case 0xe8:
            insn->flags = RC_GDR_UCM_X86_INSN_CALL;
            rel_size    = 4;
            break;
        case 0xe9:
            insn->flags = RC_GDR_UCM_X86_INSN_JMP | RC_GDR_UCM_X86_INSN_END;
            rel_size    = 4;
            break;
        case 0xeb:
            insn->flags = RC_GDR_UCM_X86_INSN_JMP | RC_GDR_UCM_X86_INSN_END;
            rel_size    = 1;
            break;
        case 0xf6: /* group 3 */
            has_modrm = 1;
            imm_group = 1;
            break;
        case 0xf7:
            has_modrm = 1;
            imm_group = (int)iz;
            break;
        case 0xff: /* group 5 */
            has_modrm = 1;
            break;
        default:
            /* int3 (a debugger's breakpoint), VEX, EVEX, loop, jrcxz, ... */
            return UCS_ERR_UNSUPPORTED;
        }
    }

    if ((rel_size != 0) && opsize16) {
        return UCS_ERR_UNSUPPORTED;
    }

    if (has_modrm) {
        modrm = *p++;
        mod   = modrm >> 6;
        reg   = (modrm >> 3) & 7;
        rm    = modrm & 7;

        if (!two_byte && (op == 0xff) && ((reg == 4) || (reg == 5))) {
            /* jmp r/m: no fall-through */
            insn->flags |= RC_GDR_UCM_X86_INSN_END;
        }

        if ((imm_group != 0) && (reg <= 1)) {
            imm = imm_group;
        }

        if (mod != 3) {
            if (rm == 4) {
                /* SIB; base 101 without displacement means disp32 */
                if ((mod == 0) && ((*p & 7) == 5)) {
                    p += 4;
                }
                ++p;
            } else if ((mod == 0) && (rm == 5)) {
                if (addr32) {
                    return UCS_ERR_UNSUPPORTED; /* EIP-relative */
                }
                insn->flags      |= RC_GDR_UCM_X86_INSN_RIP;
                insn->disp_offset = p - code;
                p                += 4;
            }

            if (mod == 1) {
                p += 1;
            } else if (mod == 2) {
                p += 4;
            }
        }
    }

    if (rel_size == 1) {
        insn->rel = *(const int8_t*)p;
    } else if (rel_size == 4) {
        memcpy(&rel32, p, sizeof(rel32));
        insn->rel = rel32;
    }

    insn->length = (p - code) + imm + rel_size;
    return (insn->length <= 15) ? UCS_OK : UCS_ERR_UNSUPPORTED;
}

static int rc_gdr_ucm_x86_in_reach(uintptr_t from, uintptr_t to)
{
    return ((from > to) ? (from - to) : (to - from)) < RC_GDR_UCM_X86_REACH;
}

/* rel32 from the end of an instruction at [insn_end - ...) to target */
static int rc_gdr_ucm_x86_rel32(uintptr_t insn_end, uintptr_t target,
                                int32_t *rel_p)
{
    int64_t rel = (int64_t)(target - insn_end);

    if ((rel < INT32_MIN) || (rel > INT32_MAX)) {
        return 0;
    }

    *rel_p = (int32_t)rel;
    return 1;
}

/*
 * Map one page within rel32 reach of target: the free gap of the address
 * space nearest to it, from /proc/self/maps. MAP_FIXED_NOREPLACE keeps a
 * mapping made meanwhile by another thread; an older kernel takes the flag
 * as a hint, which the address check below catches.
 */
static void *rc_gdr_ucm_x86_map_near(uintptr_t target, size_t size)
{
    uintptr_t best      = 0;
    uintptr_t best_dist = UINTPTR_MAX;
    uintptr_t prev_end  = RC_GDR_UCM_X86_LOW_LIMIT;
    uintptr_t start, end, cand, dist;
    char line[512];
    void *addr;
    FILE *file;

    file = fopen("/proc/self/maps", "r");
    if (file == NULL) {
        ucs_debug("cannot open /proc/self/maps: %m");
        return NULL;
    }

    while (fgets(line, sizeof(line), file) != NULL) {
        if (sscanf(line, "%lx-%lx", &start, &end) != 2) {
            continue;
        }

        if (strstr(line, "[stack]") != NULL) {
            start = (start > RC_GDR_UCM_X86_STACK_GAP) ?
                    (start - RC_GDR_UCM_X86_STACK_GAP) : 0;
        }

        if ((start > prev_end) && ((start - prev_end) >= size)) {
            /* the end of the gap [prev_end, start) nearest to target */
            cand = (start <= target) ? (start - size) : prev_end;
            dist = (cand > target) ? (cand - target) : (target - cand);
            if (dist < best_dist) {
                best      = cand;
                best_dist = dist;
            }
        }

        prev_end = ucs_max(prev_end, end);
    }
    fclose(file);

    if ((best == 0) || !rc_gdr_ucm_x86_in_reach(best, target)) {
        ucs_debug("no free address range within 2 GiB of %p",
                  (void*)target);
        return NULL;
    }

    addr = mmap((void*)best, size, PROT_READ | PROT_WRITE | PROT_EXEC,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (addr == MAP_FAILED) {
        ucs_debug("mmap(%p, %zu) failed: %m", (void*)best, size);
        return NULL;
    }

    if (addr != (void*)best) {
        munmap(addr, size);
        return NULL;
    }

    return addr;
}

/* Room for one site within reach of target, writable until protect_done */
static uint8_t *rc_gdr_ucm_x86_site_alloc(uintptr_t target)
{
    size_t page_size = ucs_get_page_size();
    rc_gdr_ucm_x86_page_t *page;
    uint8_t *addr;
    int retry;

    for (page = rc_gdr_ucm_x86_pages;
         page < rc_gdr_ucm_x86_pages + RC_GDR_UCM_X86_MAX_PAGES; ++page) {
        if (page->base == NULL) {
            break;
        }

        if (((page->used + RC_GDR_UCM_X86_SITE_SIZE) <= page->size) &&
            rc_gdr_ucm_x86_in_reach((uintptr_t)page->base, target) &&
            rc_gdr_ucm_x86_in_reach((uintptr_t)page->base + page->size,
                                    target)) {
            if (mprotect(page->base, page->size,
                         PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
                ucs_debug("mprotect(%p, RWX) failed: %m", page->base);
                return NULL;
            }
            goto found;
        }
    }

    if (page == rc_gdr_ucm_x86_pages + RC_GDR_UCM_X86_MAX_PAGES) {
        return NULL;
    }

    /* Another thread may take the gap between the lookup and the mmap */
    for (retry = 0; retry < 3; ++retry) {
        addr = rc_gdr_ucm_x86_map_near(target, page_size);
        if (addr != NULL) {
            page->base = addr;
            page->size = page_size;
            page->used = 0;
            goto found;
        }
    }

    return NULL;

found:
    addr        = page->base + page->used;
    page->used += RC_GDR_UCM_X86_SITE_SIZE;
    return addr;
}

/* Back to read-execute: the page is written only while sites are added */
static void rc_gdr_ucm_x86_site_done(uint8_t *site)
{
    size_t page_size = ucs_get_page_size();
    void *page       = (void*)ucs_align_down((uintptr_t)site, page_size);

    __builtin___clear_cache((char*)site,
                            (char*)site + RC_GDR_UCM_X86_SITE_SIZE);
    if (mprotect(page, page_size, PROT_READ | PROT_EXEC) != 0) {
        ucs_debug("mprotect(%p, RX) failed: %m", page);
    }
}

/*
 * Copy the instructions that the patch displaces from func to tramp, then a
 * jump back to the first instruction left in place.
 */
static ucs_status_t rc_gdr_ucm_x86_relocate(const uint8_t *func,
                                            uint8_t *tramp, size_t max)
{
    const uint8_t *src = func;
    uint8_t *dst       = tramp;
    int ended          = 0;
    rc_gdr_ucm_x86_insn_t insn;
    uintptr_t target;
    ucs_status_t status;
    int32_t rel, disp;
    size_t len;

    while (src < (func + RC_GDR_UCM_X86_PATCH_LEN)) {
        if (ended) {
            /* the function ends inside the bytes the patch overwrites */
            return UCS_ERR_UNSUPPORTED;
        }

        status = rc_gdr_ucm_x86_decode(src, &insn);
        if (status != UCS_OK) {
            ucs_debug("unknown instruction at %p+%zu: %02x %02x %02x %02x",
                      func, (size_t)(src - func), src[0], src[1], src[2],
                      src[3]);
            return status;
        }

        /* the largest form: jcc rel32, or the instruction itself */
        if ((size_t)(dst - tramp) + ucs_max(insn.length, (size_t)6) +
            RC_GDR_UCM_X86_PATCH_LEN > max) {
            return UCS_ERR_BUFFER_TOO_SMALL;
        }

        if (insn.flags & RC_GDR_UCM_X86_INSN_BRANCH) {
            target = (uintptr_t)src + insn.length + insn.rel;
            if ((target >= (uintptr_t)func) &&
                (target < ((uintptr_t)func + RC_GDR_UCM_X86_PATCH_LEN))) {
                /* into the bytes the patch overwrites */
                return UCS_ERR_UNSUPPORTED;
            }

            if (insn.flags & RC_GDR_UCM_X86_INSN_JCC) {
                dst[0] = 0x0f;
                dst[1] = 0x80 | insn.cond;
                len    = 6;
            } else {
                dst[0] = (insn.flags & RC_GDR_UCM_X86_INSN_CALL) ? 0xe8 : 0xe9;
                len    = 5;
            }

            if (!rc_gdr_ucm_x86_rel32((uintptr_t)dst + len, target, &rel)) {
                return UCS_ERR_UNSUPPORTED;
            }
            memcpy(dst + len - sizeof(rel), &rel, sizeof(rel));
        } else {
            len = insn.length;
            memcpy(dst, src, len);
            if (insn.flags & RC_GDR_UCM_X86_INSN_RIP) {
                /* the same absolute address, from the new place */
                memcpy(&disp, src + insn.disp_offset, sizeof(disp));
                target = (uintptr_t)src + insn.length + (int64_t)disp;
                if (!rc_gdr_ucm_x86_rel32((uintptr_t)dst + len, target,
                                          &disp)) {
                    return UCS_ERR_UNSUPPORTED;
                }
                memcpy(dst + insn.disp_offset, &disp, sizeof(disp));
            }
        }

        ended = !!(insn.flags & RC_GDR_UCM_X86_INSN_END);
        src  += insn.length;
        dst  += len;
    }

    if (!ended) {
        dst[0] = 0xe9;
        if (!rc_gdr_ucm_x86_rel32((uintptr_t)dst + 5, (uintptr_t)src, &rel)) {
            return UCS_ERR_UNSUPPORTED;
        }
        memcpy(dst + 1, &rel, sizeof(rel));
    }

    return UCS_OK;
}

/*
 * Write "jmp rel32" over the first bytes of func. Where the five bytes lie
 * in one aligned 8-byte word (function entries are aligned), a single store
 * replaces them, so a thread entering func meanwhile sees either the old
 * code or the jump.
 */
static ucs_status_t rc_gdr_ucm_x86_write_jmp(uint8_t *func, uintptr_t target)
{
    size_t page_size = ucs_get_page_size();
    uintptr_t page   = ucs_align_down((uintptr_t)func, page_size);
    size_t prot_len  = ((uintptr_t)func + RC_GDR_UCM_X86_PATCH_LEN) - page;
    size_t offset    = (uintptr_t)func & 7;
    uint8_t patch[RC_GDR_UCM_X86_PATCH_LEN];
    uint64_t *word, value;
    int32_t rel;

    if (!rc_gdr_ucm_x86_rel32((uintptr_t)func + RC_GDR_UCM_X86_PATCH_LEN,
                              target, &rel)) {
        return UCS_ERR_UNSUPPORTED;
    }

    patch[0] = 0xe9;
    memcpy(&patch[1], &rel, sizeof(rel));

    if (mprotect((void*)page, prot_len, PROT_READ | PROT_WRITE | PROT_EXEC) !=
        0) {
        ucs_diag("cannot make the code at %p writable: %m", func);
        return UCS_ERR_IO_ERROR;
    }

    if ((offset + RC_GDR_UCM_X86_PATCH_LEN) <= sizeof(value)) {
        word  = (uint64_t*)((uintptr_t)func - offset);
        value = *word;
        memcpy((uint8_t*)&value + offset, patch, sizeof(patch));
        __atomic_store_n(word, value, __ATOMIC_SEQ_CST);
    } else {
        memcpy(func, patch, sizeof(patch));
    }

    if (mprotect((void*)page, prot_len, PROT_READ | PROT_EXEC) != 0) {
        ucs_debug("mprotect(%p, RX) failed: %m", (void*)page);
    }

    __builtin___clear_cache((char*)func,
                            (char*)func + RC_GDR_UCM_X86_PATCH_LEN);
    return UCS_OK;
}

static ucs_status_t rc_gdr_ucm_x86_patch(void *func, void *hook,
                                         void **orig_p)
{
    uint8_t *site, *tramp;
    ucs_status_t status;

    site = rc_gdr_ucm_x86_site_alloc((uintptr_t)func);
    if (site == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    /* stub: jmp *0(%rip); .quad hook */
    site[0] = 0xff;
    site[1] = 0x25;
    memset(&site[2], 0, sizeof(int32_t));
    memcpy(&site[6], &hook, sizeof(hook));

    tramp  = site + RC_GDR_UCM_X86_TRAMP_OFF;
    status = rc_gdr_ucm_x86_relocate(func, tramp, RC_GDR_UCM_X86_SITE_SIZE -
                                                  RC_GDR_UCM_X86_TRAMP_OFF);
    rc_gdr_ucm_x86_site_done(site);
    if (status != UCS_OK) {
        /* the site's bytes stay unused */
        return status;
    }

    /* the hook may run as soon as the jump is written */
    __atomic_store_n(orig_p, (void*)tramp, __ATOMIC_RELEASE);
    return rc_gdr_ucm_x86_write_jmp(func, (uintptr_t)site);
}

#endif /* __x86_64__ */


ucs_status_t rc_gdr_ucm_bistro_patch(void *func, void *hook, const char *name,
                                     void **orig_p, const char **method_p)
{
    ucs_status_t status;

#if defined(__x86_64__) || defined(__aarch64__)
    /* ucm_bistro_patch() sets the trampoline before it applies the patch.
     * (The aarch64 patcher of UCX 1.13 makes no trampolines: it refuses.) */
    status = ucm_bistro_patch(func, hook, name, orig_p, NULL);
    if (status == UCS_OK) {
        *method_p = "ucm_bistro";
        return UCS_OK;
    }
#else
    /* no trampoline to call the original through */
    status = UCS_ERR_UNSUPPORTED;
#endif

#if defined(__x86_64__)
    if (status == UCS_ERR_UNSUPPORTED) {
        ucs_debug("libucm cannot relocate the prologue of %s at %p, "
                  "relocating it here", name, func);
        status = rc_gdr_ucm_x86_patch(func, hook, orig_p);
        if (status == UCS_OK) {
            *method_p = "rc_gdr_bistro";
            return UCS_OK;
        }
    }
#endif

    return status;
}


const void *rc_gdr_ucm_bistro_jump_target(const void *func)
{
#if defined(__x86_64__)
    const uint8_t *code = func;
    int32_t rel;
    uint64_t abs;

    if (code[0] == 0xe9) {
        memcpy(&rel, code + 1, sizeof(rel));
        return code + 5 + rel;
    } else if ((code[0] == 0x48) && (code[1] == 0xb8) &&
               (code[10] == 0xff) && (code[11] == 0xe0)) {
        memcpy(&abs, code + 2, sizeof(abs));
        return (const void*)(uintptr_t)abs;
    } else if ((code[0] == 0x49) && (code[1] == 0xbb) &&
               (code[10] == 0x41) && (code[11] == 0xff) &&
               (code[12] == 0xe3)) {
        memcpy(&abs, code + 2, sizeof(abs));
        return (const void*)(uintptr_t)abs;
    }
#endif

    return NULL;
}


int rc_gdr_ucm_bistro_is_patched(const void *func)
{
#if defined(__x86_64__)
    const void *target = rc_gdr_ucm_bistro_jump_target(func);
    Dl_info func_info, target_info;

    if (target == NULL) {
        return 0;
    }

    return (dladdr(func, &func_info) != 0) &&
           (dladdr(target, &target_info) != 0) &&
           (target_info.dli_fbase != func_info.dli_fbase);
#else
    return 1;
#endif
}
