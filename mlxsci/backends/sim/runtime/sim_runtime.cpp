// mlxsci CPU simulator runtime: fibers, the threadgroup scheduler, barriers,
// SIMD-group rendezvous, guard-page / signal diagnostics and the launch entry.
// Compiled once per (source, flags, compiler) and linked into every kernel
// library; all symbols are hidden, so several kernel libraries coexist.
#if defined(__APPLE__)
#define _XOPEN_SOURCE 700   // ucontext routines
#define _DARWIN_C_SOURCE 1  // MAP_ANONYMOUS and friends
#endif
#include "sim_runtime.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#if defined(SIM_FIBER_UCONTEXT) || !defined(__linux__) || \
    !(defined(__x86_64__) || defined(__aarch64__))
#define SIM_USE_UCONTEXT 1
#include <ucontext.h>
#else
#define SIM_USE_UCONTEXT 0
#endif

#if defined(__linux__)
#include <ucontext.h>  // for the fault context (REG_ERR / ESR)
#endif

extern "C" __SIM_HIDDEN volatile int64_t __sim_progress[6];
volatile int64_t __sim_progress[6];

// ------------------------------------------------------------------ context switch
#if !SIM_USE_UCONTEXT
extern "C" __SIM_HIDDEN void __sim_ctx_switch(void** save_sp, void* new_sp);
extern "C" __SIM_HIDDEN void __sim_ctx_entry(void);
#if defined(__x86_64__)
// Saves callee-saved registers, MXCSR and the x87 control word on the current
// stack, stores the stack pointer, switches to the new one and restores.
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".globl __sim_ctx_switch\n"
    ".hidden __sim_ctx_switch\n"
    ".type __sim_ctx_switch,@function\n"
    "__sim_ctx_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  subq $8, %rsp\n"
    "  stmxcsr (%rsp)\n"
    "  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n"
    "  fldcw 4(%rsp)\n"
    "  addq $8, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size __sim_ctx_switch, .-__sim_ctx_switch\n"
    ".p2align 4\n"
    ".globl __sim_ctx_entry\n"
    ".hidden __sim_ctx_entry\n"
    ".type __sim_ctx_entry,@function\n"
    "__sim_ctx_entry:\n"
    "  movq %rbx, %rdi\n"
    "  callq *%r12\n"
    "  ud2\n"
    ".size __sim_ctx_entry, .-__sim_ctx_entry\n");
#elif defined(__aarch64__)
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".globl __sim_ctx_switch\n"
    ".hidden __sim_ctx_switch\n"
    ".type __sim_ctx_switch,%function\n"
    "__sim_ctx_switch:\n"
    "  sub sp, sp, #176\n"
    "  stp x19, x20, [sp, #0]\n"
    "  stp x21, x22, [sp, #16]\n"
    "  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n"
    "  stp x27, x28, [sp, #64]\n"
    "  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n"
    "  stp d10, d11, [sp, #112]\n"
    "  stp d12, d13, [sp, #128]\n"
    "  stp d14, d15, [sp, #144]\n"
    "  mrs x9, fpcr\n"
    "  str x9, [sp, #160]\n"
    "  mov x9, sp\n"
    "  str x9, [x0]\n"
    "  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n"
    "  ldp x21, x22, [sp, #16]\n"
    "  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n"
    "  ldp x27, x28, [sp, #64]\n"
    "  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n"
    "  ldp d10, d11, [sp, #112]\n"
    "  ldp d12, d13, [sp, #128]\n"
    "  ldp d14, d15, [sp, #144]\n"
    "  ldr x9, [sp, #160]\n"
    "  msr fpcr, x9\n"
    "  add sp, sp, #176\n"
    "  ret\n"
    ".size __sim_ctx_switch, .-__sim_ctx_switch\n"
    ".p2align 4\n"
    ".globl __sim_ctx_entry\n"
    ".hidden __sim_ctx_entry\n"
    ".type __sim_ctx_entry,%function\n"
    "__sim_ctx_entry:\n"
    "  mov x0, x19\n"
    "  blr x20\n"
    "  brk #0\n"
    ".size __sim_ctx_entry, .-__sim_ctx_entry\n");
#endif
#endif

namespace {

enum FiberState { F_RUNNABLE = 0, F_BARRIER = 1, F_SIMD = 2, F_DONE = 3 };

struct Fiber {
#if SIM_USE_UCONTEXT
    ucontext_t uc;
#else
    void* sp;
#endif
    int state;
    int64_t line;           // barrier line
    const void* site;       // SIMD call site
    uint32_t need;          // SIMD: lanes that must arrive before it resolves (CUDA masks)
    __SimResolver resolve;
    __SimLaneIO io;
    __SimThread t;
    char* stack_lo;         // usable stack (above the guard page)
};

struct State {
    __SimLaunch* L;
    __SimResult* R;
    __SimThreadFn fn;
    Fiber* fibers;          // mmap'd, capacity fiber_cap
    int64_t fiber_cap;
    char* stacks;           // one reservation: [guard | stack] * nstacks
    int64_t nstacks;
    int64_t stack_size;
    int64_t stack_stride;
    int64_t nfib;           // fibers in the running group
    int64_t cur;            // running fiber, -1 on the scheduler / fast path
#if SIM_USE_UCONTEXT
    ucontext_t sched_uc;
#else
    void* sched_sp;
#endif
    sigjmp_buf jb;
    pthread_t thread;
    volatile sig_atomic_t active;
    volatile sig_atomic_t in_handler;   // a fault inside on_signal means our state is gone
    char* altstack;
    int64_t page;
};

State G;

// The race detector's events of the running group (sim_race.inc).
void race_simd(int64_t s);
void race_barrier();

// The simdgroup of fibers [lo, hi) whose rendezvous is being resolved, so
// that __sim_undefined_read can name the threads behind a resolver's lane
// numbers; lo is -1 outside a resolver.
int64_t g_resolve_lo = -1, g_resolve_hi = -1;

// Guarded threadgroup arrays of this library (mapped once, kept for its life:
// namespace-scope references bind to them at load time).
const int kMaxTgArrays = 1024;
__SimTgArray* g_tg[kMaxTgArrays];
int g_ntg;
const int64_t kTgGuardBytes = (int64_t)1 << 30;   // PROT_NONE each side: address space only

// Set while __sim_tg_register maps the records: an array mapped then is
// bound inside a function (its reference re-read at every entry), so it may
// move; one mapped earlier was bound at load (a namespace-scope reference).
bool g_tg_registering;
// The placement the next group's arrays take (true: start-aligned), and the
// launches so far, whose parity gives each launch's first group its own.
bool g_tg_start_next;
uint64_t g_tg_launches;

// The read-write bytes of one placement's region of `a`: [*lo, *hi).
void tg_region(const __SimTgArray* a, bool start, char** lo, char** hi) {
    const int64_t data = (a->hi - a->lo - 3 * kTgGuardBytes) / 2;
    *lo = a->lo + kTgGuardBytes + (start ? kTgGuardBytes + data : 0);
    *hi = *lo + data;
}

// The first byte of `a`'s slack (outside the array at either placement but
// inside its read-write pages) that is no longer the garbage pattern, or
// null; *at is then the array's first byte at that placement (what the
// element is counted from).
char* tg_slack_violation(const __SimTgArray* a, char** at) {
    for (int start = 0; start < 2; ++start) {
        char *lo, *hi;
        tg_region(a, start, &lo, &hi);
        *at = start ? a->ptr_start : a->ptr_end;
        for (char* p = lo; p < *at; ++p)
            if ((unsigned char)*p != __SIM_GARBAGE_BYTE) return p;
        for (char* p = *at + a->nbytes; p < hi; ++p)
            if ((unsigned char)*p != __SIM_GARBAGE_BYTE) return p;
    }
    return nullptr;
}

void set_tg_fault(__SimResult* R, const __SimTgArray* a, uintptr_t addr) {
    R->kind = __SIM_TG_OOB;
    R->tg_name = (uint64_t)(uintptr_t)a->name;
    R->tg_decl = (uint64_t)(uintptr_t)a->decl;
    R->tg_esize = a->esize > 0 ? a->esize : 1;
    R->tg_nelem = a->nbytes / R->tg_esize;
    int64_t off = (int64_t)(addr - (uintptr_t)a->ptr);
    R->elem = off >= 0 ? off / R->tg_esize : -((-off + R->tg_esize - 1) / R->tg_esize);
}

const int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGALRM};
const int kNumSignals = (int)(sizeof(kSignals) / sizeof(kSignals[0]));
struct sigaction g_old_actions[kNumSignals];

void record_position(__SimResult* R) {
    for (int d = 0; d < 3; ++d) {
        R->group[d] = __sim_progress[d];
        R->thread[d] = __sim_progress[3 + d];
    }
}

int signal_slot(int sig) {
    for (int i = 0; i < kNumSignals; ++i)
        if (kSignals[i] == sig) return i;
    return -1;
}

int64_t fault_is_write(void* uctx) {
#if defined(__linux__) && defined(__x86_64__)
    ucontext_t* uc = (ucontext_t*)uctx;
    return (uc->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
#elif defined(__linux__) && defined(__aarch64__)
    ucontext_t* uc = (ucontext_t*)uctx;
    unsigned char* p = (unsigned char*)uc->uc_mcontext.__reserved;
    unsigned char* end = p + sizeof(uc->uc_mcontext.__reserved);
    while (p + 8 <= end) {
        uint32_t magic, size;
        memcpy(&magic, p, 4);
        memcpy(&size, p + 4, 4);
        if (magic == 0 || size == 0) break;
        if (magic == 0x45535201u) {  // ESR_MAGIC
            uint64_t esr;
            memcpy(&esr, p + 8, 8);
            uint32_t ec = (uint32_t)(esr >> 26) & 0x3f;
            if (ec == 0x24 || ec == 0x25) return (esr >> 6) & 1 ? 1 : 0;  // data abort: WnR
            return -1;
        }
        p += size;
    }
    return -1;
#else
    (void)uctx;
    return -1;
#endif
}

uintptr_t fault_sp(void* uctx) {
#if defined(__linux__) && defined(__x86_64__)
    return (uintptr_t)((ucontext_t*)uctx)->uc_mcontext.gregs[REG_RSP];
#elif defined(__linux__) && defined(__aarch64__)
    return (uintptr_t)((ucontext_t*)uctx)->uc_mcontext.sp;
#else
    (void)uctx;
    return 0;
#endif
}

#if defined(__linux__) && defined(__x86_64__)
// The memory operand of the instruction at the faulting RIP. A #GP fault
// (si_code SI_KERNEL) carries no address: in kernel code it comes from a
// legacy SSE instruction whose 16-byte operand is misaligned, or from an
// access through a non-canonical pointer (e.g. the garbage pattern
// 0x5A5A... read as one). Decodes prefixes, REX, ModRM, SIB and
// displacement; *size is 16 for packed SSE forms, 0 otherwise.
bool decode_gp(void* uctx, uintptr_t* ea, int64_t* size, int64_t* write) {
    static const int regs[16] = {REG_RAX, REG_RCX, REG_RDX, REG_RBX, REG_RSP, REG_RBP,
                                 REG_RSI, REG_RDI, REG_R8,  REG_R9,  REG_R10, REG_R11,
                                 REG_R12, REG_R13, REG_R14, REG_R15};
    const greg_t* g = ((ucontext_t*)uctx)->uc_mcontext.gregs;
    const unsigned char* p = (const unsigned char*)g[REG_RIP];
    // A jump to a bad address (a call through a null pointer) faults on the
    // fetch itself: there is no instruction to read.
    if ((uintptr_t)p < 65536 || (uintptr_t)p >> 47) return false;
    int rep = 0, rex = 0;
    for (int i = 0; i < 4; ++i, ++p) {
        unsigned char b = *p;
        if (b == 0xF2 || b == 0xF3) rep = b;
        else if (!(b == 0x66 || b == 0x67 || b == 0xF0 || b == 0x2E || b == 0x3E || b == 0x26 ||
                   b == 0x36 || b == 0x64 || b == 0x65)) break;
    }
    if ((*p & 0xF0) == 0x40) rex = *p++;
    int map = 1;
    if (*p == 0x0F) {
        ++p;
        map = 2;
        if (*p == 0x38 || *p == 0x3A) { ++p; map = 3; }
    }
    const int op = *p++;
    if (map == 1) {
        // one-byte opcodes with a ModRM memory operand
        bool modrm = (op <= 0x3F && (op & 7) < 4) || op == 0x63 || op == 0x69 || op == 0x6B ||
                     (op >= 0x80 && op <= 0x8B) || op == 0xC0 || op == 0xC1 || op == 0xC6 ||
                     op == 0xC7 || (op >= 0xD0 && op <= 0xD3) || (op >= 0xD8 && op <= 0xDF) ||
                     op == 0xF6 || op == 0xF7 || op == 0xFE || op == 0xFF;
        if (!modrm) return false;
    }
    const int m = *p++;
    const int mod = m >> 6, rm = m & 7;
    if (mod == 3) return false;
    int64_t addr = 0;
    int32_t d32;
    if (rm == 4) {
        const int sib = *p++;
        const int idx = ((sib >> 3) & 7) | ((rex & 2) << 2);
        const int base = (sib & 7) | ((rex & 1) << 3);
        if (idx != 4) addr += (int64_t)g[regs[idx]] << (sib >> 6);
        if ((base & 7) == 5 && mod == 0) {
            memcpy(&d32, p, 4);
            p += 4;
            addr += d32;
        } else {
            addr += (int64_t)g[regs[base]];
        }
    } else if (rm == 5 && mod == 0) {
        return false;  // RIP-relative: the kernel's constants, never the culprit
    } else {
        addr += (int64_t)g[regs[rm | ((rex & 1) << 3)]];
    }
    if (mod == 1) {
        addr += (int8_t)*p;
    } else if (mod == 2) {
        memcpy(&d32, p, 4);
        addr += d32;
    }
    *ea = (uintptr_t)addr;
    // F2/F3 forms are scalar or unaligned moves: no alignment requirement.
    *size = (map >= 2 && !rep) ? 16 : 0;
    if (map == 2) *write = (op == 0x29 || op == 0x2B || op == 0x7F || op == 0xE7 || op == 0x11) ? 1 : 0;
    else if (map == 1) *write = (op == 0x88 || op == 0x89 || op == 0xC6 || op == 0xC7 ||
                                 (op <= 0x3F && (op & 7) < 2)) ? 1 : 0;
    else *write = 0;
    return true;
}
#endif

// Fault bookkeeping outside State: a fault inside the handler (or after a
// jump through a clobbered jmp_buf) must still be recognised.
volatile sig_atomic_t g_in_handler;
volatile sig_atomic_t g_fatal;

void put_str(char*& o, char* end, const char* s) {
    while (*s && o < end) *o++ = *s++;
}

void put_int(char*& o, char* end, int64_t v) {
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v;
    do { tmp[n++] = (char)('0' + u % 10); u /= 10; } while (u && n < 24);
    if (v < 0 && o < end) *o++ = '-';
    while (n && o < end) *o++ = tmp[--n];
}

// Last resort: the simulator's own state is no longer trustworthy (a second
// fault while handling one). Say what is known on stderr, async-signal-safely,
// and die of the signal so the parent sees it.
[[noreturn]] void die_with_message(int sig) {
    if (!g_fatal) {
        g_fatal = 1;
        char buf[512];
        char* o = buf;
        char* end = buf + sizeof(buf) - 1;
        put_str(o, end, "mlxsci-sim: fatal signal ");
        put_int(o, end, sig);
        put_str(o, end, " while handling a fault of kernel '");
        const __SimLaunch* L = G.L;
        const char* k = L ? L->kernel : nullptr;
        put_str(o, end, k ? k : "?");
        put_str(o, end, "' (thread (");
        for (int d = 0; d < 3; ++d) { put_int(o, end, __sim_progress[3 + d]); put_str(o, end, d < 2 ? ", " : ""); }
        put_str(o, end, ") of group (");
        for (int d = 0; d < 3; ++d) { put_int(o, end, __sim_progress[d]); put_str(o, end, d < 2 ? ", " : ""); }
        put_str(o, end, ")): the simulator's state was overwritten, most likely by an out-of-bounds "
                        "write to threadgroup/__shared__ memory it could not guard\n");
        *o = 0;
        ssize_t r = write(2, buf, (size_t)(o - buf));
        (void)r;
    }
    signal(sig, SIG_DFL);
    raise(sig);
    _exit(128 + sig);
}

// Fills R's near_* fields with the buffer or threadgroup array closest to
// `addr` (an address in no guard region): Python decides whether the access
// is plausibly one of its elements.
void record_nearest(__SimResult* R, uintptr_t addr) {
    const __SimLaunch* L = G.L;
    uint64_t best = ~(uint64_t)0;
    for (int64_t i = 0; i < L->nguards; ++i) {
        const __SimGuard& g = L->guards[i];
        uint64_t d = addr < g.base ? g.base - addr : addr >= g.base + g.nbytes ? addr - (g.base + g.nbytes) + 1 : 0;
        if (d < best) {
            best = d;
            R->near_kind = 1;
            R->buf = i;
            int64_t off = (int64_t)(addr - g.base);
            int64_t isz = g.itemsize > 0 ? g.itemsize : 1;
            R->elem = off >= 0 ? off / isz : -((-off + isz - 1) / isz);
        }
    }
    for (int i = 0; i < g_ntg; ++i) {
        const __SimTgArray* a = g_tg[i];
        uintptr_t b = (uintptr_t)a->ptr;
        uint64_t d = addr < b ? b - addr : addr >= b + a->nbytes ? addr - (b + a->nbytes) + 1 : 0;
        if (d < best) {
            best = d;
            R->near_kind = 2;
            set_tg_fault(R, a, addr);
        }
    }
    R->near_dist = (int64_t)best;
}

const __SimTgArray* tg_containing(uintptr_t addr, bool with_guards) {
    for (int i = 0; i < g_ntg; ++i) {
        const __SimTgArray* a = g_tg[i];
        uintptr_t lo = with_guards ? (uintptr_t)a->lo : (uintptr_t)a->ptr;
        uintptr_t hi = with_guards ? (uintptr_t)a->hi : (uintptr_t)a->ptr + a->nbytes;
        if (addr >= lo && addr < hi) return a;
    }
    return nullptr;
}

// R for a misaligned access at `ea`: the buffer or threadgroup array it is
// in (buf / tg_*) and the byte offset from its start (elem).
void locate_misaligned(__SimResult* R, uintptr_t ea) {
    const __SimLaunch* L = G.L;
    R->kind = __SIM_MISALIGNED;
    R->addr = ea;
    for (int64_t i = 0; i < L->nguards; ++i) {
        const __SimGuard& g = L->guards[i];
        if (ea >= g.lo && ea < g.hi) {
            R->buf = i;
            R->elem = (int64_t)(ea - g.base);
        }
    }
    if (const __SimTgArray* a = tg_containing(ea, true)) {
        set_tg_fault(R, a, ea);
        R->kind = __SIM_MISALIGNED;
        R->elem = (int64_t)(ea - (uintptr_t)a->ptr);
    }
}

void on_signal(int sig, siginfo_t* info, void* uctx) {
    if (!G.active || !pthread_equal(pthread_self(), G.thread)) {
        if (sig == SIGALRM) {
            // A timer tick delivered to another thread: forward it.
            if (G.active) pthread_kill(G.thread, SIGALRM);
            return;
        }
        if (g_in_handler) die_with_message(sig);   // a clobbered jmp_buf jumped off into nowhere
        // Not ours: put the previous handler back and let the fault recur.
        int slot = signal_slot(sig);
        if (slot >= 0) sigaction(sig, &g_old_actions[slot], nullptr);
        else signal(sig, SIG_DFL);
        return;
    }
    if (g_in_handler && sig != SIGALRM) die_with_message(sig);
    g_in_handler = 1;
    __SimResult* R = G.R;
    record_position(R);
    R->sig = sig;
    R->code = info->si_code;
    if (sig == SIGALRM) {
        R->kind = __SIM_TIMEOUT;
        siglongjmp(G.jb, 1);
    }
    uintptr_t addr = (uintptr_t)info->si_addr;
    R->addr = addr;
    R->is_write = -1;
    R->buf = -1;
    if (sig == SIGSEGV || sig == SIGBUS) {
        const __SimLaunch* L = G.L;
#if defined(__linux__) && defined(__x86_64__)
        // Linux reports no address for a #GP fault (SI_KERNEL) nor for a page
        // fault at a kernel-half address (e.g. the poison 0xFFFF... read as a
        // pointer: SEGV_MAPERR at 0): the instruction tells where it went.
        if (addr == 0) {
            uintptr_t ea;
            int64_t size = 0, w = -1;
            R->kind = info->si_code == SI_KERNEL ? __SIM_GP_FAULT : __SIM_CRASH;
            if (decode_gp(uctx, &ea, &size, &w)) {
                R->addr = ea;
                R->aux = size;
                R->is_write = w;
                bool canonical = (int64_t)ea >> 47 == 0 || (int64_t)ea >> 47 == -1;
                if (info->si_code == SI_KERNEL && canonical && size && ea % (uintptr_t)size) {
                    locate_misaligned(R, ea);
                } else if (canonical) {
                    R->kind = __SIM_CRASH;   // an ordinary bad address after all
                    R->aux = 0;
                    addr = ea;
                }
            }
            if (R->kind != __SIM_CRASH) siglongjmp(G.jb, 1);
        }
#endif
        for (int64_t i = 0; i < L->nguards; ++i) {
            const __SimGuard& g = L->guards[i];
            if (addr >= g.lo && addr < g.hi) {
                R->kind = __SIM_OOB;
                R->buf = i;
                int64_t off = (int64_t)(addr - g.base);
                int64_t isz = g.itemsize > 0 ? g.itemsize : 1;
                R->elem = off >= 0 ? off / isz : -((-off + isz - 1) / isz);
                R->is_write = fault_is_write(uctx);
                siglongjmp(G.jb, 1);
            }
        }
        if (const __SimTgArray* a = tg_containing(addr, true)) {
            set_tg_fault(R, a, addr);
            R->is_write = fault_is_write(uctx);
            siglongjmp(G.jb, 1);
        }
        if (G.stacks && G.nstacks > 0) {
            uintptr_t lo = (uintptr_t)G.stacks;
            uintptr_t hi = lo + (uintptr_t)(G.nstacks * G.stack_stride);
            if (addr >= lo && addr < hi) {
                int64_t k = (int64_t)((addr - lo) / (uintptr_t)G.stack_stride);
                uintptr_t guard_hi = lo + (uintptr_t)(k * G.stack_stride + G.page);
                if (addr < guard_hi) {
                    R->kind = __SIM_STACK_OVERFLOW;
                    R->aux = k;
                    siglongjmp(G.jb, 1);
                }
            }
        }
        if (R->is_write < 0) R->is_write = fault_is_write(uctx);
        // A fault just below the interrupted stack pointer: the stack ran out
        // (the fast path runs on the caller's stack).
        uintptr_t sp = fault_sp(uctx);
        if (sp && addr < sp + 4096 && sp - addr < ((uintptr_t)1 << 20)) {
            R->kind = __SIM_STACK_OVERFLOW;
            R->aux = -1;
            siglongjmp(G.jb, 1);
        }
        if (addr >= 65536) record_nearest(R, addr);
    }
    R->kind = __SIM_CRASH;
    siglongjmp(G.jb, 1);
}

// ------------------------------------------------------------------ fibers
void switch_to_fiber(Fiber* f) {
#if SIM_USE_UCONTEXT
    swapcontext(&G.sched_uc, &f->uc);
#else
    __sim_ctx_switch(&G.sched_sp, f->sp);
#endif
}

void switch_to_scheduler(Fiber* f) {
#if SIM_USE_UCONTEXT
    swapcontext(&f->uc, &G.sched_uc);
#else
    __sim_ctx_switch(&f->sp, G.sched_sp);
#endif
}

extern "C" void fiber_main(Fiber* f) {
    G.fn(G.L->bufs, &f->t);
    f->state = F_DONE;
    switch_to_scheduler(f);
    __builtin_trap();  // a finished fiber is never resumed
}

#if SIM_USE_UCONTEXT
void fiber_main_uc(unsigned hi, unsigned lo) {
    fiber_main((Fiber*)(((uintptr_t)hi << 32) | (uintptr_t)lo));
}
#endif

void init_fiber(Fiber* f, char* stack_lo, int64_t size) {
    f->stack_lo = stack_lo;
#if SIM_USE_UCONTEXT
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = stack_lo;
    f->uc.uc_stack.ss_size = (size_t)size;
    f->uc.uc_link = nullptr;
    uintptr_t p = (uintptr_t)f;
    makecontext(&f->uc, (void (*)())fiber_main_uc, 2, (unsigned)(p >> 32), (unsigned)(p & 0xffffffffu));
#elif defined(__x86_64__)
    uintptr_t top = ((uintptr_t)stack_lo + (uintptr_t)size) & ~(uintptr_t)15;
    uint64_t* ret = (uint64_t*)(top - 24);       // ret + 8 is 16-byte aligned
    ret[0] = (uint64_t)(uintptr_t)&__sim_ctx_entry;
    uint64_t* sp = ret - 7;
    uint32_t csr = 0x1F80u, cw = 0x037Fu;
    uint64_t fpu = (uint64_t)csr | ((uint64_t)cw << 32);
    sp[0] = fpu;                                  // mxcsr | x87 cw
    sp[1] = 0;                                    // r15
    sp[2] = 0;                                    // r14
    sp[3] = 0;                                    // r13
    sp[4] = (uint64_t)(uintptr_t)&fiber_main;     // r12: entry
    sp[5] = (uint64_t)(uintptr_t)f;               // rbx: argument
    sp[6] = 0;                                    // rbp
    f->sp = sp;
#elif defined(__aarch64__)
    uintptr_t top = ((uintptr_t)stack_lo + (uintptr_t)size) & ~(uintptr_t)15;
    uint64_t* sp = (uint64_t*)(top - 176);
    memset(sp, 0, 176);
    sp[0] = (uint64_t)(uintptr_t)f;               // x19: argument
    sp[1] = (uint64_t)(uintptr_t)&fiber_main;     // x20: entry
    sp[11] = (uint64_t)(uintptr_t)&__sim_ctx_entry;  // x30
    uint64_t fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    sp[20] = fpcr;
    f->sp = sp;
#endif
}

bool ensure_stacks(int64_t n, int64_t stack_size) {
    int64_t page = G.page;
    stack_size = (stack_size + page - 1) / page * page;
    if (G.stacks && G.nstacks >= n && G.stack_size == stack_size) return true;
    if (G.stacks) munmap(G.stacks, (size_t)(G.nstacks * G.stack_stride));
    if (G.fibers) munmap(G.fibers, (size_t)G.fiber_cap * sizeof(Fiber));
    G.stacks = nullptr;
    G.fibers = nullptr;
    int64_t stride = stack_size + page;
    void* m = mmap(nullptr, (size_t)(n * stride), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return false;
    G.stacks = (char*)m;
    G.nstacks = n;
    G.stack_size = stack_size;
    G.stack_stride = stride;
    for (int64_t i = 0; i < n; ++i) mprotect(G.stacks + i * stride, (size_t)page, PROT_NONE);
    void* fm = mmap(nullptr, (size_t)n * sizeof(Fiber), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fm == MAP_FAILED) return false;
    G.fibers = (Fiber*)fm;
    G.fiber_cap = n;
    return true;
}

[[noreturn]] void fault_from_fiber(int64_t kind) {
    G.R->kind = kind;
    record_position(G.R);
    siglongjmp(G.jb, 1);
}

void set_progress(const __SimThread& t) {
    for (int d = 0; d < 3; ++d) {
        __sim_progress[d] = t.gid[d];
        __sim_progress[3 + d] = t.lid[d];
    }
}

// Resumes fiber i if it can run, until it blocks (barrier, SIMD op) or returns.
void run_fiber(int64_t i) {
    Fiber* f = &G.fibers[i];
    if (f->state != F_RUNNABLE) return;
    G.cur = i;
    set_progress(f->t);
    switch_to_fiber(f);
    G.cur = -1;
}

// Resolves every SIMD rendezvous of the simdgroup of fibers [lo, hi) whose
// lanes are all there; returns whether any was. A rendezvous whose `need`
// lanes are alive (not returned) but not all there yet waits for them
// (CUDA's *_sync masks): on pass 0 it is left waiting and *any_deferred set;
// on pass 1 (nothing else can move) it resolves with the lanes that are there.
bool resolve_simdgroup(int64_t lo, int64_t hi, int pass, bool* any_deferred) {
    __SimLaneIO* io[32];
    bool resolved = false;
    uint32_t alive = 0, deferred = 0;
    for (int64_t i = lo; i < hi; ++i)
        if (G.fibers[i].state != F_DONE) alive |= 1u << (i - lo);
    for (;;) {
        const void* site = nullptr;
        __SimResolver res = nullptr;
        bool found = false;
        for (int64_t i = lo; i < hi; ++i) {
            if (G.fibers[i].state == F_SIMD && !(deferred & (1u << (i - lo)))) {
                site = G.fibers[i].site;
                res = G.fibers[i].resolve;
                found = true;
                break;
            }
        }
        if (!found) break;
        uint32_t mask = 0, need = 0;
        for (int64_t i = lo; i < hi; ++i) {
            Fiber* f = &G.fibers[i];
            if (f->state == F_SIMD && f->site == site) {
                mask |= 1u << (i - lo);
                need |= f->need;
                io[i - lo] = &f->io;
            } else {
                io[i - lo] = nullptr;
            }
        }
        if (pass == 0 && (need & alive & ~mask)) {
            deferred |= mask;
            *any_deferred = true;
            continue;
        }
        resolved = true;
        for (int64_t i = hi - lo; i < 32; ++i) io[i] = nullptr;
        g_resolve_lo = lo;
        g_resolve_hi = hi;
        if (res) res(io, mask);
        g_resolve_lo = -1;
        race_simd(lo / 32);   // the race detector: a SIMD operation orders its simdgroup
        for (int64_t i = lo; i < hi; ++i)
            if (mask & (1u << (i - lo))) G.fibers[i].state = F_RUNNABLE;
    }
    return resolved;
}

// ---- __SIM_SCHEDULE_SHUFFLED's orders
// splitmix64's finaliser: a well-mixed 64-bit hash of x.
uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// A keyed pseudo-random permutation of [0, n) that needs no memory: a
// four-round Feistel network on the smallest even number of bits (2 * half)
// that covers n is a bijection of [0, 4^half); walking its cycle until the
// value falls below n restricts it to a bijection of [0, n) (4^half < 4n, so
// a few steps on average).
struct Perm {
    uint64_t n, key, mask;
    int half;
};

Perm make_perm(uint64_t n, uint64_t key) {
    Perm p = {n, key, 0, 1};
    while (p.half < 32 && ((uint64_t)1 << (2 * p.half)) < n) ++p.half;
    p.mask = ((uint64_t)1 << p.half) - 1;
    return p;
}

uint64_t perm_at(const Perm& p, uint64_t k) {
    if (p.n <= 1) return k;
    uint64_t x = k;
    do {
        uint64_t l = x >> p.half, r = x & p.mask;
        for (uint64_t round = 0; round < 4; ++round) {
            const uint64_t f = mix64(r ^ p.key ^ (round << 56)) & p.mask;
            const uint64_t next = l ^ f;
            l = r;
            r = next;
        }
        x = (l << p.half) | r;
    } while (x >= p.n);
    return x;
}

// Keys for the orders of one launch, a part of it and one round of it.
uint64_t sub_key(uint64_t key, uint64_t salt) { return mix64(key ^ mix64(salt)) | 1; }

// A permutation of [0, n) drawn from `key`, for a group's threads or a
// simdgroup's lanes: a Fisher-Yates shuffle on splitmix64's stream into a
// buffer, O(1) a thread. The Feistel permutation above walks four rounds and
// a cycle per element; that was a third of a shuffled run of a kernel that
// meets at a SIMD operation every few hundred instructions (issue 27: hmc
// with simdgroup matrices). It stays for the launch's groups, which may be
// millions and need no buffer that way, and for a group past the buffer.
const uint32_t kMaxShuffled = 1024;
uint32_t g_order[kMaxShuffled];

struct SmallPerm {
    Perm wide;           // used when n > kMaxShuffled
    bool in_buffer;
    uint64_t at(uint64_t k) const { return in_buffer ? g_order[k] : perm_at(wide, k); }
};

SmallPerm small_perm(uint64_t n, uint64_t key) {
    SmallPerm p = {make_perm(n, key), n <= kMaxShuffled};
    if (!p.in_buffer) return p;
    for (uint64_t j = 0; j < n; ++j) g_order[j] = (uint32_t)j;
    uint64_t s = key;
    for (uint64_t j = n; j > 1; --j) {
        s = mix64(s);
        const uint64_t k = ((s >> 32) * j) >> 32;  // in [0, j): the high word scaled
        const uint32_t t = g_order[j - 1];
        g_order[j - 1] = g_order[k];
        g_order[k] = t;
    }
    return p;
}

// __SIM_SCHEDULE_REVERSED: runs the simdgroup of fibers [lo, hi) on its own,
// lanes in reverse order, resolving its SIMD operations as it goes, until
// every lane waits at a threadgroup barrier, has returned, or waits for
// lanes that are not coming yet. No other simdgroup runs meanwhile, so one
// that reads what a lower simdgroup writes without a barrier reads it
// before it is written (on a GPU nothing orders them).
void run_simdgroup_alone(int64_t lo, int64_t hi) {
    bool deferred = false;
    do {
        for (int64_t i = hi - 1; i >= lo; --i) run_fiber(i);
    } while (resolve_simdgroup(lo, hi, 0, &deferred));
}

bool simdgroup_runnable(int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
        if (G.fibers[i].state == F_RUNNABLE) return true;
    return false;
}

// __SIM_SCHEDULE_LOCKSTEP: runs the simdgroup of fibers [lo, hi) on its own,
// a round at a time: each runnable lane in index order runs until its next
// device-memory access (the hooks switch back to here before it:
// sim_race.inc, race_yield), a barrier, a SIMD operation or its end; then its
// SIMD operations resolve, until every lane waits at a threadgroup barrier or
// has returned. So the lanes' n-th device accesses all run before any lane's
// (n+1)-th, as on a GPU whose lanes run in lock-step.
void run_simdgroup_lockstep(int64_t lo, int64_t hi) {
    bool deferred = false;
    do {
        while (simdgroup_runnable(lo, hi))
            for (int64_t i = lo; i < hi; ++i) run_fiber(i);
    } while (resolve_simdgroup(lo, hi, 0, &deferred));
}

// __SIM_SCHEDULE_SHUFFLED on the group's n fibers, until none can run: step
// after step, a simdgroup picked at random among those with a runnable lane
// runs those lanes in a permuted order, each until it blocks (a barrier, a
// SIMD operation) or returns, then resolves its SIMD operations whose lanes
// are all there. So simdgroups advance in random interleavings, one stretch
// between synchronisation points at a time, as a GPU's may: one may run on
// past several SIMD operations while another has not started, and which
// simdgroup leaves a barrier first is drawn too. `key` moves on at each step.
void run_steps_shuffled(int64_t n, uint64_t* key) {
    const int64_t groups = (n + 31) / 32;
    for (;;) {
        int64_t movable = 0;
        for (int64_t lo = 0; lo < n; lo += 32) movable += simdgroup_runnable(lo, lo + 32 < n ? lo + 32 : n);
        if (movable == 0) return;
        *key = sub_key(*key, 0x5E);
        int64_t pick = (int64_t)((*key >> 8) % (uint64_t)movable);
        int64_t lo = 0;
        for (int64_t s = 0; s < groups; ++s) {
            lo = s * 32;
            if (simdgroup_runnable(lo, lo + 32 < n ? lo + 32 : n) && pick-- == 0) break;
        }
        const int64_t hi = lo + 32 < n ? lo + 32 : n;
        const SmallPerm lanes = small_perm((uint64_t)(hi - lo), *key);
        for (int64_t j = 0; j < hi - lo; ++j) run_fiber(lo + (int64_t)lanes.at((uint64_t)j));
        bool deferred = false;
        resolve_simdgroup(lo, hi, 0, &deferred);
    }
}

// Runs one threadgroup to completion with one fiber per thread.
void run_group_fibers(const uint32_t gid[3], const uint32_t tsz[3]) {
    const int64_t n = (int64_t)tsz[0] * tsz[1] * tsz[2];
    G.nfib = n;
    int64_t lin = 0;
    for (uint32_t z = 0; z < tsz[2]; ++z)
    for (uint32_t y = 0; y < tsz[1]; ++y)
    for (uint32_t x = 0; x < tsz[0]; ++x, ++lin) {
        Fiber* f = &G.fibers[lin];
        f->state = F_RUNNABLE;
        f->t.lid[0] = x; f->t.lid[1] = y; f->t.lid[2] = z;
        for (int d = 0; d < 3; ++d) { f->t.gid[d] = gid[d]; f->t.tsz[d] = tsz[d]; }
        f->t.lin = (uint32_t)lin;
        f->t.nthr = (uint32_t)n;
        init_fiber(f, G.stacks + lin * G.stack_stride + G.page, G.stack_size);
    }
    const bool reversed = G.L->schedule == __SIM_SCHEDULE_REVERSED;
    const bool shuffled = G.L->schedule == __SIM_SCHEDULE_SHUFFLED;
    const bool lockstep = G.L->schedule == __SIM_SCHEDULE_LOCKSTEP;
    // The group's own key: its rounds' orders differ from other groups'.
    uint64_t round_key = sub_key(G.L->schedule_seed, 0x6F00 + (((uint64_t)gid[2] << 42) ^
                                                          ((uint64_t)gid[1] << 21) ^ gid[0]));
    for (;;) {
        if (reversed) {
            for (int64_t lo = (n - 1) / 32 * 32; lo >= 0; lo -= 32)
                run_simdgroup_alone(lo, lo + 32 < n ? lo + 32 : n);
        } else if (shuffled) {
            run_steps_shuffled(n, &round_key);
        } else if (lockstep) {
            for (int64_t lo = 0; lo < n; lo += 32) run_simdgroup_lockstep(lo, lo + 32 < n ? lo + 32 : n);
        } else {
            for (int64_t i = 0; i < n; ++i) run_fiber(i);
        }
        // Everyone is blocked or done. SIMD rendezvous first; one still
        // waiting for lanes of its mask resolves only when nothing else can.
        bool any_simd = false;
        bool any_deferred = false;
        for (int pass = 0; pass < 2 && !any_simd; ++pass) {
            if (pass == 1 && !any_deferred) break;
            for (int64_t lo = 0; lo < n; lo += 32)
                any_simd = resolve_simdgroup(lo, lo + 32 < n ? lo + 32 : n, pass, &any_deferred) ||
                           any_simd;
        }
        if (any_simd) continue;
        int64_t n_done = 0, n_wait = 0, first_wait = -1, odd = -1;
        for (int64_t i = 0; i < n; ++i) {
            Fiber* f = &G.fibers[i];
            if (f->state == F_DONE) {
                ++n_done;
            } else if (f->state == F_BARRIER) {
                ++n_wait;
                if (first_wait < 0) first_wait = i;
            }
        }
        if (n_done == n) return;
        if (n_wait == 0) fault_from_fiber(__SIM_DEADLOCK);
        __SimResult* R = G.R;
        const int64_t line = G.fibers[first_wait].line;
        int64_t other_line = 0;
        for (int64_t i = 0; i < n; ++i) {
            Fiber* f = &G.fibers[i];
            if (f->state == F_DONE && odd < 0) odd = i;
            if (f->state == F_BARRIER && f->line != line && other_line == 0) {
                other_line = f->line;
                odd = i;
            }
        }
        if (n_done > 0 || other_line != 0) {
            n_wait = 0;
            for (int64_t i = 0; i < n; ++i)
                if (G.fibers[i].state == F_BARRIER && G.fibers[i].line == line) ++n_wait;
            R->kind = __SIM_DIVERGENCE;
            R->line = line;
            R->line2 = other_line;
            R->n_done = n_done;
            R->n_wait = n_wait;
            R->odd_thread = odd;
            for (int d = 0; d < 3; ++d) {
                R->group[d] = gid[d];
                R->thread[d] = G.fibers[odd].t.lid[d];
            }
            siglongjmp(G.jb, 1);
        }
        race_barrier();   // the race detector: the barrier orders the group's threads
        for (int64_t i = 0; i < n; ++i) G.fibers[i].state = F_RUNNABLE;
    }
}

// The threads of group `gid` per dimension: the launch's threadgroup size,
// less where the grid ends inside the group (a partial last group).
void group_size(const __SimLaunch* L, const uint32_t gid[3], uint32_t tsz[3]) {
    for (int d = 0; d < 3; ++d) {
        int64_t rest = L->grid[d] - (int64_t)gid[d] * L->tg[d];
        tsz[d] = (uint32_t)(rest < L->tg[d] ? rest : L->tg[d]);
    }
}

// The k-th of the indices 0..n-1 in the schedule's order (reversed or not).
// The order of a launch's threadgroups: the k-th group to run, as its
// position in the grid. In index order (x fastest), reversed (the last
// first), or a permutation drawn from the launch's seed (shuffled).
struct GroupOrder {
    int64_t n0, n01, total;
    int64_t schedule;
    Perm perm;

    explicit GroupOrder(const __SimLaunch* L)
        : n0(L->ngroups[0]),
          n01(L->ngroups[0] * L->ngroups[1]),
          total(L->ngroups[0] * L->ngroups[1] * L->ngroups[2]),
          schedule(L->schedule),
          perm(make_perm((uint64_t)total, sub_key(L->schedule_seed, 0x6A))) {}

    void at(int64_t k, uint32_t gid[3]) const {
        const int64_t g = schedule == __SIM_SCHEDULE_SHUFFLED ? (int64_t)perm_at(perm, (uint64_t)k)
                          : schedule == __SIM_SCHEDULE_REVERSED ? total - 1 - k
                                                                 : k;
        gid[0] = (uint32_t)(g % n0);
        gid[1] = (uint32_t)(g % n01 / n0);
        gid[2] = (uint32_t)(g / n01);
    }
};

#include "sim_check.inc"
#include "sim_profile.inc"
#include "sim_bounds.inc"

void run_fibers(__SimLaunch* L) {
    const GroupOrder order(L);
    for (int64_t k = 0; k < order.total; ++k) {
        uint32_t gid[3];
        order.at(k, gid);
        uint32_t tsz[3];
        group_size(L, gid, tsz);
        __sim_tg_fill(L->tgmem, L->tgmem_size);
        __sim_group_begin();
        if (L->profile) prof_group_begin((int64_t)tsz[0] * tsz[1] * tsz[2], prof_sampled(gid));
        run_group_fibers(gid, tsz);
        if (L->profile) prof_group_end();
        __sim_group_end(tsz[0] * tsz[1] * tsz[2]);
    }
}

// __SIM_SCHEDULE_REVERSED on the fiber-free path: __sim_fast_loop
// (sim_runtime.h) backwards, groups and then their threads last first. It
// calls the kernel's thread function through its pointer, so the forward
// loop, with the kernel inlined into it, stays exactly as fast as it was.
void run_fast_reversed(__SimLaunch* L) {
    __SimThread t;
    for (int64_t gz = L->ngroups[2] - 1; gz >= 0; --gz)
    for (int64_t gy = L->ngroups[1] - 1; gy >= 0; --gy)
    for (int64_t gx = L->ngroups[0] - 1; gx >= 0; --gx) {
        t.gid[0] = (uint32_t)gx; t.gid[1] = (uint32_t)gy; t.gid[2] = (uint32_t)gz;
        group_size(L, t.gid, t.tsz);
        t.nthr = t.tsz[0] * t.tsz[1] * t.tsz[2];
        // Fresh threadgroup memory, as the forward loops give every group.
        __sim_tg_fill(L->tgmem, L->tgmem_size);
        __sim_group_begin();
        uint32_t lin = t.nthr;
        for (int64_t z = t.tsz[2] - 1; z >= 0; --z)
        for (int64_t y = t.tsz[1] - 1; y >= 0; --y)
        for (int64_t x = t.tsz[0] - 1; x >= 0; --x) {
            t.lid[0] = (uint32_t)x; t.lid[1] = (uint32_t)y; t.lid[2] = (uint32_t)z;
            t.lin = --lin;
            set_progress(t);
            G.fn(L->bufs, &t);
        }
        __sim_group_end(t.nthr);
    }
}

// __SIM_SCHEDULE_SHUFFLED on the fiber-free path: the groups in the order
// GroupOrder draws, the threads of each in a permutation of their own
// (drawn from the seed and the group), through the thread function's
// pointer as run_fast_reversed does.
void run_fast_shuffled(__SimLaunch* L) {
    const GroupOrder order(L);
    __SimThread t;
    for (int64_t k = 0; k < order.total; ++k) {
        order.at(k, t.gid);
        group_size(L, t.gid, t.tsz);
        t.nthr = t.tsz[0] * t.tsz[1] * t.tsz[2];
        __sim_tg_fill(L->tgmem, L->tgmem_size);
        __sim_group_begin();
        const uint64_t g = (uint64_t)t.gid[0] + ((uint64_t)t.gid[1] << 21) + ((uint64_t)t.gid[2] << 42);
        const SmallPerm threads = small_perm(t.nthr, sub_key(L->schedule_seed, 0x7B00 + g));
        const uint32_t plane = t.tsz[0] * t.tsz[1];
        for (uint32_t j = 0; j < t.nthr; ++j) {
            const uint32_t lin = (uint32_t)threads.at(j);
            t.lid[0] = lin % t.tsz[0];
            t.lid[1] = lin % plane / t.tsz[0];
            t.lid[2] = lin / plane;
            t.lin = lin;
            set_progress(t);
            G.fn(L->bufs, &t);
        }
        __sim_group_end(t.nthr);
    }
}

// A profiled variant's launch on the fiber-free path: the groups and their
// threads in index order, through the thread function's pointer, each group
// bracketed by the counters (sim_profile.inc).
void run_fast_profiled(__SimLaunch* L) {
    __SimThread t;
    for (uint32_t gz = 0; gz < (uint32_t)L->ngroups[2]; ++gz)
    for (uint32_t gy = 0; gy < (uint32_t)L->ngroups[1]; ++gy)
    for (uint32_t gx = 0; gx < (uint32_t)L->ngroups[0]; ++gx) {
        t.gid[0] = gx; t.gid[1] = gy; t.gid[2] = gz;
        group_size(L, t.gid, t.tsz);
        t.nthr = t.tsz[0] * t.tsz[1] * t.tsz[2];
        __sim_tg_fill(L->tgmem, L->tgmem_size);
        __sim_group_begin();
        prof_group_begin(t.nthr, prof_sampled(t.gid));
        uint32_t lin = 0;
        for (uint32_t z = 0; z < t.tsz[2]; ++z)
        for (uint32_t y = 0; y < t.tsz[1]; ++y)
        for (uint32_t x = 0; x < t.tsz[0]; ++x, ++lin) {
            t.lid[0] = x; t.lid[1] = y; t.lid[2] = z; t.lin = lin;
            g_prof.lane = lin;
            set_progress(t);
            G.fn(L->bufs, &t);
        }
        prof_group_end();
        __sim_group_end(t.nthr);
    }
}

}  // namespace

// ------------------------------------------------------------------ threadgroup arrays
extern "C" __SIM_HIDDEN char* __sim_tg_alloc(__SimTgArray* a) {
    if (a->ptr) return a->ptr;
    int64_t page = sysconf(_SC_PAGESIZE);
    int64_t align = a->align > 16 ? a->align : 16;
    int64_t n = a->nbytes > 0 ? a->nbytes : 1;
    int64_t data = (n + align + page - 1) / page * page;
    size_t total = (size_t)(3 * kTgGuardBytes + 2 * data);
    void* m = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        // Out of address space: an unguarded array still lets the kernel run.
        static char fallback[1 << 16] __attribute__((aligned(64)));
        static int64_t used;
        used = (used + align - 1) / align * align;
        if (used + n > (int64_t)sizeof(fallback)) __builtin_trap();
        a->ptr = fallback + used;
        used += n;
        return a->ptr;
    }
    char* lo = (char*)m;
    a->lo = lo;
    a->hi = lo + total;
    char *end_lo, *end_hi, *start_lo, *start_hi;
    tg_region(a, false, &end_lo, &end_hi);
    tg_region(a, true, &start_lo, &start_hi);
    char* regions[2] = {end_lo, start_lo};
    for (char* r : regions) {
        mprotect(r, (size_t)data, PROT_READ | PROT_WRITE);
        memset(r, __SIM_GARBAGE_BYTE, (size_t)data);
    }
    // End-aligned (to the array's alignment, at least 16 as the old statics
    // were): index `bound` is the first byte of the guard pages. Start-aligned:
    // the region's first byte (page-aligned), so index -1 is in the guard.
    a->ptr_end = (char*)(((uintptr_t)end_hi - (uintptr_t)a->nbytes) & ~(uintptr_t)(align - 1));
    a->ptr_start = start_lo;
    a->movable = g_tg_registering ? 1 : 0;
    a->ptr = a->ptr_end;
    if (g_ntg < kMaxTgArrays) g_tg[g_ntg++] = a;
    return a->ptr;
}

extern "C" __SIM_HIDDEN void __sim_tg_register(__SimTgArray* first, __SimTgArray* last) {
    g_tg_registering = true;
    for (__SimTgArray* a = first; a && a < last; ++a) __sim_tg_alloc(a);
    g_tg_registering = false;
    // Slack written by an earlier (faulty) launch must not be reported again.
    for (int i = 0; i < g_ntg; ++i) {
        for (int start = 0; start < 2; ++start) {
            char *lo, *hi;
            tg_region(g_tg[i], start, &lo, &hi);
            memset(lo, __SIM_GARBAGE_BYTE, (size_t)(hi - lo));
        }
    }
    // Odd launches start start-aligned: a launch of one group still
    // alternates from launch to launch.
    g_tg_start_next = (g_tg_launches++ & 1) != 0;
}

extern "C" __SIM_HIDDEN int64_t __sim_tg_bytes(const __SimTgArray* first, const __SimTgArray* last) {
    int64_t n = 0;
    for (const __SimTgArray* a = first; a && a < last; ++a) n += (a->nbytes + 15) / 16 * 16;
    return n;
}

extern "C" __SIM_HIDDEN void __sim_tg_fill(char* tgmem, int64_t tgsize) {
    const __SimLaunch* L = G.L;
    const int b = L && (L->tg_fill & 0x100) ? (int)(L->tg_fill & 0xFF) : __SIM_POISON_BYTE;
    if (tgsize) memset(tgmem, b, (size_t)tgsize);
    // This group's placement: the refill writes only the array's bytes at it,
    // as before, so the other placement's region stays garbage throughout.
    const bool start = g_tg_start_next;
    g_tg_start_next = !start;
    for (int i = 0; i < g_ntg; ++i) {
        __SimTgArray* a = g_tg[i];
        if (a->movable) a->ptr = start ? a->ptr_start : a->ptr_end;
        memset(a->ptr, b, (size_t)a->nbytes);
    }
    check_group_begin((uint8_t)b);
}

// ------------------------------------------------------------------ kernel-facing API
extern "C" __SIM_HIDDEN void __sim_simd_wait_need(const void* site, __SimResolver resolve,
                                                  const void* in, void* out, int64_t arg, int64_t arg2,
                                                  uint32_t need) {
    if (G.cur < 0) fault_from_fiber(__SIM_NEED_FIBERS);
    Fiber* f = &G.fibers[G.cur];
    prof_simd();
    f->state = F_SIMD;
    f->need = need;
    f->site = site;
    f->resolve = resolve;
    f->io.in = in;
    f->io.out = out;
    f->io.arg = arg;
    f->io.arg2 = arg2;
    switch_to_scheduler(f);
}

extern "C" __SIM_HIDDEN void __sim_simd_wait(const void* site, __SimResolver resolve,
                                             const void* in, void* out, int64_t arg, int64_t arg2) {
    __sim_simd_wait_need(site, resolve, in, out, arg, arg2, 0u);
}

extern "C" __SIM_HIDDEN void __sim_tg_barrier_wait(int64_t line) {
    if (G.cur < 0) fault_from_fiber(__SIM_NEED_FIBERS);
    Fiber* f = &G.fibers[G.cur];
    prof_barrier();
    f->state = F_BARRIER;
    f->line = line;
    switch_to_scheduler(f);
}

extern "C" __SIM_HIDDEN void __sim_misaligned(const void* p, int64_t align, int64_t is_write) {
    __SimResult* R = G.R;
    record_position(R);
    R->buf = -1;
    locate_misaligned(R, (uintptr_t)p);
    R->aux = align;
    R->is_write = is_write;
    siglongjmp(G.jb, 1);
}

extern "C" __SIM_HIDDEN void __sim_undefined_read(const char* op, uint32_t lane, int64_t src,
                                                  int64_t why, int64_t aux) {
    __SimResult* R = G.R;
    const int64_t lo = g_resolve_lo, hi = g_resolve_hi;
    if (!R || lo < 0) return;   // not called by a resolver: nothing to name
    if (R->ub_count++ > 0) return;   // the first one is named; the rest counted
    if (why == __SIM_UB_INACTIVE) {
        // The resolver saw only that the lane is not at this call; the
        // fibers tell why, which is what the kernel's author needs to know.
        if (src < 0 || src >= 32 || lo + src >= hi) {
            why = __SIM_UB_ABSENT;
            aux = hi - lo;
        } else if (G.fibers[lo + src].state == F_DONE) {
            why = __SIM_UB_RETURNED;
        } else {
            why = __SIM_UB_DIVERGED;
        }
    }
    R->ub_why = why;
    R->ub_lane = src;
    R->ub_aux = aux;
    const Fiber* f = (int64_t)lane < hi - lo ? &G.fibers[lo + lane] : nullptr;
    for (int d = 0; d < 3; ++d) {
        R->ub_group[d] = f ? (int64_t)f->t.gid[d] : -1;
        R->ub_thread[d] = f ? (int64_t)f->t.lid[d] : -1;
    }
    size_t n = 0;
    for (; op && op[n] && n + 1 < sizeof(R->ub_op); ++n) R->ub_op[n] = op[n];
    R->ub_op[n] = 0;
}

extern "C" __SIM_HIDDEN void __sim_prof_atomic_begin(const void* addr) { race_atomic_begin(addr); }
extern "C" __SIM_HIDDEN void __sim_prof_atomic_end(void) { race_atomic_end(); }
extern "C" __SIM_HIDDEN void __sim_prof_thread_slot(const void** slot) { g_race.thread_slot = slot; }

extern "C" __SIM_HIDDEN uint32_t __sim_current_lane(void) {
    return G.cur < 0 ? 0u : (uint32_t)(G.cur & 31);
}

// ------------------------------------------------------------------ the simulator's clock
// The model is sim_runtime.h's (__SIM_LANES, __SIM_CORES); docs/simulator-time.md
// has it whole, with its limits.
namespace {

// A counter the kernel's thread reads without a system call: the TSC on
// x86-64, the virtual counter on arm64, elsewhere the monotonic clock.
inline uint64_t clock_ticks() {
#if defined(__x86_64__)
    return __builtin_ia32_rdtsc();
#elif defined(__aarch64__)
    uint64_t v;
    __asm__ volatile("mrs %0, cntvct_el0" : "=r"(v));
    return v;
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

// Ticks between two reads of the thread's CPU clock (a system call): about
// 90 us of x86-64 TSC, 170 us of a 24 MHz arm64 counter, 100 us elsewhere.
#if defined(__x86_64__)
const uint64_t kBlockTicks = 1u << 18;
#elif defined(__aarch64__)
const uint64_t kBlockTicks = 1u << 12;
#else
const uint64_t kBlockTicks = 100000;
#endif
// Less time off the CPU than this in a block is read noise, not a wait.
const int64_t kMinOffNs = 5000;

int64_t clock_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// Groups are charged in blocks of about kBlockTicks. A block reads the
// thread's CPU clock and the monotonic clock at both ends; what the host
// spent off the CPU inside it (it ran another process) is taken from the
// block's largest group, where a wait of a time slice lands (milliseconds
// against a block of 0.1 ms: at most one wait a block, in the group that
// held it, unless the block is that one group). Without that a short launch
// preempted once would be charged the whole wait in one group.
struct GroupClock {
    uint64_t group_start;   // ticks at the running group's begin
    uint64_t ticks;         // every group's ticks, summed (closed blocks)
    double work;            // every group's ticks over its lanes, summed
    double longest;         // the largest of them
    int64_t groups;         // groups charged in this launch
    // The open block.
    uint64_t b_start;       // ticks at its start
    int64_t b_cpu, b_wall;  // the thread's CPU clock and the monotonic clock at its start
    uint64_t b_ticks;
    double b_work, b_top, b_second;  // its charges: sum, largest, second largest
    uint64_t b_top_ticks;   // the largest charge's ticks and lanes
    uint32_t b_top_lanes;
};
GroupClock g_clock;

void block_open(uint64_t now, int64_t cpu, int64_t wall) {
    g_clock.b_start = now;
    g_clock.b_cpu = cpu;
    g_clock.b_wall = wall;
    g_clock.b_ticks = 0;
    g_clock.b_work = g_clock.b_top = g_clock.b_second = 0;
    g_clock.b_top_ticks = 0;
    g_clock.b_top_lanes = 1;
}

void block_close(uint64_t now, int64_t cpu, int64_t wall) {
    double top = g_clock.b_top;
    const int64_t span_ns = wall - g_clock.b_wall;
    const int64_t off_ns = span_ns - (cpu - g_clock.b_cpu);
    if (off_ns > kMinOffNs && span_ns > 0 && g_clock.b_top_ticks > 0) {
        double off = (double)off_ns * (double)(now - g_clock.b_start) / (double)span_ns;
        if (off > (double)g_clock.b_top_ticks) off = (double)g_clock.b_top_ticks;
        const double lanes = (double)g_clock.b_top_lanes;
        top = ((double)g_clock.b_top_ticks - off) / lanes;
        if (top < g_clock.b_second) top = g_clock.b_second;
        g_clock.b_work = g_clock.b_work - off / lanes > 0 ? g_clock.b_work - off / lanes : 0;
        g_clock.b_ticks -= (uint64_t)off;
    }
    g_clock.ticks += g_clock.b_ticks;
    g_clock.work += g_clock.b_work;
    if (top > g_clock.longest) g_clock.longest = top;
}

void clock_reset() {
    memset(&g_clock, 0, sizeof g_clock);
    block_open(clock_ticks(), clock_ns(CLOCK_THREAD_CPUTIME_ID), clock_ns(CLOCK_MONOTONIC));
}

// Closes the last block: at the launch's end, before its model is read.
void clock_finish() {
    block_close(clock_ticks(), clock_ns(CLOCK_THREAD_CPUTIME_ID), clock_ns(CLOCK_MONOTONIC));
}

// The launch's CPU time as the modeled makespan, in picoseconds: cpu_ns
// times the makespan's share of the groups' ticks. The groups' ticks, not
// the launch's: a counter keeps running while the thread waits for a core,
// and a wait between two groups would shrink every share (the minimum of a
// few runs would pick that run). So the model lies between
// cpu_ns / (__SIM_LANES * __SIM_CORES) and cpu_ns. A launch that charged no
// group keeps its whole CPU time, as a serial one would.
int64_t clock_model_ps(int64_t cpu_ns) {
    if (g_clock.groups == 0 || g_clock.ticks == 0) return cpu_ns * 1000;
    const double spread = g_clock.work / __SIM_CORES;
    const double share = (spread > g_clock.longest ? spread : g_clock.longest) / (double)g_clock.ticks;
    return (int64_t)((double)cpu_ns * 1000.0 * (share < 1 ? share : 1) + 0.5);
}

}  // namespace

extern "C" __SIM_HIDDEN void __sim_group_begin(void) { g_clock.group_start = clock_ticks(); }

// A group's charge: its ticks over the lanes it can fill. The makespan
// (clock_model_ps) needs only their sum and the largest, whatever the order
// the schedule ran the groups in.
extern "C" __SIM_HIDDEN void __sim_group_end(uint32_t nthreads) {
    const uint64_t now = clock_ticks();
    race_settle();   // the group's last store, before the next group's records
    const uint64_t spent = now - g_clock.group_start;
    const uint32_t lanes = nthreads < __SIM_LANES ? (nthreads > 0 ? nthreads : 1) : __SIM_LANES;
    const double charge = (double)spent / (double)lanes;
    g_clock.b_ticks += spent;
    g_clock.b_work += charge;
    if (charge > g_clock.b_top) {
        g_clock.b_second = g_clock.b_top;
        g_clock.b_top = charge;
        g_clock.b_top_ticks = spent;
        g_clock.b_top_lanes = lanes;
    } else if (charge > g_clock.b_second) {
        g_clock.b_second = charge;
    }
    ++g_clock.groups;
    if (now - g_clock.b_start >= kBlockTicks) {
        const int64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID), wall = clock_ns(CLOCK_MONOTONIC);
        block_close(now, cpu, wall);
        block_open(clock_ticks(), cpu, wall);
    }
}

extern "C" __SIM_HIDDEN int64_t __sim_run(__SimLaunch* L, __SimResult* R,
                                           __SimThreadFn thread_fn, __SimFastFn fast_fn) {
    memset(R, 0, sizeof(*R));
    R->is_write = -1;
    g_in_handler = 0;
    G.page = sysconf(_SC_PAGESIZE);
    G.L = L;
    G.R = R;
    G.fn = thread_fn;
    G.cur = -1;
    G.nfib = 0;
    g_resolve_lo = -1;   // a fault inside a resolver may have left it set
    for (int d = 0; d < 6; ++d) __sim_progress[d] = 0;
    const int64_t tgprod = L->tg[0] * L->tg[1] * L->tg[2];
    if (L->use_fibers) {
        int64_t ss = L->stack_size > 0 ? L->stack_size : (128 << 10);
        if (!ensure_stacks(tgprod, ss)) {
            R->kind = __SIM_SETUP_FAILED;
            return R->kind;
        }
    }
    if (!G.altstack) {
        void* m = mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            R->kind = __SIM_SETUP_FAILED;
            return R->kind;
        }
        G.altstack = (char*)m;
    }
    stack_t ss, old_ss;
    ss.ss_sp = G.altstack;
    ss.ss_size = 1 << 16;
    ss.ss_flags = 0;
    sigaltstack(&ss, &old_ss);
    G.thread = pthread_self();

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < kNumSignals; ++i) sigaction(kSignals[i], &sa, &g_old_actions[i]);

    // Make sure none of our signals is blocked on this thread while we run.
    sigset_t unblock, old_mask;
    sigemptyset(&unblock);
    for (int i = 0; i < kNumSignals; ++i) sigaddset(&unblock, kSignals[i]);
    pthread_sigmask(SIG_UNBLOCK, &unblock, &old_mask);

    struct itimerval it, old_it;
    memset(&it, 0, sizeof(it));
    if (L->timeout_s > 0) {
        double t = L->timeout_s;
        it.it_value.tv_sec = (time_t)t;
        it.it_value.tv_usec = (suseconds_t)((t - (double)(time_t)t) * 1e6);
        if (it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0) it.it_value.tv_usec = 1;
        it.it_interval.tv_usec = 100000;  // keep ticking in case one tick is lost
    }

    // The simulator's timer: this thread's CPU clock around the kernel's
    // threads only (not the signal and timer set-up around them). A thread
    // clock does not count time the host spent running other processes,
    // which a wall clock on a shared machine would. The group clock
    // (clock_reset ... clock_model_ps) turns it into the modeled GPU's time.
    struct timespec cpu0, cpu1;
    if (sigsetjmp(G.jb, 1) == 0) {
        G.active = 1;
        if (L->timeout_s > 0) setitimer(ITIMER_REAL, &it, &old_it);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0);
        clock_reset();
        if (L->profile && !prof_begin(L)) {
            R->kind = __SIM_SETUP_FAILED;
            siglongjmp(G.jb, 1);
        }
        if (!check_begin(L)) {
            R->kind = __SIM_SETUP_FAILED;
            siglongjmp(G.jb, 1);
        }
        if (L->use_fibers) run_fibers(L);
        else if (L->profile) run_fast_profiled(L);
        else if (L->schedule == __SIM_SCHEDULE_REVERSED) run_fast_reversed(L);
        else if (L->schedule == __SIM_SCHEDULE_SHUFFLED) run_fast_shuffled(L);
        else fast_fn(L);
        clock_finish();
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu1);
        R->cpu_ns = (int64_t)(cpu1.tv_sec - cpu0.tv_sec) * 1000000000 + (cpu1.tv_nsec - cpu0.tv_nsec);
        R->model_ps = clock_model_ps(R->cpu_ns);
        if (L->profile) prof_finish();
        G.active = 0;
        R->kind = __SIM_OK;
        // A write just outside an array's bound that stayed inside its pages:
        // the few bytes of alignment past the end (end-aligned), past the end
        // in the start-aligned region, or before the start of an array bound
        // at load (it never moves). One that faulted live ended the launch.
        for (int i = 0; i < g_ntg; ++i) {
            char* at;
            char* bad = tg_slack_violation(g_tg[i], &at);
            if (bad) {
                __SimTgArray placed = *g_tg[i];   // counted from where it was written
                placed.ptr = at;
                set_tg_fault(R, &placed, (uintptr_t)bad);
                R->is_write = 1;
                R->after = 1;
                break;
            }
        }
        // A read of an output element no other thread wrote (sim_check.inc).
        if (R->kind == __SIM_OK) check_finish(R);
    } else {
        G.active = 0;
        g_in_handler = 0;
    }
    if (L->timeout_s > 0) {
        struct itimerval zero;
        memset(&zero, 0, sizeof(zero));
        setitimer(ITIMER_REAL, &zero, nullptr);
#if defined(__linux__)
        // Swallow a tick that is still pending, so it cannot reach the
        // host's SIGALRM disposition (default: terminate) after we restore it.
        sigset_t al;
        sigemptyset(&al);
        sigaddset(&al, SIGALRM);
        pthread_sigmask(SIG_BLOCK, &al, nullptr);
        sigset_t pend;
        sigpending(&pend);
        if (sigismember(&pend, SIGALRM)) {
            struct timespec z = {0, 0};
            sigtimedwait(&al, nullptr, &z);
        }
#endif
    }
    G.cur = -1;
    if (g_prof.P) prof_release();
    check_end();
    // Restore what the host had: handlers, mask, alternate stack, its timer.
    for (int i = 0; i < kNumSignals; ++i) sigaction(kSignals[i], &g_old_actions[i], nullptr);
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    sigaltstack(&old_ss, nullptr);
    if (L->timeout_s > 0 && (old_it.it_value.tv_sec || old_it.it_value.tv_usec))
        setitimer(ITIMER_REAL, &old_it, nullptr);
    return R->kind;
}

// float -> bfloat16, round to nearest even. At -mcpu=baseline clang lowers the
// conversion to a call of this compiler-rt routine, and zig does not link
// compiler-rt into our shared objects, so the runtime provides it.
extern "C" __SIM_HIDDEN __bf16 __truncsfbf2(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t bits;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        bits = (uint16_t)((u >> 16) | 0x0040u);   // NaN stays a (quiet) NaN
    } else {
        bits = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    __bf16 out;
    memcpy(&out, &bits, sizeof out);
    return out;
}
