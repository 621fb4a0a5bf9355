// mlxsci CPU simulator: Metal SIMD-group and quad-group functions and the
// barrier entry points. Included after sim_runtime.h and BEFORE the Metal
// language prelude, so that prelude code (e.g. MLX utils overloads of
// simd_shuffle_down for 64-bit types) can call these. Everything is a template
// over the operand type, so no Metal type needs to exist yet: scalars, clang
// ext_vector_type vectors (element-wise) and any trivially copyable type for
// the data-movement functions.
#ifndef MLXSCI_SIM_METAL_H
#define MLXSCI_SIM_METAL_H

#include "sim_runtime.h"

namespace metal {

// ---- element-wise helpers -------------------------------------------------
template <class T> struct __sim_vec { typedef T elem; static constexpr int N = 1; };
template <class E, int N_> struct __sim_vec<E __attribute__((ext_vector_type(N_)))> {
    typedef E elem; static constexpr int N = N_;
};

template <class E> static inline bool __sim_is_float() { return (E)0.5f != (E)0; }

template <class E> static inline E __sim_smax(E a, E b) {
    if (__sim_is_float<E>()) {
        if (a != a) return b;
        if (b != b) return a;
    }
    return a < b ? b : a;
}
template <class E> static inline E __sim_smin(E a, E b) {
    if (__sim_is_float<E>()) {
        if (a != a) return b;
        if (b != b) return a;
    }
    return b < a ? b : a;
}

struct __sim_op_add { template <class T> static T id() { return (T)0; }
                      template <class T> static T f(T a, T b) { return a + b; } };
struct __sim_op_mul { template <class T> static T id() { return (T)1; }
                      template <class T> static T f(T a, T b) { return a * b; } };
struct __sim_op_and { template <class T> static T f(T a, T b) { return a & b; } };
struct __sim_op_or  { template <class T> static T f(T a, T b) { return a | b; } };
struct __sim_op_xor { template <class T> static T f(T a, T b) { return a ^ b; } };
struct __sim_op_max {
    template <class T> static T f(T a, T b) {
        if constexpr (__sim_vec<T>::N == 1) {
            return __sim_smax(a, b);
        } else {
            T r = a;
            for (int i = 0; i < __sim_vec<T>::N; ++i) r[i] = __sim_smax(a[i], b[i]);
            return r;
        }
    }
};
struct __sim_op_min {
    template <class T> static T f(T a, T b) {
        if constexpr (__sim_vec<T>::N == 1) {
            return __sim_smin(a, b);
        } else {
            T r = a;
            for (int i = 0; i < __sim_vec<T>::N; ++i) r[i] = __sim_smin(a[i], b[i]);
            return r;
        }
    }
};

// ---- resolvers: run once per rendezvous with every active lane --------------
// W is the segment width: 32 for simd_*, 4 for quad_*.
//
// Which reads are defined (Metal Shading Language Specification 3.2, 6.9.2
// and 6.9.3): "A thread needs to only read data from another active thread in
// the SIMD-group", where an inactive thread is one not executing this call
// (diverged away, returned, or absent because the group is partial). The
// lane of simd_shuffle / simd_broadcast "needs to be a valid SIMD lane ID".
// The only own-value cases the specification defines are simd_shuffle_up's
// lower `delta` lanes and simd_shuffle_down's upper `delta` lanes ("doesn't
// modify ... because it doesn't wrap"). Every other source lane that is not
// an active lane of this rendezvous reads poison (__SIM_POISON_BYTE).
enum { __SIM_SH_IDX, __SIM_SH_XOR, __SIM_SH_UP, __SIM_SH_DOWN, __SIM_SH_ROT_UP,
       __SIM_SH_ROT_DOWN, __SIM_SH_FILL_UP, __SIM_SH_FILL_DOWN };

// Where lane `li` of its segment reads from.
struct __SimShuffleSource {
    int64_t lane;     // lane within the segment; outside [0, W) when none exists
    bool keep_own;    // defined no-op: the caller keeps its own data
    bool filling;     // the *_and_fill_* functions: read the source's `filling`
};

template <int Kind, int W>
static __SimShuffleSource __sim_shuffle_source(int64_t li, int64_t a, int64_t modulo) {
    __SimShuffleSource s = {-1, false, false};
    const int64_t m = modulo > 0 ? modulo : W;      // fill: vector width
    const int64_t seg = li / m * m, lj = li - seg;
    switch (Kind) {
        case __SIM_SH_IDX: s.lane = a; break;
        case __SIM_SH_XOR: s.lane = li ^ a; break;
        case __SIM_SH_UP: s.lane = li - a; s.keep_own = s.lane < 0; break;
        case __SIM_SH_DOWN: s.lane = li + a; s.keep_own = s.lane >= W; break;
        case __SIM_SH_ROT_UP: s.lane = ((li - a) % W + W) % W; break;
        case __SIM_SH_ROT_DOWN: s.lane = ((li + a) % W + W) % W; break;
        case __SIM_SH_FILL_UP:
            // lanes below delta take the top of `filling`
            s.filling = lj - a < 0;
            s.lane = seg + lj - a + (s.filling ? m : 0);
            break;
        case __SIM_SH_FILL_DOWN:
            // lanes at or above m - delta take the bottom of `filling`
            s.filling = lj + a >= m;
            s.lane = seg + lj + a - (s.filling ? m : 0);
            break;
    }
    return s;
}

template <class T> static inline void __sim_poison(T* out) {
    __builtin_memset((void*)out, __SIM_POISON_BYTE, sizeof(T));
}

// io[l]->in is T data, or T[2] {data, filling} for the *_and_fill_* functions.
// Name::get() is the function's name, for the runtime's account of a read
// it poisons (__sim_undefined_read): simd_shuffle and simd_broadcast share
// Kind and W but not a name.
template <class T, int Kind, int W, class Name>
static void __sim_r_shuffle(__SimLaneIO* const* io, uint32_t mask) {
    for (int l = 0; l < 32; ++l) {
        if (!(mask & (1u << l))) continue;
        const int base = l & ~(W - 1);
        const __SimShuffleSource s =
            __sim_shuffle_source<Kind, W>(l - base, io[l]->arg, io[l]->arg2);
        T* out = (T*)io[l]->out;
        if (s.keep_own) {
            *out = *(const T*)io[l]->in;
        } else if (s.lane >= 0 && s.lane < W && (mask & (1u << (base + s.lane)))) {
            *out = ((const T*)io[base + s.lane]->in)[s.filling ? 1 : 0];
        } else {
            __sim_poison(out);
            const bool valid = s.lane >= 0 && s.lane < W;
            __sim_undefined_read(Name::get(), (uint32_t)l, valid ? base + s.lane : s.lane,
                                 valid ? __SIM_UB_INACTIVE : __SIM_UB_INVALID_LANE, valid ? 0 : W);
        }
    }
}

template <class T, class Op, int W>
static void __sim_r_reduce(__SimLaneIO* const* io, uint32_t mask) {
    for (int base = 0; base < 32; base += W) {
        bool have = false;
        T acc{};
        for (int l = base; l < base + W; ++l) {
            if (!(mask & (1u << l))) continue;
            const T v = *(const T*)io[l]->in;
            acc = have ? Op::template f<T>(acc, v) : v;
            have = true;
        }
        for (int l = base; l < base + W; ++l)
            if (mask & (1u << l)) *(T*)io[l]->out = acc;
    }
}

template <class T, class Op, int W, bool Inclusive>
static void __sim_r_prefix(__SimLaneIO* const* io, uint32_t mask) {
    for (int base = 0; base < 32; base += W) {
        T acc = Op::template id<T>();
        for (int l = base; l < base + W; ++l) {
            if (!(mask & (1u << l))) continue;
            const T v = *(const T*)io[l]->in;
            if (Inclusive) {
                acc = Op::template f<T>(acc, v);
                *(T*)io[l]->out = acc;
            } else {
                *(T*)io[l]->out = acc;
                acc = Op::template f<T>(acc, v);
            }
        }
    }
}

template <class T, int W>
static void __sim_r_broadcast_first(__SimLaneIO* const* io, uint32_t mask) {
    for (int base = 0; base < 32; base += W) {
        int first = -1;
        for (int l = base; l < base + W; ++l)
            if (mask & (1u << l)) { first = l; break; }
        if (first < 0) continue;
        const T v = *(const T*)io[first]->in;
        for (int l = base; l < base + W; ++l)
            if (mask & (1u << l)) *(T*)io[l]->out = v;
    }
}

// Votes: in = bool*, out = uint64_t* (bits relative to the segment), arg2 unused.
enum { __SIM_V_BALLOT, __SIM_V_ANY, __SIM_V_ALL, __SIM_V_FIRST, __SIM_V_ACTIVE };
template <int Kind, int W>
static void __sim_r_vote(__SimLaneIO* const* io, uint32_t mask) {
    for (int base = 0; base < 32; base += W) {
        uint64_t bits = 0, active = 0;
        int first = -1;
        for (int l = base; l < base + W; ++l) {
            if (!(mask & (1u << l))) continue;
            active |= 1ull << (l - base);
            if (first < 0) first = l;
            if (io[l]->in && *(const bool*)io[l]->in) bits |= 1ull << (l - base);
        }
        for (int l = base; l < base + W; ++l) {
            if (!(mask & (1u << l))) continue;
            uint64_t* o = (uint64_t*)io[l]->out;
            switch (Kind) {
                case __SIM_V_BALLOT: o[0] = bits; o[1] = active; break;
                case __SIM_V_ANY: o[0] = bits != 0; break;
                case __SIM_V_ALL: o[0] = bits == active; break;
                case __SIM_V_FIRST: o[0] = l == first; break;
                case __SIM_V_ACTIVE: o[0] = active; o[1] = active; break;
            }
        }
    }
}

// ---- vote types ------------------------------------------------------------
struct simd_vote {
    typedef uint64_t vote_t;
    uint64_t v;
    uint64_t active;
    constexpr simd_vote() : v(0), active(0) {}
    constexpr explicit simd_vote(vote_t x) : v(x), active(~0ull) {}
    constexpr operator vote_t() const { return v; }
    constexpr bool all() const { return (v & active) == active; }
    constexpr bool any() const { return v != 0; }
};
struct quad_vote {
    typedef uint16_t vote_t;
    uint64_t v;
    uint64_t active;
    constexpr quad_vote() : v(0), active(0) {}
    constexpr explicit quad_vote(vote_t x) : v(x), active(0xf) {}
    constexpr operator vote_t() const { return (vote_t)v; }
    constexpr bool all() const { return (v & active) == active; }
    constexpr bool any() const { return v != 0; }
};

#define __SIM_COLLECTIVE __attribute__((noinline, convergent, used))
#define __SIM_SITE __builtin_return_address(0)

// ---- data movement ---------------------------------------------------------
// The name a resolver gives the runtime for a read it poisons.
#define __SIM_OP_NAME(NAME) \
    struct __sim_name_##NAME { static const char* get() { return #NAME; } };

#define __SIM_DEF_SHUFFLE(NAME, KIND, W, ARGT)                                        \
    __SIM_OP_NAME(NAME)                                                                 \
    template <class T> __SIM_COLLECTIVE T NAME(T data, ARGT a) {                        \
        T out = data;                                                                   \
        __sim_simd_wait(__SIM_SITE, &__sim_r_shuffle<T, KIND, W, __sim_name_##NAME>, &data, &out, \
                        (int64_t)a, 0);                                                 \
        return out;                                                                     \
    }
__SIM_DEF_SHUFFLE(simd_shuffle, __SIM_SH_IDX, 32, uint16_t)
__SIM_DEF_SHUFFLE(simd_shuffle_xor, __SIM_SH_XOR, 32, uint16_t)
__SIM_DEF_SHUFFLE(simd_shuffle_up, __SIM_SH_UP, 32, uint16_t)
__SIM_DEF_SHUFFLE(simd_shuffle_down, __SIM_SH_DOWN, 32, uint16_t)
__SIM_DEF_SHUFFLE(simd_shuffle_rotate_up, __SIM_SH_ROT_UP, 32, uint16_t)
__SIM_DEF_SHUFFLE(simd_shuffle_rotate_down, __SIM_SH_ROT_DOWN, 32, uint16_t)
__SIM_DEF_SHUFFLE(simd_broadcast, __SIM_SH_IDX, 32, uint16_t)
__SIM_DEF_SHUFFLE(quad_shuffle, __SIM_SH_IDX, 4, uint16_t)
__SIM_DEF_SHUFFLE(quad_shuffle_xor, __SIM_SH_XOR, 4, uint16_t)
__SIM_DEF_SHUFFLE(quad_shuffle_up, __SIM_SH_UP, 4, uint16_t)
__SIM_DEF_SHUFFLE(quad_shuffle_down, __SIM_SH_DOWN, 4, uint16_t)
__SIM_DEF_SHUFFLE(quad_shuffle_rotate_up, __SIM_SH_ROT_UP, 4, uint16_t)
__SIM_DEF_SHUFFLE(quad_shuffle_rotate_down, __SIM_SH_ROT_DOWN, 4, uint16_t)
__SIM_DEF_SHUFFLE(quad_broadcast, __SIM_SH_IDX, 4, uint16_t)
#undef __SIM_DEF_SHUFFLE

#define __SIM_DEF_FILL(NAME, KIND, W)                                                   \
    __SIM_OP_NAME(NAME)                                                                 \
    template <class T> __SIM_COLLECTIVE T NAME(T data, T filling, uint16_t delta) {     \
        T pair[2] = {data, filling};                                                    \
        T out = data;                                                                   \
        __sim_simd_wait(__SIM_SITE, &__sim_r_shuffle<T, KIND, W, __sim_name_##NAME>, pair, &out, \
                        (int64_t)delta, 0);                                             \
        return out;                                                                     \
    }                                                                                   \
    template <class T> __SIM_COLLECTIVE T NAME(T data, T filling, uint16_t delta,       \
                                               uint16_t modulo) {                      \
        T pair[2] = {data, filling};                                                    \
        T out = data;                                                                   \
        __sim_simd_wait(__SIM_SITE, &__sim_r_shuffle<T, KIND, W, __sim_name_##NAME>, pair, &out, \
                        (int64_t)delta, (int64_t)modulo);                               \
        return out;                                                                     \
    }
__SIM_DEF_FILL(simd_shuffle_and_fill_up, __SIM_SH_FILL_UP, 32)
__SIM_DEF_FILL(simd_shuffle_and_fill_down, __SIM_SH_FILL_DOWN, 32)
__SIM_DEF_FILL(quad_shuffle_and_fill_up, __SIM_SH_FILL_UP, 4)
__SIM_DEF_FILL(quad_shuffle_and_fill_down, __SIM_SH_FILL_DOWN, 4)
#undef __SIM_DEF_FILL
#undef __SIM_OP_NAME

template <class T> __SIM_COLLECTIVE T simd_broadcast_first(T data) {
    T out = data;
    __sim_simd_wait(__SIM_SITE, &__sim_r_broadcast_first<T, 32>, &data, &out, 0, 0);
    return out;
}
template <class T> __SIM_COLLECTIVE T quad_broadcast_first(T data) {
    T out = data;
    __sim_simd_wait(__SIM_SITE, &__sim_r_broadcast_first<T, 4>, &data, &out, 0, 0);
    return out;
}

// ---- reductions and scans --------------------------------------------------
#define __SIM_DEF_REDUCE(NAME, OP, W)                                                   \
    template <class T> __SIM_COLLECTIVE T NAME(T data) {                                \
        T out = data;                                                                   \
        __sim_simd_wait(__SIM_SITE, &__sim_r_reduce<T, OP, W>, &data, &out, 0, 0);      \
        return out;                                                                     \
    }
__SIM_DEF_REDUCE(simd_sum, __sim_op_add, 32)
__SIM_DEF_REDUCE(simd_product, __sim_op_mul, 32)
__SIM_DEF_REDUCE(simd_max, __sim_op_max, 32)
__SIM_DEF_REDUCE(simd_min, __sim_op_min, 32)
__SIM_DEF_REDUCE(simd_and, __sim_op_and, 32)
__SIM_DEF_REDUCE(simd_or, __sim_op_or, 32)
__SIM_DEF_REDUCE(simd_xor, __sim_op_xor, 32)
__SIM_DEF_REDUCE(quad_sum, __sim_op_add, 4)
__SIM_DEF_REDUCE(quad_product, __sim_op_mul, 4)
__SIM_DEF_REDUCE(quad_max, __sim_op_max, 4)
__SIM_DEF_REDUCE(quad_min, __sim_op_min, 4)
__SIM_DEF_REDUCE(quad_and, __sim_op_and, 4)
__SIM_DEF_REDUCE(quad_or, __sim_op_or, 4)
__SIM_DEF_REDUCE(quad_xor, __sim_op_xor, 4)
#undef __SIM_DEF_REDUCE

#define __SIM_DEF_PREFIX(NAME, OP, W, INCL)                                             \
    template <class T> __SIM_COLLECTIVE T NAME(T data) {                                \
        T out = data;                                                                   \
        __sim_simd_wait(__SIM_SITE, &__sim_r_prefix<T, OP, W, INCL>, &data, &out, 0, 0); \
        return out;                                                                     \
    }
__SIM_DEF_PREFIX(simd_prefix_inclusive_sum, __sim_op_add, 32, true)
__SIM_DEF_PREFIX(simd_prefix_exclusive_sum, __sim_op_add, 32, false)
__SIM_DEF_PREFIX(simd_prefix_inclusive_product, __sim_op_mul, 32, true)
__SIM_DEF_PREFIX(simd_prefix_exclusive_product, __sim_op_mul, 32, false)
__SIM_DEF_PREFIX(quad_prefix_inclusive_sum, __sim_op_add, 4, true)
__SIM_DEF_PREFIX(quad_prefix_exclusive_sum, __sim_op_add, 4, false)
__SIM_DEF_PREFIX(quad_prefix_inclusive_product, __sim_op_mul, 4, true)
__SIM_DEF_PREFIX(quad_prefix_exclusive_product, __sim_op_mul, 4, false)
#undef __SIM_DEF_PREFIX

// ---- votes -----------------------------------------------------------------
// One vote rendezvous. `site` must be the collective's own caller (the
// collectives are noinline and pass __SIM_SITE), so lanes that reach
// different call sites never vote together.
template <int KIND, int W>
static inline __attribute__((always_inline)) void __sim_vote(const void* site, const bool* expr,
                                                             uint64_t out[2]) {
    __sim_simd_wait(site, &__sim_r_vote<KIND, W>, expr, out, 0, 0);
}
template <class Vote, int KIND, int W>
static inline __attribute__((always_inline)) Vote __sim_vote_mask(const void* site,
                                                                  const bool* expr) {
    uint64_t out[2] = {0, 0};
    __sim_vote<KIND, W>(site, expr, out);
    Vote r;
    r.v = out[0];
    r.active = out[1];
    return r;
}
template <int KIND, int W>
static inline __attribute__((always_inline)) bool __sim_vote_bool(const void* site,
                                                                  const bool* expr) {
    uint64_t out[2] = {0, 0};
    __sim_vote<KIND, W>(site, expr, out);
    return out[0] != 0;
}
__SIM_COLLECTIVE static simd_vote simd_ballot(bool expr) {
    return __sim_vote_mask<simd_vote, __SIM_V_BALLOT, 32>(__SIM_SITE, &expr);
}
__SIM_COLLECTIVE static simd_vote simd_active_threads_mask() {
    return __sim_vote_mask<simd_vote, __SIM_V_ACTIVE, 32>(__SIM_SITE, nullptr);
}
__SIM_COLLECTIVE static bool simd_any(bool expr) {
    return __sim_vote_bool<__SIM_V_ANY, 32>(__SIM_SITE, &expr);
}
__SIM_COLLECTIVE static bool simd_all(bool expr) {
    return __sim_vote_bool<__SIM_V_ALL, 32>(__SIM_SITE, &expr);
}
__SIM_COLLECTIVE static bool simd_is_first() {
    return __sim_vote_bool<__SIM_V_FIRST, 32>(__SIM_SITE, nullptr);
}
__SIM_COLLECTIVE static quad_vote quad_ballot(bool expr) {
    return __sim_vote_mask<quad_vote, __SIM_V_BALLOT, 4>(__SIM_SITE, &expr);
}
__SIM_COLLECTIVE static quad_vote quad_active_threads_mask() {
    return __sim_vote_mask<quad_vote, __SIM_V_ACTIVE, 4>(__SIM_SITE, nullptr);
}
__SIM_COLLECTIVE static bool quad_any(bool expr) {
    return __sim_vote_bool<__SIM_V_ANY, 4>(__SIM_SITE, &expr);
}
__SIM_COLLECTIVE static bool quad_all(bool expr) {
    return __sim_vote_bool<__SIM_V_ALL, 4>(__SIM_SITE, &expr);
}
__SIM_COLLECTIVE static bool quad_is_first() {
    return __sim_vote_bool<__SIM_V_FIRST, 4>(__SIM_SITE, nullptr);
}

// ---- barriers ----------------------------------------------------------------
// Reached through the macros in sim_metal_post.h, which add the call site's line.
template <class... F> __attribute__((noinline, convergent)) void __sim_threadgroup_barrier(int line, F...) {
    __sim_tg_barrier_wait(line);
}
template <class... F> __attribute__((noinline, convergent)) void __sim_simdgroup_barrier(int line, F...) {
    // A rendezvous of the simdgroup's lanes that reach this barrier; no data.
    __sim_simd_wait((const void*)(intptr_t)(line * 2 + 1), nullptr, nullptr, nullptr, 0, 0);
}

#undef __SIM_SITE
#undef __SIM_COLLECTIVE

}  // namespace metal

#endif
