// mlxsci CPU simulator: the CUDA language for kernels of mx.fast.cuda_kernel.
// Included after sim_runtime.h and before MLX's generated text, whose
// `#include "mlx/backend/cuda/device/utils.cuh"` and `<cooperative_groups.h>`
// resolve to the stubs under runtime/include/.
//
// Execution model: one simulated GPU thread at a time (fibers switch only
// inside __syncthreads and the warp functions), so plain read-modify-writes
// are atomic. The glue sets __sim_cu_t to the running thread's coordinates
// before calling the kernel; every call that can switch fibers restores it.
#ifndef MLXSCI_SIM_CUDA_PRELUDE_H
#define MLXSCI_SIM_CUDA_PRELUDE_H

#include "sim_runtime.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <climits>
#include <cfloat>
#include <limits>
#include <algorithm>
#include <array>
#include <tuple>
#include <utility>
#include <type_traits>
#include <new>

// ---- qualifiers --------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __grid_constant__
// Device code can only read constant memory (NVCC refuses a write): const here,
// so the object is read-only data, not state a kernel could keep between launches.
#define __constant__ const
#define __managed__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __CUDACC__ 1
#define __NVCC__ 1
#define __CUDACC_RTC__ 1
#define __CUDA_ARCH__ 900
#define CUDART_VERSION 12080
// `__shared__` declarations are rewritten to __SIM_THREADGROUP (rewrite_cuda);
// this covers any the rewrite did not see (e.g. produced by a macro).
#define __shared__ __SIM_THREADGROUP

// libcu++: cuda::std is the host standard library here.
namespace cuda { namespace std = ::std; }

// ---- the running thread --------------------------------------------------------
static const __SimThread* __sim_cu_t;

#define __SIM_CU_ALWAYS inline __attribute__((always_inline))
#define __SIM_CU_COLLECTIVE __attribute__((noinline, convergent, used))
#define __SIM_CU_SITE __builtin_return_address(0)

static __SIM_CU_ALWAYS void __sim_cu_wait(const void* site, __SimResolver r, const void* in, void* out,
                                          int64_t a, int64_t a2, uint32_t need) {
    const __SimThread* self = __sim_cu_t;
    __sim_simd_wait_need(site, r, in, out, a, a2, need);
    __sim_cu_t = self;
}
static __SIM_CU_ALWAYS void __sim_cu_barrier(int64_t line) {
    const __SimThread* self = __sim_cu_t;
    __sim_tg_barrier_wait(line);
    __sim_cu_t = self;
}

// ---- vector types (plain structs, no arithmetic, as in CUDA) ---------------------
#define __SIM_CU_VEC(T, NAME, A2, A3, A4)                                                     \
    struct NAME##1 { T x; };                                                                 \
    struct __attribute__((aligned(A2))) NAME##2 { T x, y; };                                 \
    struct __attribute__((aligned(A3))) NAME##3 { T x, y, z; };                              \
    struct __attribute__((aligned(A4))) NAME##4 { T x, y, z, w; };                           \
    static __SIM_CU_ALWAYS NAME##1 make_##NAME##1(T x) { NAME##1 r; r.x = x; return r; }    \
    static __SIM_CU_ALWAYS NAME##2 make_##NAME##2(T x, T y) {                                 \
        NAME##2 r; r.x = x; r.y = y; return r; }                                             \
    static __SIM_CU_ALWAYS NAME##3 make_##NAME##3(T x, T y, T z) {                            \
        NAME##3 r; r.x = x; r.y = y; r.z = z; return r; }                                    \
    static __SIM_CU_ALWAYS NAME##4 make_##NAME##4(T x, T y, T z, T w) {                       \
        NAME##4 r; r.x = x; r.y = y; r.z = z; r.w = w; return r; }
__SIM_CU_VEC(signed char, char, 2, 1, 4)
__SIM_CU_VEC(unsigned char, uchar, 2, 1, 4)
__SIM_CU_VEC(short, short, 4, 2, 8)
__SIM_CU_VEC(unsigned short, ushort, 4, 2, 8)
__SIM_CU_VEC(int, int, 8, 4, 16)
__SIM_CU_VEC(unsigned int, uint, 8, 4, 16)
__SIM_CU_VEC(long, long, 16, 8, 16)
__SIM_CU_VEC(unsigned long, ulong, 16, 8, 16)
__SIM_CU_VEC(long long, longlong, 16, 8, 16)
__SIM_CU_VEC(unsigned long long, ulonglong, 16, 8, 16)
__SIM_CU_VEC(float, float, 8, 4, 16)
__SIM_CU_VEC(double, double, 16, 8, 16)
#undef __SIM_CU_VEC

// rewrite_cuda turns reinterpret_cast<float4*>(p) into __sim_cu_aligned<float4*>(p):
// a GPU faults ("misaligned address") on a vector access through a pointer not
// aligned to the vector, where the CPU copies the struct field by field and
// would not notice. One AND per cast.
template <class P> struct __sim_cu_pointee;
template <class T> struct __sim_cu_pointee<T*> { typedef T type; static constexpr int64_t write = -1; };
template <class T> struct __sim_cu_pointee<const T*> { typedef T type; static constexpr int64_t write = 0; };
template <class P, class S> static __SIM_CU_ALWAYS P __sim_cu_aligned(S p) {
    typedef __sim_cu_pointee<P> Q;
    const int64_t align = (int64_t)alignof(typename Q::type);
    if ((uintptr_t)p & (uintptr_t)(align - 1))
        __sim_misaligned((const void*)(uintptr_t)p, align, Q::write);
    return reinterpret_cast<P>(p);
}

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

// ---- built-in variables -------------------------------------------------------
static __SIM_CU_ALWAYS uint3 __sim_cu_thread_idx() {
    return uint3{__sim_cu_t->lid[0], __sim_cu_t->lid[1], __sim_cu_t->lid[2]};
}
static __SIM_CU_ALWAYS uint3 __sim_cu_block_idx() {
    return uint3{__sim_cu_t->gid[0], __sim_cu_t->gid[1], __sim_cu_t->gid[2]};
}
static __SIM_CU_ALWAYS dim3 __sim_cu_block_dim() { return dim3(__sim_c.tg[0], __sim_c.tg[1], __sim_c.tg[2]); }
static __SIM_CU_ALWAYS dim3 __sim_cu_grid_dim() {
    return dim3(__sim_c.ngroups[0], __sim_c.ngroups[1], __sim_c.ngroups[2]);
}
#define threadIdx (::__sim_cu_thread_idx())
#define blockIdx (::__sim_cu_block_idx())
#define blockDim (::__sim_cu_block_dim())
#define gridDim (::__sim_cu_grid_dim())
static constexpr int warpSize = 32;

// ---- half and bfloat16 --------------------------------------------------------
typedef _Float16 __half;
typedef __bf16 __nv_bfloat16;
typedef _Float16 half;
struct __attribute__((aligned(4))) __half2 { __half x, y; };
struct __attribute__((aligned(4))) __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __half2 half2;
typedef unsigned short __half_raw_bits;

static __SIM_CU_ALWAYS __half __float2half(float f) { return (__half)f; }
static __SIM_CU_ALWAYS __half __float2half_rn(float f) { return (__half)f; }
static __SIM_CU_ALWAYS float __half2float(__half h) { return (float)h; }
static __SIM_CU_ALWAYS __half __int2half_rn(int i) { return (__half)(float)i; }
static __SIM_CU_ALWAYS int __half2int_rz(__half h) { return (int)(float)h; }
static __SIM_CU_ALWAYS __half __ushort_as_half(unsigned short u) { return __builtin_bit_cast(__half, u); }
static __SIM_CU_ALWAYS unsigned short __half_as_ushort(__half h) { return __builtin_bit_cast(unsigned short, h); }
static __SIM_CU_ALWAYS __half __hadd(__half a, __half b) { return a + b; }
static __SIM_CU_ALWAYS __half __hsub(__half a, __half b) { return a - b; }
static __SIM_CU_ALWAYS __half __hmul(__half a, __half b) { return a * b; }
static __SIM_CU_ALWAYS __half __hdiv(__half a, __half b) { return a / b; }
static __SIM_CU_ALWAYS __half __hneg(__half a) { return -a; }
static __SIM_CU_ALWAYS __half __habs(__half a) { return a < (__half)0 ? -a : a; }
static __SIM_CU_ALWAYS __half __hfma(__half a, __half b, __half c) { return (__half)fmaf((float)a, (float)b, (float)c); }
static __SIM_CU_ALWAYS __half __hmax(__half a, __half b) { return a < b ? b : a; }
static __SIM_CU_ALWAYS __half __hmin(__half a, __half b) { return b < a ? b : a; }
static __SIM_CU_ALWAYS bool __hlt(__half a, __half b) { return a < b; }
static __SIM_CU_ALWAYS bool __hgt(__half a, __half b) { return a > b; }
static __SIM_CU_ALWAYS bool __heq(__half a, __half b) { return a == b; }
static __SIM_CU_ALWAYS bool __hisnan(__half a) { return a != a; }
static __SIM_CU_ALWAYS __half hexp(__half a) { return (__half)expf((float)a); }
static __SIM_CU_ALWAYS __half hlog(__half a) { return (__half)logf((float)a); }
static __SIM_CU_ALWAYS __half hsqrt(__half a) { return (__half)sqrtf((float)a); }
static __SIM_CU_ALWAYS __half hrsqrt(__half a) { return (__half)(1.0f / sqrtf((float)a)); }
static __SIM_CU_ALWAYS __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }
static __SIM_CU_ALWAYS __half2 __floats2half2_rn(float a, float b) { return __half2{(__half)a, (__half)b}; }
static __SIM_CU_ALWAYS __half2 __float2half2_rn(float a) { return __half2{(__half)a, (__half)a}; }
static __SIM_CU_ALWAYS float2 __half22float2(__half2 h) { return float2{(float)h.x, (float)h.y}; }
static __SIM_CU_ALWAYS __half __low2half(__half2 h) { return h.x; }
static __SIM_CU_ALWAYS __half __high2half(__half2 h) { return h.y; }
static __SIM_CU_ALWAYS float __low2float(__half2 h) { return (float)h.x; }
static __SIM_CU_ALWAYS float __high2float(__half2 h) { return (float)h.y; }
static __SIM_CU_ALWAYS __half2 __hadd2(__half2 a, __half2 b) { return __half2{a.x + b.x, a.y + b.y}; }
static __SIM_CU_ALWAYS __half2 __hmul2(__half2 a, __half2 b) { return __half2{a.x * b.x, a.y * b.y}; }
static __SIM_CU_ALWAYS __nv_bfloat16 __float2bfloat16(float f) { return (__nv_bfloat16)f; }
static __SIM_CU_ALWAYS __nv_bfloat16 __float2bfloat16_rn(float f) { return (__nv_bfloat16)f; }
static __SIM_CU_ALWAYS float __bfloat162float(__nv_bfloat16 b) { return (float)b; }

// ---- math ---------------------------------------------------------------------
// The C math library (sqrtf, expf, sinf, fminf, powf, ...) comes from <math.h>.
// Intrinsics: the simulator computes them at full precision.
static __SIM_CU_ALWAYS float __sim_cu_rsqrtf(float x) { return 1.0f / sqrtf(x); }
static __SIM_CU_ALWAYS double __sim_cu_rsqrt(double x) { return 1.0 / ::sqrt(x); }
static __SIM_CU_ALWAYS float __sim_cu_rcbrtf(float x) { return 1.0f / cbrtf(x); }
static __SIM_CU_ALWAYS float __sim_cu___expf(float x) { return expf(x); }
static __SIM_CU_ALWAYS float __sim_cu___exp10f(float x) { return powf(10.0f, x); }
static __SIM_CU_ALWAYS float __sim_cu___logf(float x) { return logf(x); }
static __SIM_CU_ALWAYS float __sim_cu___log2f(float x) { return log2f(x); }
static __SIM_CU_ALWAYS float __sim_cu___log10f(float x) { return log10f(x); }
static __SIM_CU_ALWAYS float __sim_cu___sinf(float x) { return sinf(x); }
static __SIM_CU_ALWAYS float __sim_cu___cosf(float x) { return cosf(x); }
static __SIM_CU_ALWAYS float __sim_cu___tanf(float x) { return tanf(x); }
static __SIM_CU_ALWAYS void __sim_cu___sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
static __SIM_CU_ALWAYS void __sim_cu_sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
static __SIM_CU_ALWAYS void __sim_cu_sincos(double x, double* s, double* c) { *s = ::sin(x); *c = ::cos(x); }
#define sincosf __sim_cu_sincosf
// CUDA-only names glibc's <math.h> may also declare: routed to our own.
#define rsqrtf __sim_cu_rsqrtf
#define rsqrt __sim_cu_rsqrt
#define rcbrtf __sim_cu_rcbrtf
#define __expf __sim_cu___expf
#define __exp10f __sim_cu___exp10f
#define __logf __sim_cu___logf
#define __log2f __sim_cu___log2f
#define __log10f __sim_cu___log10f
#define __sinf __sim_cu___sinf
#define __cosf __sim_cu___cosf
#define __tanf __sim_cu___tanf
#define __sincosf __sim_cu___sincosf
#define sinpif __sim_cu_sinpif
#define cospif __sim_cu_cospif
#define __powf __sim_cu___powf
#define __fdividef __sim_cu___fdividef
#define fdividef __sim_cu_fdividef
#define sincos __sim_cu_sincos
static __SIM_CU_ALWAYS float __sim_cu_sinpif(float x) { return sinf(3.14159265358979323846f * x); }
static __SIM_CU_ALWAYS float __sim_cu_cospif(float x) { return cosf(3.14159265358979323846f * x); }
static __SIM_CU_ALWAYS float __sim_cu___powf(float x, float y) { return powf(x, y); }
static __SIM_CU_ALWAYS float __sim_cu___fdividef(float a, float b) { return a / b; }
static __SIM_CU_ALWAYS float __sim_cu_fdividef(float a, float b) { return a / b; }
static __SIM_CU_ALWAYS float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static __SIM_CU_ALWAYS float __fmaf_rz(float a, float b, float c) { return fmaf(a, b, c); }
static __SIM_CU_ALWAYS double __fma_rn(double a, double b, double c) { return ::fma(a, b, c); }
static __SIM_CU_ALWAYS float __fadd_rn(float a, float b) { return a + b; }
static __SIM_CU_ALWAYS float __fsub_rn(float a, float b) { return a - b; }
static __SIM_CU_ALWAYS float __fmul_rn(float a, float b) { return a * b; }
static __SIM_CU_ALWAYS float __fdiv_rn(float a, float b) { return a / b; }
static __SIM_CU_ALWAYS float __frcp_rn(float a) { return 1.0f / a; }
static __SIM_CU_ALWAYS float __fsqrt_rn(float a) { return sqrtf(a); }
static __SIM_CU_ALWAYS float __frsqrt_rn(float a) { return 1.0f / sqrtf(a); }
static __SIM_CU_ALWAYS double __dadd_rn(double a, double b) { return a + b; }
static __SIM_CU_ALWAYS double __dmul_rn(double a, double b) { return a * b; }
static __SIM_CU_ALWAYS float __saturatef(float x) { return x != x ? 0.0f : (x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x)); }
static __SIM_CU_ALWAYS float __int_as_float(int i) { return __builtin_bit_cast(float, i); }
static __SIM_CU_ALWAYS int __float_as_int(float f) { return __builtin_bit_cast(int, f); }
static __SIM_CU_ALWAYS float __uint_as_float(unsigned u) { return __builtin_bit_cast(float, u); }
static __SIM_CU_ALWAYS unsigned __float_as_uint(float f) { return __builtin_bit_cast(unsigned, f); }
static __SIM_CU_ALWAYS double __longlong_as_double(long long i) { return __builtin_bit_cast(double, i); }
static __SIM_CU_ALWAYS long long __double_as_longlong(double d) { return __builtin_bit_cast(long long, d); }
static __SIM_CU_ALWAYS int __float2int_rn(float f) { return (int)nearbyintf(f); }
static __SIM_CU_ALWAYS int __float2int_rz(float f) { return (int)f; }
static __SIM_CU_ALWAYS int __float2int_rd(float f) { return (int)floorf(f); }
static __SIM_CU_ALWAYS int __float2int_ru(float f) { return (int)ceilf(f); }
static __SIM_CU_ALWAYS unsigned __float2uint_rn(float f) { return (unsigned)nearbyintf(f); }
static __SIM_CU_ALWAYS unsigned __float2uint_rz(float f) { return (unsigned)f; }
static __SIM_CU_ALWAYS float __int2float_rn(int i) { return (float)i; }
static __SIM_CU_ALWAYS float __uint2float_rn(unsigned i) { return (float)i; }

// min/max: CUDA overloads for every arithmetic pair, usual conversions.
template <class A, class B, class = typename std::enable_if<std::is_arithmetic<A>::value &&
                                                              std::is_arithmetic<B>::value>::type>
static __SIM_CU_ALWAYS typename std::common_type<A, B>::type min(A a, B b) {
    typedef typename std::common_type<A, B>::type R;
    return (R)b < (R)a ? (R)b : (R)a;
}
template <class A, class B, class = typename std::enable_if<std::is_arithmetic<A>::value &&
                                                              std::is_arithmetic<B>::value>::type>
static __SIM_CU_ALWAYS typename std::common_type<A, B>::type max(A a, B b) {
    typedef typename std::common_type<A, B>::type R;
    return (R)a < (R)b ? (R)b : (R)a;
}
static __SIM_CU_ALWAYS __half min(__half a, __half b) { return b < a ? b : a; }
static __SIM_CU_ALWAYS __half max(__half a, __half b) { return a < b ? b : a; }
static __SIM_CU_ALWAYS long long llmin(long long a, long long b) { return a < b ? a : b; }
static __SIM_CU_ALWAYS long long llmax(long long a, long long b) { return a < b ? b : a; }
static __SIM_CU_ALWAYS unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
static __SIM_CU_ALWAYS unsigned umax(unsigned a, unsigned b) { return a < b ? b : a; }

// integer intrinsics
static __SIM_CU_ALWAYS int __popc(unsigned x) { return __builtin_popcount(x); }
static __SIM_CU_ALWAYS int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static __SIM_CU_ALWAYS int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static __SIM_CU_ALWAYS int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static __SIM_CU_ALWAYS int __ffs(int x) { return __builtin_ffs(x); }
static __SIM_CU_ALWAYS int __ffsll(long long x) { return __builtin_ffsll(x); }
static __SIM_CU_ALWAYS unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    return __builtin_bswap32(x);
}
static __SIM_CU_ALWAYS unsigned long long __brevll(unsigned long long x) {
    return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
static __SIM_CU_ALWAYS int __mul24(int a, int b) { return (int)((long long)((a << 8) >> 8) * ((b << 8) >> 8)); }
static __SIM_CU_ALWAYS unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
static __SIM_CU_ALWAYS int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static __SIM_CU_ALWAYS unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static __SIM_CU_ALWAYS long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
static __SIM_CU_ALWAYS unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static __SIM_CU_ALWAYS unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)((v << (s & 31)) >> 32);
}
static __SIM_CU_ALWAYS unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)(v >> (s & 31));
}

// memory-system intrinsics: one thread at a time, so no-ops or plain loads
template <class T> static __SIM_CU_ALWAYS T __ldg(const T* p) { return *p; }
template <class T> static __SIM_CU_ALWAYS T __ldcg(const T* p) { return *p; }
template <class T> static __SIM_CU_ALWAYS T __ldca(const T* p) { return *p; }
template <class T> static __SIM_CU_ALWAYS T __ldcs(const T* p) { return *p; }
template <class T> static __SIM_CU_ALWAYS T __ldlu(const T* p) { return *p; }
template <class T> static __SIM_CU_ALWAYS void __stcg(T* p, T v) { *p = v; }
template <class T> static __SIM_CU_ALWAYS void __stcs(T* p, T v) { *p = v; }
template <class T> static __SIM_CU_ALWAYS void __stwt(T* p, T v) { *p = v; }
static __SIM_CU_ALWAYS void __threadfence() {}
static __SIM_CU_ALWAYS void __threadfence_block() {}
static __SIM_CU_ALWAYS void __threadfence_system() {}
static __SIM_CU_ALWAYS void __nanosleep(unsigned) {}
static __SIM_CU_ALWAYS long long clock64() { return ++__sim_launch_clock; }
static __SIM_CU_ALWAYS long long __sim_cu_clock32() { return ++__sim_launch_clock; }
#define clock() ((int)::__sim_cu_clock32())
static __SIM_CU_ALWAYS void __trap() { __builtin_trap(); }
static __SIM_CU_ALWAYS void __brkpt() { __builtin_trap(); }
#define __assume(x) ((void)0)
#define __builtin_assume_aligned_cuda(p, n) (p)

// ---- atomics ----------------------------------------------------------------
// sim_runtime.h defines __SIM_ATOMIC_SCOPE for a kernel's TU; a program that
// includes this prelude alone (its tests) marks nothing.
#ifndef __SIM_ATOMIC_SCOPE
#define __SIM_ATOMIC_SCOPE(ADDR) ((void)0)
#endif
// Fibers never switch inside a read-modify-write, so plain RMWs are atomic.
// __SIM_ATOMIC_SCOPE tells the profiled variant's hooks that they are
// (sim_runtime.h): the race detector and the lock-step schedule need to know.
#define __SIM_CU_ATOMIC(NAME, EXPR)                                                           \
    template <class T, class U> static __SIM_CU_ALWAYS T NAME(T* addr, U val) {               \
        __SIM_ATOMIC_SCOPE(addr);                                                              \
        T old = *addr;                                                                         \
        T b = (T)val;                                                                          \
        *addr = (T)(EXPR);                                                                     \
        return old;                                                                            \
    }                                                                                          \
    template <class T, class U> static __SIM_CU_ALWAYS T NAME##_block(T* addr, U val) {        \
        return NAME(addr, val);                                                                \
    }                                                                                          \
    template <class T, class U> static __SIM_CU_ALWAYS T NAME##_system(T* addr, U val) {       \
        return NAME(addr, val);                                                                \
    }
__SIM_CU_ATOMIC(atomicAdd, old + b)
__SIM_CU_ATOMIC(atomicSub, old - b)
__SIM_CU_ATOMIC(atomicExch, b)
__SIM_CU_ATOMIC(atomicMax, old < b ? b : old)
__SIM_CU_ATOMIC(atomicMin, b < old ? b : old)
__SIM_CU_ATOMIC(atomicAnd, old & b)
__SIM_CU_ATOMIC(atomicOr, old | b)
__SIM_CU_ATOMIC(atomicXor, old ^ b)
#undef __SIM_CU_ATOMIC
template <class T, class U, class V> static __SIM_CU_ALWAYS T atomicCAS(T* addr, U compare, V val) {
    __SIM_ATOMIC_SCOPE(addr);
    T old = *addr;
    if (old == (T)compare) *addr = (T)val;
    return old;
}
template <class T, class U, class V> static __SIM_CU_ALWAYS T atomicCAS_block(T* a, U c, V v) { return atomicCAS(a, c, v); }
template <class T, class U, class V> static __SIM_CU_ALWAYS T atomicCAS_system(T* a, U c, V v) { return atomicCAS(a, c, v); }
static __SIM_CU_ALWAYS unsigned atomicInc(unsigned* addr, unsigned val) {
    __SIM_ATOMIC_SCOPE(addr);
    unsigned old = *addr;
    *addr = old >= val ? 0u : old + 1u;
    return old;
}
static __SIM_CU_ALWAYS unsigned atomicDec(unsigned* addr, unsigned val) {
    __SIM_ATOMIC_SCOPE(addr);
    unsigned old = *addr;
    *addr = (old == 0u || old > val) ? val : old - 1u;
    return old;
}

// ---- __syncthreads and friends ---------------------------------------------------
// __builtin_LINE() as a default argument is the caller's line (after #line),
// for barrier-divergence diagnostics.
static __SIM_CU_ALWAYS void __syncthreads(int line = __builtin_LINE()) { __sim_cu_barrier(line); }
static int __sim_cu_sync_acc;
static __SIM_CU_ALWAYS int __sim_cu_sync_reduce(int pred, int kind, int line) {
    if (__sim_cu_t->lin == 0) __sim_cu_sync_acc = kind == 1 ? 1 : 0;
    __sim_cu_barrier(line);
    if (kind == 0) __sim_cu_sync_acc += pred != 0;
    else if (kind == 1) __sim_cu_sync_acc &= pred != 0;
    else __sim_cu_sync_acc |= pred != 0;
    __sim_cu_barrier(line);
    const int r = __sim_cu_sync_acc;
    __sim_cu_barrier(line);
    return r;
}
static __SIM_CU_ALWAYS int __syncthreads_count(int pred, int line = __builtin_LINE()) {
    return __sim_cu_sync_reduce(pred, 0, line);
}
static __SIM_CU_ALWAYS int __syncthreads_and(int pred, int line = __builtin_LINE()) {
    return __sim_cu_sync_reduce(pred, 1, line);
}
static __SIM_CU_ALWAYS int __syncthreads_or(int pred, int line = __builtin_LINE()) {
    return __sim_cu_sync_reduce(pred, 2, line);
}

// ---- warp functions on the runtime's SIMD rendezvous ----------------------------
// Lanes are linear thread indices mod 32 (x fastest), as in CUDA. A lane that
// reaches a different call site (or has returned, or lies past the end of a
// partial last warp) is not executing the call.
//
// Which reads are defined (CUDA C++ Programming Guide, "Warp Shuffle
// Functions"): "Threads may only read data from another thread which is
// actively participating in the __shfl_sync() command. If the target thread is
// inactive, the retrieved value is undefined"; `mask` names the participating
// threads. Defined without reading another lane: __shfl_sync wraps srcLane
// modulo width; __shfl_up_sync leaves the lower `delta` lanes of each width
// segment unchanged, __shfl_down_sync the upper `delta` lanes; __shfl_xor_sync
// returns the caller's own value when the source lies in a later segment. A
// source lane outside the caller's mask or not executing the call reads
// poison (__SIM_POISON_BYTE): NaN for floats, all ones for integers.
enum { __SIM_CU_IDX, __SIM_CU_UP, __SIM_CU_DOWN, __SIM_CU_XOR };

// The source lane (0..31) of lane `l`, or -1 where the guide defines the
// result as the caller's own value.
template <int Kind>
static int64_t __sim_cu_shfl_source(int64_t l, int64_t a, int64_t w) {
    const int64_t base = l / w * w, li = l - base;
    switch (Kind) {
        case __SIM_CU_IDX: return base + ((a % w) + w) % w;
        case __SIM_CU_UP: return li - a >= 0 ? l - a : -1;
        case __SIM_CU_DOWN: return li + a < w ? l + a : -1;
        case __SIM_CU_XOR: {
            const int64_t src = l ^ a;
            return src / w > l / w ? -1 : src;
        }
    }
    return -1;
}

// arg = the lane operand; arg2 = width in the low 32 bits, the caller's mask in
// the high 32 bits.
// Name::get() is the function's name, for the runtime's account of a read it
// poisons (__sim_undefined_read).
template <class T, int Kind, class Name>
static void __sim_cu_r_shfl(__SimLaneIO* const* io, uint32_t mask) {
    for (int l = 0; l < 32; ++l) {
        if (!(mask & (1u << l))) continue;
        int64_t w = (int32_t)(uint32_t)io[l]->arg2;
        if (w <= 0 || w > 32) w = 32;
        const uint32_t named = (uint32_t)((uint64_t)io[l]->arg2 >> 32);
        const uint32_t participants = mask & named;
        const int64_t src = __sim_cu_shfl_source<Kind>(l, io[l]->arg, w);
        T* out = (T*)io[l]->out;
        if (src < 0) {
            *out = *(const T*)io[l]->in;
        } else if (src < 32 && (participants & (1u << src))) {
            *out = *(const T*)io[src]->in;
        } else {
            __builtin_memset((void*)out, __SIM_POISON_BYTE, sizeof(T));
            // The guide's first rule is the mask; a lane it names that is not
            // here is inactive (the runtime tells diverged, returned, absent).
            const bool in_mask = src < 32 && (named & (1u << src));
            __sim_undefined_read(Name::get(), (uint32_t)l, src,
                                 in_mask ? __SIM_UB_INACTIVE : __SIM_UB_OUTSIDE_MASK,
                                 in_mask ? 0 : (int64_t)named);
        }
    }
}
#define __SIM_CU_SHFL(NAME, KIND, ARGT)                                                       \
    struct __sim_name_##NAME { static const char* get() { return #NAME; } };                  \
    template <class T> __SIM_CU_COLLECTIVE T NAME(unsigned mask, T var, ARGT a, int width = 32) { \
        T out = var;                                                                           \
        const int64_t width_and_mask = (int64_t)(((uint64_t)mask << 32) | (uint32_t)width);    \
        __sim_cu_wait(__SIM_CU_SITE, &__sim_cu_r_shfl<T, KIND, __sim_name_##NAME>, &var, &out, \
                      (int64_t)a, width_and_mask, mask);                                       \
        return out;                                                                            \
    }
__SIM_CU_SHFL(__shfl_sync, __SIM_CU_IDX, int)
__SIM_CU_SHFL(__shfl_up_sync, __SIM_CU_UP, unsigned)
__SIM_CU_SHFL(__shfl_down_sync, __SIM_CU_DOWN, unsigned)
__SIM_CU_SHFL(__shfl_xor_sync, __SIM_CU_XOR, int)
#undef __SIM_CU_SHFL

enum { __SIM_CU_BALLOT, __SIM_CU_ANY, __SIM_CU_ALL, __SIM_CU_ACTIVE, __SIM_CU_MATCH_ANY,
       __SIM_CU_RADD, __SIM_CU_RMIN, __SIM_CU_RMAX, __SIM_CU_RAND, __SIM_CU_ROR, __SIM_CU_RXOR };
// in: a uint64_t operand (predicate or value), out: uint64_t result.
template <int Kind, bool Signed>
static void __sim_cu_r_vote(__SimLaneIO* const* io, uint32_t mask) {
    uint32_t bits = 0;
    int64_t acc = 0;
    bool have = false;
    for (int l = 0; l < 32; ++l) {
        if (!(mask & (1u << l))) continue;
        const uint64_t raw = io[l]->in ? *(const uint64_t*)io[l]->in : 0;
        const int64_t v = Signed ? (int64_t)(int32_t)(uint32_t)raw : (int64_t)(uint32_t)raw;
        if (raw) bits |= 1u << l;
        if (!have) { acc = v; have = true; continue; }
        switch (Kind) {
            case __SIM_CU_RADD: acc += v; break;
            case __SIM_CU_RMIN: acc = v < acc ? v : acc; break;
            case __SIM_CU_RMAX: acc = v > acc ? v : acc; break;
            case __SIM_CU_RAND: acc &= v; break;
            case __SIM_CU_ROR: acc |= v; break;
            case __SIM_CU_RXOR: acc ^= v; break;
        }
    }
    for (int l = 0; l < 32; ++l) {
        if (!(mask & (1u << l))) continue;
        uint64_t* o = (uint64_t*)io[l]->out;
        switch (Kind) {
            case __SIM_CU_BALLOT: *o = bits; break;
            case __SIM_CU_ANY: *o = bits != 0; break;
            case __SIM_CU_ALL: *o = bits == mask; break;
            case __SIM_CU_ACTIVE: *o = mask; break;
            case __SIM_CU_MATCH_ANY: {
                uint32_t m = 0;
                for (int k = 0; k < 32; ++k)
                    if ((mask & (1u << k)) && *(const uint64_t*)io[k]->in == *(const uint64_t*)io[l]->in)
                        m |= 1u << k;
                *o = m;
                break;
            }
            default: *o = (uint64_t)acc; break;
        }
    }
}
template <int Kind, bool Signed = false>
static __SIM_CU_ALWAYS uint64_t __sim_cu_vote(const void* site, uint64_t v, uint32_t need) {
    uint64_t out = 0;
    __sim_cu_wait(site, &__sim_cu_r_vote<Kind, Signed>, &v, &out, 0, 0, need);
    return out;
}
__SIM_CU_COLLECTIVE static unsigned __ballot_sync(unsigned mask, int pred) {
    return (unsigned)__sim_cu_vote<__SIM_CU_BALLOT>(__SIM_CU_SITE, pred != 0, mask);
}
__SIM_CU_COLLECTIVE static int __any_sync(unsigned mask, int pred) {
    return (int)__sim_cu_vote<__SIM_CU_ANY>(__SIM_CU_SITE, pred != 0, mask);
}
__SIM_CU_COLLECTIVE static int __all_sync(unsigned mask, int pred) {
    return (int)__sim_cu_vote<__SIM_CU_ALL>(__SIM_CU_SITE, pred != 0, mask);
}
// The lanes that reach this call together (no waiting for others).
__SIM_CU_COLLECTIVE static unsigned __activemask() {
    return (unsigned)__sim_cu_vote<__SIM_CU_ACTIVE>(__SIM_CU_SITE, 1, 0u);
}
__SIM_CU_COLLECTIVE static void __syncwarp(unsigned mask = 0xffffffffu) {
    __sim_cu_vote<__SIM_CU_ACTIVE>(__SIM_CU_SITE, 1, mask);
}
template <class T> __SIM_CU_COLLECTIVE unsigned __match_any_sync(unsigned mask, T value) {
    uint64_t v = 0;
    memcpy(&v, &value, sizeof(T) < 8 ? sizeof(T) : 8);
    uint64_t out = 0;
    __sim_cu_wait(__SIM_CU_SITE, &__sim_cu_r_vote<__SIM_CU_MATCH_ANY, false>, &v, &out, 0, 0, mask);
    return (unsigned)out;
}
#define __SIM_CU_REDUCE(NAME, KIND)                                                           \
    __SIM_CU_COLLECTIVE static unsigned NAME(unsigned mask, unsigned v) {                     \
        return (unsigned)__sim_cu_vote<KIND, false>(__SIM_CU_SITE, v, mask);                 \
    }                                                                                          \
    __SIM_CU_COLLECTIVE static int NAME(unsigned mask, int v) {                               \
        return (int)__sim_cu_vote<KIND, true>(__SIM_CU_SITE, (uint32_t)v, mask);             \
    }
__SIM_CU_REDUCE(__reduce_add_sync, __SIM_CU_RADD)
__SIM_CU_REDUCE(__reduce_min_sync, __SIM_CU_RMIN)
__SIM_CU_REDUCE(__reduce_max_sync, __SIM_CU_RMAX)
#undef __SIM_CU_REDUCE
#define __SIM_CU_REDUCE_U(NAME, KIND)                                                         \
    __SIM_CU_COLLECTIVE static unsigned NAME(unsigned mask, unsigned v) {                     \
        return (unsigned)__sim_cu_vote<KIND, false>(__SIM_CU_SITE, v, mask);                 \
    }
__SIM_CU_REDUCE_U(__reduce_and_sync, __SIM_CU_RAND)
__SIM_CU_REDUCE_U(__reduce_or_sync, __SIM_CU_ROR)
__SIM_CU_REDUCE_U(__reduce_xor_sync, __SIM_CU_RXOR)
#undef __SIM_CU_REDUCE_U

static __SIM_CU_ALWAYS unsigned __sim_cu_lane() { return __sim_cu_t->lin % 32u; }

#endif
