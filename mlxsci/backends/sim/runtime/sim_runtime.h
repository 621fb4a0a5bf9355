// mlxsci CPU simulator: the part of the runtime every kernel translation unit
// sees. Included FIRST (before the dialect prelude), so it must not pull in
// system headers that would pollute the kernel's global namespace: only
// <stdint.h>. Everything heavy (signals, fibers, scheduler) lives in
// sim_runtime.cpp, compiled once and linked into each kernel library.
#ifndef MLXSCI_SIM_RUNTIME_H
#define MLXSCI_SIM_RUNTIME_H

#include <stdint.h>

#define __SIM_HIDDEN __attribute__((visibility("hidden")))
#define __SIM_EXPORT extern "C" __attribute__((visibility("default")))

// Storage of `threadgroup` declarations. The rewrite turns
// `threadgroup float tile[18][18];` into
// `typedef float __sim_tgt_tile[18][18]; __SIM_TG_BIND(tile, "float[18][18]");`:
// `tile` becomes a reference to an array the runtime maps between PROT_NONE
// guard pages, end-aligned or start-aligned by turns (__SimTgArray), so an
// index past the bound or before 0 faults and the fault
// handler names the array (a plain static would overflow silently into the
// runtime's own state). Threadgroups run one after another, so one instance
// is shared by all fibers of the running group; the runtime refills it with
// poison (__SIM_POISON_BYTE) before each group: threadgroup memory is
// uninitialised, and a kernel that reads it before writing it must fail.
//
// Declarations the rewrite cannot take apart (`__SIM_THREADGROUP T x = v;`,
// or `__shared__` produced by a macro) stay plain statics in the `sim_tgmem`
// section, refilled the same way but unguarded.
#if defined(__ELF__)
#define __SIM_THREADGROUP __attribute__((section("sim_tgmem"), aligned(16))) static
extern "C" char __start_sim_tgmem[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_sim_tgmem[] __attribute__((weak, visibility("hidden")));
#else
// No __start_/__stop_ section symbols (Mach-O): plain statics, not refilled.
#define __SIM_THREADGROUP __attribute__((aligned(16))) static
static char* const __start_sim_tgmem = 0;
static char* const __stop_sim_tgmem = 0;
#endif

// One guarded threadgroup array (shared with Python through __SimResult).
struct __SimTgArray {
    const char* name;     // as declared in the kernel
    const char* decl;     // its type, e.g. "float[18][18]"
    int64_t nbytes;
    int64_t esize;        // innermost element size (float for float[18][18])
    int64_t align;
    char* ptr;            // first byte; 0 until the runtime maps it
    char* lo;             // the whole mapping, guard pages included
    char* hi;
    // Two placements in that mapping, [guard | A | guard | B | guard]: the
    // array end-aligned in A (index `bound` faults) and start-aligned in B
    // (index -1 faults). `ptr` alternates between them from one group to
    // the next (and the first group's from launch to launch), so an access
    // just past either end faults live, with its thread, within two groups.
    // Only arrays bound inside a function move: a namespace-scope reference
    // (CUDA `__shared__` at file scope) binds once at load, so it stays at
    // ptr_end (`movable` 0).
    char* ptr_end;
    char* ptr_start;
    int64_t movable;
};

template <class T> struct __sim_tg_base { typedef T type; };
template <class T, unsigned long N> struct __sim_tg_base<T[N]> : __sim_tg_base<T> {};
template <class T> constexpr int64_t __sim_tg_esize() {
    return (int64_t)sizeof(typename __sim_tg_base<T>::type);
}

// Maps the array on first use (ELF: the entry maps every record first).
extern "C" __SIM_HIDDEN char* __sim_tg_alloc(__SimTgArray* a);
static inline __attribute__((always_inline)) char* __sim_tg_ptr(__SimTgArray* a) {
    char* p = a->ptr;
    return __builtin_expect(p != 0, 1) ? p : __sim_tg_alloc(a);
}

// Every record sits in the `sim_tgarrays` section, so the entry point can map
// and size them all before any thread runs.
#if defined(__ELF__)
#define __SIM_TGA_SECTION __attribute__((section("sim_tgarrays"), used, aligned(8)))
extern "C" __SimTgArray __start_sim_tgarrays[] __attribute__((weak, visibility("hidden")));
extern "C" __SimTgArray __stop_sim_tgarrays[] __attribute__((weak, visibility("hidden")));
#else
#define __SIM_TGA_SECTION
static __SimTgArray* const __start_sim_tgarrays = 0;
static __SimTgArray* const __stop_sim_tgarrays = 0;
#endif

// The type name of a guarded array: a macro, so that a declaration the
// rewrite found inside a #define gets its name pasted after the macro's own
// parameters are substituted (`typedef float __SIM_TGT(n)[N * N];`).
#define __SIM_TGT(NAME) __sim_tgt_##NAME

#define __SIM_TG_BIND(NAME, DECL)                                                       \
    static __SimTgArray __sim_tga_##NAME __SIM_TGA_SECTION = {                          \
        #NAME, DECL, (int64_t)sizeof(__sim_tgt_##NAME), __sim_tg_esize<__sim_tgt_##NAME>(), \
        (int64_t)alignof(__sim_tgt_##NAME), 0, 0, 0};                                   \
    __sim_tgt_##NAME& NAME = *(__sim_tgt_##NAME*)__sim_tg_ptr(&__sim_tga_##NAME)

// The same at namespace scope (a CUDA header's file-scope __shared__ array):
// the reference is a global, bound once when the library loads (so the array
// keeps its first placement, sim_runtime.cpp), in a section of its own that
// the kernel-symbol check counts as the runtime's (kernel_symbols.py: a
// kernel's writable globals are refused as state that outlives a launch; a
// candidate's text may not name a section, the source policy refuses it).
#if defined(__ELF__)
#define __SIM_TGREF_SECTION __attribute__((section("sim_tgrefs")))
#else
#define __SIM_TGREF_SECTION
#endif
#define __SIM_TG_BIND_GLOBAL(NAME, DECL)                                                \
    static __SimTgArray __sim_tga_##NAME __SIM_TGA_SECTION = {                          \
        #NAME, DECL, (int64_t)sizeof(__sim_tgt_##NAME), __sim_tg_esize<__sim_tgt_##NAME>(), \
        (int64_t)alignof(__sim_tgt_##NAME), 0, 0, 0};                                   \
    __SIM_TGREF_SECTION __sim_tgt_##NAME& NAME =                                        \
        *(__sim_tgt_##NAME*)__sim_tg_ptr(&__sim_tga_##NAME)

// Garbage byte written into uninitialised outputs, buffer slack and the
// slack around guarded threadgroup arrays: 0x5A5A5A5A is 1.53e16 as float,
// never zero or NaN.
#define __SIM_GARBAGE_BYTE 0x5A

// Poison: the value of every read the GPU leaves undefined. Threadgroup /
// __shared__ memory is refilled with it before each group (never written in
// this launch), and a SIMD shuffle from an inactive or nonexistent lane
// returns it. 0xFF is the one byte that is NaN in float32 (0xFFFFFFFF),
// float16 and bfloat16 (0xFFFF) and float64, so any float result that
// depends on it is NaN and fails verification; integers read -1 / all ones
// (0xFFFFFFFF), a fixed pattern that is a wrong index or count almost always.
#define __SIM_POISON_BYTE 0xFF

// ---- structures shared with Python (ctypes mirrors them in sim/__init__.py) ----
struct __SimGuard {
    uint64_t lo, hi;      // whole reservation, guard pages included
    uint64_t base;        // first byte of the buffer
    uint64_t nbytes;
    int64_t itemsize;
    int64_t buf;          // index into the parameter list
};

struct __SimLaunch {
    int64_t grid[3];
    int64_t tg[3];        // requested threadgroup size, clamped to the grid
    int64_t ngroups[3];
    void** bufs;          // one pointer per non-attribute parameter
    int64_t nbufs;
    const __SimGuard* guards;
    int64_t nguards;
    int64_t use_fibers;
    double timeout_s;
    int64_t stack_size;
    char* tgmem;          // filled in by the kernel's entry point
    int64_t tgmem_size;
    const char* kernel;   // name, for the last-resort message of a fatal fault
    // The order threads run in (a GPU guarantees none between simdgroups
    // without a barrier, and none between threadgroups of one launch), so a
    // result that depends on it shows as a difference between two schedules:
    // __SIM_SCHEDULE_FORWARD, __SIM_SCHEDULE_REVERSED or __SIM_SCHEDULE_SHUFFLED.
    int64_t schedule;
    // The shuffled schedule's seed: one seed, one order (groups, threads,
    // and the fibers' interleaving at every scheduling round).
    uint64_t schedule_seed;
    // What threadgroup memory holds before each group: 0 poison
    // (__SIM_POISON_BYTE), else 0x100 | the byte. A run with another fill
    // whose outputs differ shows that the kernel read that memory before it
    // wrote it (mlxsci.worker.serve.unwritten_threadgroup_run).
    int64_t tg_fill;
    // Non-null for a launch of a profiled variant (docs/simulator-time.md):
    // what the modelled GPU's clock counts, filled by the runtime.
    struct __SimProfile* profile;
    // Non-null where the launch asks a profiled variant's hooks to check
    // what it does (__SimCheck); a variant without hooks checks nothing.
    struct __SimCheck* check;
};

// What a profiled variant's hooks (__sim_prof_access before each load and
// store) check during a launch that asks (mlxsci/backends/sim/profile.py:
// Checks, which says what they see and what not; runtime/sim_check.inc):
// - tg_reads: a load of bytes of a guarded threadgroup / __shared__ array
//   that no thread of the running group has stored since the group began
//   (and that still hold the group's fill byte: a store the hooks do not
//   see, a memcpy, leaves other bytes) ends the launch with
//   __SIM_UNINIT_READ, the array, element, thread and group in the
//   __SimResult as for __SIM_TG_OOB;
// - watch_lo < watch_hi: every store that touches those bytes (one element
//   of an input or output) is recorded, group and thread, in order;
// - device_bounds: a load or store of bytes of a guarded input or output's
//   mapping (__SimGuard lo..hi) outside its data bytes [base, base + nbytes)
//   ends the launch with __SIM_OOB, as its guard pages would (the alignment
//   slack between the data and the guard pages holds none);
// - output_reads: a load of an element of an output marked in out_flags
//   (one launched without init_value) that no store had touched (its bytes
//   still holding out_fill: as for tg_reads), when no thread but the reader
//   stores to that element in the rest of the launch either (else it is a
//   race), is reported when the launch has run: __SIM_UNINIT_OUTPUT_READ,
//   buf, elem, and the reader's thread and group, as for __SIM_OOB.
struct __SimCheck {
    // ---- in
    int64_t tg_reads;
    // Threadgroup loads are numbered from 1 in the order they run (tg_loads
    // counts them); those numbered below report_from are not reported: the
    // caller found, from runs of the same launch with other fill bytes, that
    // they read bytes a store the hooks cannot see wrote.
    uint64_t report_from;
    uint64_t watch_lo, watch_hi;
    int64_t* watch_records;   // [watch_cap][6]: group xyz, thread xyz of each store
    int64_t watch_cap;
    // ---- out
    int64_t watch_count;      // stores that touched the element (past watch_cap too)
    uint64_t tg_loads;        // threadgroup loads checked so far
    uint64_t read_ordinal;    // __SIM_UNINIT_READ: the number of the load reported
    // ---- in: device buffers
    int64_t device_bounds;
    int64_t output_reads;
    const uint8_t* out_flags; // [nguards]: 1 for an output whose reads are checked
    int64_t out_fill;         // the byte those outputs hold before the launch
    uint64_t out_report_from; // as report_from, for the loads of those outputs
    // ---- out
    uint64_t out_loads;       // loads of those outputs checked so far
    uint64_t out_ordinal;     // __SIM_UNINIT_OUTPUT_READ: the number of the load reported
    // ---- in: device-memory races (sim_check.inc: the race detector)
    // device_races: the first data race on an input's or output's element
    // ends the launch with __SIM_RACE (buf, elem, addr, is_write, group and
    // thread: the later access; race_first: the earlier one).
    int64_t device_races;
    // lockstep: on the fiber path, each simdgroup's lanes take turns at every
    // device-memory access (an atomic operation is one access), as a GPU's
    // lock-step lanes do (__SIM_SCHEDULE_LOCKSTEP runs the groups that way).
    int64_t lockstep;
    // ---- out
    int64_t race_first[6];    // __SIM_RACE: the earlier access's group xyz, thread xyz
    int64_t race_first_write; //   1 it stored, 0 it loaded
    int64_t races_benign;     // conflicts whose store left the bytes as they were
    int64_t races_unchecked;  // 1: the shadow could not be had (too large): no race checked
};

// The modelled GPU's counts of one launch of a profiled variant: a build of
// the kernel whose basic blocks and memory accesses call the runtime
// (__sim_prof_block, __sim_prof_access; mlxsci/backends/sim/profile.py
// places the calls). The inputs describe the variant and the GPU's costs in
// core cycles; the runtime fills the rest. Every count is the runtime's: the
// kernel is handed no pointer to this structure.
struct __SimProfile {
    // ---- in: the variant
    const int32_t* weights;   // per block: kWeightClasses counts (alu, sfu, atomic, fp64)
    int64_t n_blocks;
    int64_t n_sites;          // memory access sites
    // ---- in: the GPU
    int64_t simd_width;
    int64_t sector_bytes;
    int64_t tg_banks;
    int64_t tg_bank_bytes;
    double c_issue;           // cycles a core spends issuing one SIMD instruction
    double c_sfu;             // ... one special-function SIMD instruction
    double c_fp64;            // ... one fp64 SIMD instruction
    double c_tg;              // ... one threadgroup-memory wavefront
    double c_sector;          // ... moving one sector through its L1
    double c_atomic;          // ... one lane's atomic
    double c_barrier;         // a barrier's cost to a simdgroup's path
    double c_dev_latency;     // a device access's cost to a simdgroup's path
    double c_tg_latency;      // a threadgroup access's cost to its path
    // Which groups' accesses are analysed in full (coalescing, bank
    // conflicts, distinct sectors): group g is iff mix(sample_key, g) <
    // sample_below (all of them at UINT64_MAX). The key is drawn per launch
    // by the parent, where the kernel cannot see it. Every group's blocks,
    // barriers and requests are counted whatever the sample.
    uint64_t sample_key;
    uint64_t sample_below;
    // ---- out: totals over the launch (SIMD instructions count once per simdgroup)
    int64_t launch_groups;
    int64_t analysed_groups;  // of them, the sample whose accesses were analysed in full
    int64_t groups, threads, simdgroups;
    int64_t issue, sfu, fp64, atomic_lanes;
    int64_t thread_ops;       // ALU operations summed over lanes (for SIMD efficiency)
    int64_t dev_requests, dev_sectors;
    int64_t tg_requests, tg_wavefronts;
    int64_t private_requests;
    int64_t group_sectors;    // sectors each group touched, summed over groups
    int64_t dram_read_sectors, dram_write_sectors;
    int64_t barriers, simd_ops;
    int64_t untracked;        // accesses the tables could not place (counted, not analysed)
    double throughput_cycles_sum, throughput_cycles_max;   // per group
    double path_cycles_sum, path_cycles_max;               // per group: its slowest simdgroup
};

enum {
    // Groups, simdgroups and threads in index order, switching fibers at
    // every barrier or SIMD sync point: a write "before" a read in index
    // order is seen by it.
    __SIM_SCHEDULE_FORWARD = 0,
    // Groups in reverse order; within a group, simdgroups from the last to
    // the first, each run on its own up to the next threadgroup barrier (its
    // SIMD operations resolved as it goes), threads of a simdgroup in
    // reverse order, as are threads of a group on the fiber-free path.
    __SIM_SCHEDULE_REVERSED = 1,
    // A pseudo-random order drawn from schedule_seed: threadgroups in a
    // permuted order, the threads of a group in a permuted order on the
    // fiber-free path; on the fiber path each scheduling round (until every
    // fiber waits at a barrier or a SIMD operation, or has returned) runs
    // either every runnable fiber in a permuted order, or each simdgroup on
    // its own up to the next threadgroup barrier, simdgroups and their lanes
    // in permuted orders. SIMD operations still resolve with all the lanes
    // of their simdgroup. A GPU may run any of these orders, so a kernel
    // whose result changes with them has a race; a kernel cannot tell this
    // order from the others by the first threads it sees.
    __SIM_SCHEDULE_SHUFFLED = 2,
    // Groups and simdgroups in index order, each simdgroup on its own up to
    // the next threadgroup barrier, its lanes taking turns at every
    // device-memory access (__SimCheck::lockstep, which only a profiled
    // variant's hooks can honour): lanes that read a word before any of them
    // writes it back, as a GPU's lock-step lanes do, so a read-modify-write
    // split into a load and a store loses updates here as it does there.
    __SIM_SCHEDULE_LOCKSTEP = 3,
};

enum {
    __SIM_OK = 0,
    __SIM_OOB = 1,
    __SIM_DIVERGENCE = 2,
    __SIM_DEADLOCK = 3,
    __SIM_TIMEOUT = 4,
    __SIM_CRASH = 5,
    __SIM_NEED_FIBERS = 6,
    __SIM_STACK_OVERFLOW = 7,
    __SIM_SETUP_FAILED = 8,
    __SIM_TG_OOB = 9,        // threadgroup array: tg_* fields, elem, is_write
    __SIM_MISALIGNED = 10,   // addr, aux = access bytes, is_write
    __SIM_GP_FAULT = 11,     // x86 general-protection fault: addr when decoded, else 0
    __SIM_UNINIT_READ = 12,  // __SimCheck::tg_reads: tg_* fields, elem, as TG_OOB
    __SIM_UNINIT_OUTPUT_READ = 13,  // __SimCheck::output_reads: buf, elem, as OOB
    __SIM_RACE = 14,         // __SimCheck::device_races: buf, elem, addr, is_write, as OOB
};

struct __SimResult {
    int64_t kind;
    int64_t sig;
    int64_t buf;          // OOB: guard table entry index
    int64_t is_write;     // 1 write, 0 read, -1 unknown
    int64_t elem;         // OOB: element index (may be negative)
    int64_t line;         // divergence: barrier line the waiting threads are at
    int64_t line2;        // divergence: other barrier line, 0 when threads returned
    int64_t n_done;
    int64_t n_wait;
    int64_t odd_thread;   // divergence: linear index of a thread that differs
    int64_t group[3];
    int64_t thread[3];    // position in threadgroup of the faulting thread
    uint64_t addr;
    int64_t aux;
    int64_t cpu_ns;       // CPU time of this thread spent running the kernel's threads
    int64_t code;         // si_code of the signal
    uint64_t tg_name;     // TG_OOB: the array's name and type (C strings)
    uint64_t tg_decl;
    int64_t tg_nelem;     // TG_OOB: elements of tg_esize bytes
    int64_t tg_esize;
    int64_t after;        // TG_OOB: 1 when found in the slack after the launch (no thread known)
    int64_t near_kind;    // CRASH at an address in no guard: 1 buffer `buf`, 2 threadgroup
    int64_t near_dist;    //   array tg_*, nearest to it (bytes away); elem is relative to it
    int64_t model_ps;     // the simulator's clock: cpu_ns as the modeled GPU's makespan
                          // (below), in picoseconds: a parallel launch can take a few ns
    // Reads the language leaves undefined that returned poison in this launch
    // (__sim_undefined_read), counted for every launch, a faulting one too:
    // their poison is the likeliest cause of a wrong result or of a fault
    // at a poisoned index, which only they can explain.
    int64_t ub_count;
    int64_t ub_why;       // the first one's __SIM_UB_* reason
    int64_t ub_lane;      //   the lane it read (as the kernel named it for INVALID_LANE)
    int64_t ub_aux;       //   ABSENT: threads in the simdgroup; INVALID_LANE: the lanes
                          //   the operation has (32, or 4 for quad_*); OUTSIDE_MASK: the mask
    int64_t ub_group[3];  //   the reading thread's group and its position in it
    int64_t ub_thread[3];
    char ub_op[32];       //   the operation's name ("simd_shuffle"), NUL-terminated
};

// Why a SIMD read is undefined (__SimResult::ub_why). A resolver passes
// __SIM_UB_INACTIVE for a source lane that is not at the call; the runtime,
// which knows every fiber, turns it into DIVERGED, RETURNED or ABSENT.
enum {
    __SIM_UB_INACTIVE = 0,
    __SIM_UB_DIVERGED = 1,      // its thread runs other code (another branch, a barrier)
    __SIM_UB_RETURNED = 2,      // its thread has finished (returned, or ran to its end)
    __SIM_UB_ABSENT = 3,        // no thread has that lane (a partial simdgroup)
    __SIM_UB_INVALID_LANE = 4,  // not a lane id of the operation at all
    __SIM_UB_OUTSIDE_MASK = 5,  // CUDA: a lane the call's mask does not name
};

// Per-thread coordinates handed to the glue, which turns them into the
// Metal/CUDA attributes the kernel asked for.
struct __SimThread {
    uint32_t lid[3];      // position in threadgroup
    uint32_t gid[3];      // threadgroup position in grid
    uint32_t tsz[3];      // actual size of this threadgroup (edge groups are smaller)
    uint32_t lin;         // linear index in threadgroup
    uint32_t nthr;        // threads in this threadgroup
};

struct __SimConst {
    uint32_t grid[3];
    uint32_t tg[3];
    uint32_t ngroups[3];
    uint32_t tgprod;
};

typedef void (*__SimThreadFn)(void* const* bufs, const __SimThread* t);
typedef void (*__SimFastFn)(const __SimLaunch* L);

// ---- runtime entry points (sim_runtime.cpp) ----
// Maps every record in [first, last) (once) and refills the arrays' slack.
extern "C" __SIM_HIDDEN void __sim_tg_register(__SimTgArray* first, __SimTgArray* last);
// Threadgroup bytes of the records (each rounded to 16, as the section's statics are).
extern "C" __SIM_HIDDEN int64_t __sim_tg_bytes(const __SimTgArray* first, const __SimTgArray* last);
// Poisons the group's memory before each threadgroup: the `sim_tgmem` statics
// [tgmem, tgmem + tgsize) and every mapped array (not their slack).
extern "C" __SIM_HIDDEN void __sim_tg_fill(char* tgmem, int64_t tgsize);
extern "C" __SIM_HIDDEN int64_t __sim_run(__SimLaunch* L, __SimResult* R,
                                           __SimThreadFn thread_fn, __SimFastFn fast_fn);
// Where the running thread is, for diagnostics: group xyz, thread xyz.
extern "C" __SIM_HIDDEN volatile int64_t __sim_progress[6];

// The simulator's clock (docs/simulator-time.md). The host runs a launch's
// threads one after another; a GPU runs its threadgroups side by side. The
// runtime reads a cycle counter around each threadgroup (begin after its
// memory is poisoned, end when its last thread returns) and charges the group
// its cycles divided by min(__SIM_LANES, its threads). The launch's modeled
// time (__SimResult::model_ps) is the makespan of __SIM_CORES virtual cores
// that share the charges evenly but cannot split a group: max(sum of the
// charges / __SIM_CORES, the largest charge), as the thread's CPU time (the
// launch's CPU time times the makespan's share of the groups' cycles).
// Constants, not the host's core count, so a score does not depend on the host.
#define __SIM_LANES 32
#define __SIM_CORES 32
extern "C" __SIM_HIDDEN void __sim_group_begin(void);
// The profiled variant's calls (profile.py rewrites the compiler's coverage
// calls into these): a basic block entered, a memory access made.
// `info` = site << 8 | is_store << 7 | log2(bytes).
extern "C" __SIM_HIDDEN void __sim_prof_block(uint32_t block);
extern "C" __SIM_HIDDEN void __sim_prof_access(const void* addr, uint32_t info);
extern "C" __SIM_HIDDEN void __sim_group_end(uint32_t nthreads);
// An atomic operation of the preludes, in the profiled variant only
// (compiled with __SIM_PROFILED): the loads and stores between begin and end
// are one atomic access to `addr`, which the race detector does not count as
// racing and which the lock-step schedule never splits (it switches lanes at
// begin, not inside). The preludes implement atomics as plain loads and
// stores, which the hooks could not tell from a kernel's own.
extern "C" __SIM_HIDDEN void __sim_prof_atomic_begin(const void* addr);
extern "C" __SIM_HIDDEN void __sim_prof_atomic_end(void);
// A dialect's own pointer to the running thread's coordinates (CUDA's
// __sim_cu_t, which its glue sets at each thread's start and its barriers
// restore): the lock-step schedule switches lanes inside the hooks, where no
// dialect code runs, so the runtime repoints it when a lane resumes there.
// Called by the glue at each thread's start, in the profiled variant only.
extern "C" __SIM_HIDDEN void __sim_prof_thread_slot(const void** slot);
#if defined(__SIM_PROFILED)
#define __SIM_THREAD_SLOT(SLOT) __sim_prof_thread_slot((const void**)(SLOT))
#else
#define __SIM_THREAD_SLOT(SLOT) ((void)0)
#endif
#if defined(__SIM_PROFILED)
struct __SimAtomicScope {
    explicit __SimAtomicScope(const void* addr) { __sim_prof_atomic_begin(addr); }
    ~__SimAtomicScope() { __sim_prof_atomic_end(); }
};
#define __SIM_ATOMIC_SCOPE(ADDR) __SimAtomicScope __sim_atomic_scope((const void*)(ADDR))
#else
#define __SIM_ATOMIC_SCOPE(ADDR) ((void)0)
#endif

// SIMD-group collectives. Each lane blocks with its operand; when every lane of
// the simdgroup that will reach this call site has arrived, the runtime calls
// `resolve` once with all of them (io[lane] == 0 for inactive lanes).
struct __SimLaneIO {
    const void* in;
    void* out;
    int64_t arg;
    int64_t arg2;
};
typedef void (*__SimResolver)(__SimLaneIO* const* io, uint32_t mask);
extern "C" __SIM_HIDDEN void __sim_simd_wait(const void* site, __SimResolver resolve,
                                             const void* in, void* out, int64_t arg, int64_t arg2);
// The same, but the rendezvous waits until every lane in `need` that has not
// returned has arrived (CUDA's *_sync masks); Metal passes no mask.
extern "C" __SIM_HIDDEN void __sim_simd_wait_need(const void* site, __SimResolver resolve,
                                                  const void* in, void* out, int64_t arg, int64_t arg2,
                                                  uint32_t need);
extern "C" __SIM_HIDDEN void __sim_tg_barrier_wait(int64_t line);
// Called by a resolver for each lane whose result it poisons (a read the
// language leaves undefined): `lane` the reading lane (0..31) of the
// simdgroup being resolved, `src` the lane it read, `why` a __SIM_UB_*
// reason, `aux` as __SimResult::ub_aux (the runtime fills ABSENT's itself).
// Only the poison path calls it: a correct kernel pays nothing.
extern "C" __SIM_HIDDEN void __sim_undefined_read(const char* op, uint32_t lane, int64_t src,
                                                  int64_t why, int64_t aux);
// A vector access through `p`, which is not `align`-aligned: ends the launch
// with __SIM_MISALIGNED (is_write: 1, 0, or -1 unknown).
extern "C" __SIM_HIDDEN [[noreturn]] void __sim_misaligned(const void* p, int64_t align, int64_t is_write);
extern "C" __SIM_HIDDEN uint32_t __sim_current_lane(void);

// ---- the fiber-free fast path, inlined into the kernel library ----
static __SimConst __sim_c;

static inline void __sim_setup_const(const __SimLaunch* L) {
    for (int d = 0; d < 3; ++d) {
        __sim_c.grid[d] = (uint32_t)L->grid[d];
        __sim_c.tg[d] = (uint32_t)L->tg[d];
        __sim_c.ngroups[d] = (uint32_t)L->ngroups[d];
    }
    __sim_c.tgprod = __sim_c.tg[0] * __sim_c.tg[1] * __sim_c.tg[2];
}

template <__SimThreadFn F>
static void __sim_fast_loop(const __SimLaunch* L) {
    void* const* bufs = L->bufs;
    char* tgmem = L->tgmem;
    const int64_t tgsize = L->tgmem_size;
    __SimThread t;
    for (uint32_t gz = 0; gz < __sim_c.ngroups[2]; ++gz)
    for (uint32_t gy = 0; gy < __sim_c.ngroups[1]; ++gy)
    for (uint32_t gx = 0; gx < __sim_c.ngroups[0]; ++gx) {
        t.gid[0] = gx; t.gid[1] = gy; t.gid[2] = gz;
        for (int d = 0; d < 3; ++d) {
            uint32_t rest = __sim_c.grid[d] - t.gid[d] * __sim_c.tg[d];
            t.tsz[d] = rest < __sim_c.tg[d] ? rest : __sim_c.tg[d];
        }
        t.nthr = t.tsz[0] * t.tsz[1] * t.tsz[2];
        __sim_progress[0] = gx; __sim_progress[1] = gy; __sim_progress[2] = gz;
        __sim_tg_fill(tgmem, tgsize);
        __sim_group_begin();
        uint32_t lin = 0;
        for (uint32_t z = 0; z < t.tsz[2]; ++z)
        for (uint32_t y = 0; y < t.tsz[1]; ++y)
        for (uint32_t x = 0; x < t.tsz[0]; ++x, ++lin) {
            t.lid[0] = x; t.lid[1] = y; t.lid[2] = z; t.lin = lin;
            __sim_progress[3] = x; __sim_progress[4] = y; __sim_progress[5] = z;
            F(bufs, &t);
        }
        __sim_group_end(t.nthr);
    }
}

// Binding a void* to the kernel's parameter type, whatever it is
// (`const device T*`, `const constant T&`, `device atomic<T>*`).
template <int I, class... P> struct __sim_nth;
template <class H, class... P> struct __sim_nth<0, H, P...> { typedef H type; };
template <int I, class H, class... P> struct __sim_nth<I, H, P...> {
    typedef typename __sim_nth<I - 1, P...>::type type;
};
template <class F> struct __sim_fn;
template <class R, class... P> struct __sim_fn<R (*)(P...)> {
    template <int I> using arg = typename __sim_nth<I, P...>::type;
};
template <class P> struct __sim_bind { static P get(void* p) { return *(P*)p; } };
template <class T> struct __sim_bind<T*> { static T* get(void* p) { return (T*)p; } };
template <class T> struct __sim_bind<T&> { static T& get(void* p) { return *(T*)p; } };

// What CUDA's clock64() counts on the simulator: calls within one launch. It
// starts again at every launch, so a kernel cannot count launches with it
// (tell a timed run from a check by how many came before).
static long long __sim_launch_clock;

#define __SIM_DEFINE_ENTRY(THREAD_FN)                                              \
    __SIM_EXPORT int64_t __sim_entry(__SimLaunch* L, __SimResult* R) {             \
        __sim_launch_clock = 0;                                                    \
        L->tgmem = __start_sim_tgmem;                                              \
        L->tgmem_size = (int64_t)(__stop_sim_tgmem - __start_sim_tgmem);           \
        __sim_tg_register(__start_sim_tgarrays, __stop_sim_tgarrays);              \
        __sim_setup_const(L);                                                      \
        return __sim_run(L, R, &THREAD_FN, &__sim_fast_loop<&THREAD_FN>);          \
    }                                                                              \
    __SIM_EXPORT int64_t __sim_tgmem_bytes(void) {                                 \
        return (int64_t)(__stop_sim_tgmem - __start_sim_tgmem) +                   \
               __sim_tg_bytes(__start_sim_tgarrays, __stop_sim_tgarrays);          \
    }

#endif
