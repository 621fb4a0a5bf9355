// mlxsci CPU simulator: the Metal Shading Language subset a kernel body sees.
//
// Compiled as C++17 by the clang inside the `ziglang` wheel, together with
// the simulator runtime headers (threadgroup storage, barriers, simd_*/quad_*
// functions, which this file does not define) and before the rewritten kernel
// text (see ../rewrite.py). It compiles on its own and gives:
//   - MSL scalar and vector types (clang ext_vector_type: swizzles, arithmetic
//     and comparisons come from the compiler), packed vectors, vec<T, N>;
//   - __mlxsci_make<T, N>(...), the target of the rewrite of MSL vector
//     constructors such as float4(a.xy, b, c), float3(1.0f), float4(int4);
//   - namespace metal (+ metal::fast, metal::precise) with the math, common,
//     geometric, relational and integer functions, as_type, atomics,
//     mem_flags, memory_order, numeric_limits;
//   - bool2/3/4 (a class, see below), floatCxR/halfCxR matrices;
//   - the part of MLX's utils.h that custom kernels can use: ceildiv,
//     elem_to_loc*, Limits<T>, complex64_t, float16_t, bfloat16_t, log1p,
//     METAL_FUNC and friends.
// The macros device, constant, thread and threadgroup are defined (empty) at
// the very end, after every system header this file includes; a header that
// is included later must not use those words as identifiers.
//
// Recommended flags (besides -std=c++17 -O2):
//   -flax-vector-conversions=none      float4 * int4 is an error (as in MSL)
//                                      instead of a silent bit cast;
//   -Xclang -ffloat16-excess-precision=none
//   -Xclang -fbfloat16-excess-precision=none
//                                      half/bfloat round after every operation,
//                                      as the GPU does, not once per expression;
//   -fsigned-char                      MSL char is signed (aarch64 Linux
//                                      defaults to unsigned);
//   -ffp-contract=off                  no a*b+c -> fma fusion, so results do
//                                      not depend on whether the host CPU (zig
//                                      targets the native one) has FMA.
//
// Every GPU thread runs on one OS thread (cooperative fibers that switch only
// at barriers and SIMD-group calls), so the atomics below are plain
// read-modify-write operations.
#ifndef MLXSCI_METAL_PRELUDE_H
#define MLXSCI_METAL_PRELUDE_H

// System headers first, before the address-space macros below exist.
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <setjmp.h>
#include <cmath>
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <cstdlib>
#include <cstdio>
#include <climits>
#include <cfloat>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>

// ---------------------------------------------------------------------------
// Scalar types
// ---------------------------------------------------------------------------
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef _Float16 half;
typedef __bf16 bfloat;
typedef _Float16 float16_t;
typedef __bf16 bfloat16_t;

// ---------------------------------------------------------------------------
// Vector types
// ---------------------------------------------------------------------------
#define __MLXSCI_VEC(T, NAME)                                                  \
  typedef T NAME##2 __attribute__((ext_vector_type(2)));                       \
  typedef T NAME##3 __attribute__((ext_vector_type(3)));                       \
  typedef T NAME##4 __attribute__((ext_vector_type(4)));
__MLXSCI_VEC(signed char, char)
__MLXSCI_VEC(unsigned char, uchar)
__MLXSCI_VEC(short, short)
__MLXSCI_VEC(unsigned short, ushort)
__MLXSCI_VEC(int, int)
__MLXSCI_VEC(unsigned int, uint)
__MLXSCI_VEC(long, long)
__MLXSCI_VEC(unsigned long, ulong)
__MLXSCI_VEC(_Float16, half)
__MLXSCI_VEC(__bf16, bfloat)
__MLXSCI_VEC(float, float)
#undef __MLXSCI_VEC

namespace metal {
template <typename T, int N>
using vec = T __attribute__((ext_vector_type(N)));
}  // namespace metal

// ---------------------------------------------------------------------------
// Type traits used throughout
// ---------------------------------------------------------------------------
namespace __mlxsci {

template <typename T, int N>
struct packed;
template <int N>
struct boolvec;

template <typename T>
struct vt {
  static constexpr bool is_vec = false;
  static constexpr bool is_packed = false;
  static constexpr int n = 1;
  using elem = T;
};
template <typename T, int N>
struct vt<T __attribute__((ext_vector_type(N)))> {
  static constexpr bool is_vec = true;
  static constexpr bool is_packed = false;
  static constexpr int n = N;
  using elem = T;
};
template <typename T, int N>
struct vt<packed<T, N>> {
  static constexpr bool is_vec = false;
  static constexpr bool is_packed = true;
  static constexpr int n = N;
  using elem = T;
};
// bool vectors are a class (see below), indexable like packed vectors
template <int N>
struct vt<boolvec<N>> {
  static constexpr bool is_vec = false;
  static constexpr bool is_packed = false;
  static constexpr bool is_bool = true;
  static constexpr int n = N;
  using elem = bool;
};
// "has components": ext vectors, packed vectors and bool vectors
template <typename T>
constexpr bool has_comp = vt<T>::is_vec || vt<T>::is_packed || vt<T>::n > 1;

template <typename T>
using rm = std::remove_cv_t<std::remove_reference_t<T>>;
template <typename T>
using elem_t = typename vt<rm<T>>::elem;

template <typename T>
constexpr bool is_fscalar = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                            std::is_same_v<T, _Float16> || std::is_same_v<T, __bf16>;
template <typename T>
constexpr bool is_iscalar = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <typename T>
constexpr bool is_scalar = is_fscalar<T> || std::is_integral_v<T>;
template <typename T>
constexpr bool is_ext_vec = vt<T>::is_vec;
// float, half, bfloat, double and their vectors
template <typename T>
constexpr bool is_float = (is_fscalar<T>) || (vt<T>::is_vec && is_fscalar<typename vt<T>::elem>);
// integer scalars (not bool) and their vectors
template <typename T>
constexpr bool is_int = (is_iscalar<T>) || (vt<T>::is_vec && is_iscalar<typename vt<T>::elem>);
template <typename T>
constexpr bool is_num = is_float<T> || is_int<T>;

template <bool B>
using en = std::enable_if_t<B, int>;

// Arguments the C library's overloads in <cmath> take (standard arithmetic
// scalars; not half, bfloat or vectors).
template <typename T>
constexpr bool is_std_arith =
    std::is_arithmetic_v<T> && !std::is_same_v<T, _Float16> && !std::is_same_v<T, __bf16>;
template <typename... T>
constexpr bool libm_args = (is_std_arith<rm<T>> && ...);

// Scalars are computed in float (half, bfloat, float) or double.
template <typename E>
using calc_t = std::conditional_t<std::is_same_v<E, double>, double, float>;

template <typename T, int N>
using v = T __attribute__((ext_vector_type(N)));

// Rank of a scalar type when two different ones meet in a metal:: call.
template <typename A, typename B, typename = void>
struct scalar_common {};
template <typename A, typename B>
struct scalar_common<A, B, std::enable_if_t<is_fscalar<A> && is_fscalar<B>>> {
  // A double (an unsuffixed literal) takes the other side's type, as MSL
  // has no double on the GPU. half with bfloat meets in float.
  using type = std::conditional_t<
      std::is_same_v<A, B>, A,
      std::conditional_t<
          std::is_same_v<A, double>, B,
          std::conditional_t<std::is_same_v<B, double>, A,
                             std::conditional_t<(sizeof(A) > sizeof(B)), A,
                                                std::conditional_t<(sizeof(B) > sizeof(A)), B,
                                                                   float>>>>>;
};
template <typename A, typename B>
struct scalar_common<A, B, std::enable_if_t<is_fscalar<A> && std::is_integral_v<B>>> {
  using type = A;
};
template <typename A, typename B>
struct scalar_common<A, B, std::enable_if_t<std::is_integral_v<A> && is_fscalar<B>>> {
  using type = B;
};
template <typename A, typename B>
struct scalar_common<A, B, std::enable_if_t<std::is_integral_v<A> && std::is_integral_v<B>>> {
  using type = std::conditional_t<std::is_same_v<A, B>, A, decltype(A() + B())>;
};

// Common type of the arguments of a metal:: call: a vector wins over
// scalars (which are splatted); two vectors must be the same type.
template <typename A, typename B, typename = void>
struct common2 {};
template <typename A, typename B>
struct common2<A, B, std::enable_if_t<vt<A>::is_vec && std::is_same_v<A, B>>> {
  using type = A;
};
template <typename A, typename B>
struct common2<A, B, std::enable_if_t<vt<A>::is_vec && is_scalar<B>>> {
  using type = A;
};
template <typename A, typename B>
struct common2<A, B, std::enable_if_t<is_scalar<A> && vt<B>::is_vec>> {
  using type = B;
};
template <typename A, typename B>
struct common2<A, B, std::enable_if_t<is_scalar<A> && is_scalar<B>>> : scalar_common<A, B> {};

template <typename... T>
struct common;
template <typename A>
struct common<A> {
  using type = A;
};
template <typename A, typename B, typename... R>
struct common<A, B, R...> {
  using type = typename common<typename common2<A, B>::type, R...>::type;
};
template <typename... T>
using common_t = typename common<rm<T>...>::type;

// Element i of a vector, or the scalar itself.
template <typename X>
constexpr auto el(const X& x, int i) {
  if constexpr (has_comp<X>)
    return x[i];
  else
    return x;
}

// Apply f element by element; R is the result type (a vector or scalar),
// the arguments are converted to R's element type first. Result vectors are
// zero-initialised before their elements are set: clang 22 at -O2 miscompiles
// element stores into an uninitialised bool vector.
template <typename R, typename F, typename... X>
inline R map(F f, const X&... x) {
  using E = typename vt<R>::elem;
  if constexpr (vt<R>::is_vec) {
    R r{};
    for (int i = 0; i < vt<R>::n; ++i) r[i] = f(static_cast<E>(el(x, i))...);
    return r;
  } else {
    return f(static_cast<E>(x)...);
  }
}

// Same, with an explicit element type for the arguments and a result
// element type that may differ (isnan -> bool vector).
template <typename R, typename A, typename F, typename X>
inline R map_to(F f, const X& x) {
  using EA = typename vt<A>::elem;
  if constexpr (has_comp<R>) {
    R r{};
    for (int i = 0; i < vt<R>::n; ++i) r[i] = f(static_cast<EA>(el(x, i)));
    return r;
  } else {
    return f(static_cast<EA>(x));
  }
}

// Result type of a relational function: bool or bool vector.
template <typename T>
struct bool_of {
  using type = bool;
};
template <typename T, int N>
struct bool_of<T __attribute__((ext_vector_type(N)))> {
  using type = boolvec<N>;
};
template <typename T>
using bool_t = typename bool_of<T>::type;

// Unsigned integer of the same size as T (for bit tricks).
template <typename T>
using uint_of = std::make_unsigned_t<T>;

}  // namespace __mlxsci

// ---------------------------------------------------------------------------
// Bool vectors. Clang's own bool ext vectors are bit-packed, have no .x/.xy
// and (clang 22, -O1 and up) lose element stores, so bool2/3/4 are a small
// class: one byte per component (bool3 is 4 bytes, as in MSL), .x .y .z .w
// and .r .g .b .a, [i], swizzles whose components are in increasing order
// (m.xy, m.zw, m.xzw, m.rgb, ...), implicit construction from a comparison
// result (float4 < float4 gives an int4 of -1/0) or a scalar, ! && || & | ^
// == != (element-wise, also with a comparison result on the other side:
// `m && (v < 1.0f)`: MSL 3.2 §3.1 items 5, 6, 8 and 9 make comparisons of
// vectors bool vectors and && || ! act on them), constexpr bool vector
// constants, and all/any/select (MSL 3.2 §6.4) in namespace metal. Not
// supported on them:
// other swizzles (m.yx, m.xx), assigning one swizzle from the same swizzle
// (a.xy = b.xy: write a.xy = bool2(b.xy)), and a vector condition in ?:
// (which MSL rejects too: §3.1 item 10 wants a scalar Boolean).
// ---------------------------------------------------------------------------
namespace __mlxsci {

// Components I... of an N-component bool vector. It lives in the vector's
// union, and every union member starts with `bool __a[N]`.
template <int N, int... I>
struct bswz {
  bool __a[N];
  static constexpr int idx(int k) {
    constexpr int ix[] = {I...};
    return ix[k];
  }
  bool operator[](int k) const { return __a[idx(k)]; }
  operator boolvec<sizeof...(I)>() const {
    boolvec<sizeof...(I)> r;
    for (int k = 0; k < int(sizeof...(I)); ++k) r[k] = __a[idx(k)];
    return r;
  }
  bswz& operator=(const boolvec<sizeof...(I)>& v) {
    for (int k = 0; k < int(sizeof...(I)); ++k) __a[idx(k)] = v[k];
    return *this;
  }
  bswz& operator=(const bswz&) = delete;
  boolvec<sizeof...(I)> operator!() const { return !boolvec<sizeof...(I)>(*this); }
};
template <int N, int... I>
struct vt<bswz<N, I...>> {
  static constexpr bool is_vec = false;
  static constexpr bool is_packed = false;
  static constexpr bool is_bool = true;
  static constexpr int n = sizeof...(I);
  using elem = bool;
};

template <int N>
struct boolvec_storage;
template <>
struct boolvec_storage<2> {
  union {
    bool __a[2] = {};
    struct {
      bool x, y;
    };
    struct {
      bool r, g;
    };
    bswz<2, 0, 1> xy;
    bswz<2, 0, 1> rg;
  };
};
template <>
struct alignas(4) boolvec_storage<3> {
  union {
    bool __a[3] = {};
    struct {
      bool x, y, z;
    };
    struct {
      bool r, g, b;
    };
    bswz<3, 0, 1> xy;
    bswz<3, 0, 1> rg;
    bswz<3, 0, 2> xz;
    bswz<3, 0, 2> rb;
    bswz<3, 1, 2> yz;
    bswz<3, 1, 2> gb;
    bswz<3, 0, 1, 2> xyz;
    bswz<3, 0, 1, 2> rgb;
  };
};
template <>
struct boolvec_storage<4> {
  union {
    bool __a[4] = {};
    struct {
      bool x, y, z, w;
    };
    struct {
      bool r, g, b, a;
    };
    bswz<4, 0, 1> xy;
    bswz<4, 0, 1> rg;
    bswz<4, 0, 2> xz;
    bswz<4, 0, 2> rb;
    bswz<4, 0, 3> xw;
    bswz<4, 0, 3> ra;
    bswz<4, 1, 2> yz;
    bswz<4, 1, 2> gb;
    bswz<4, 1, 3> yw;
    bswz<4, 1, 3> ga;
    bswz<4, 2, 3> zw;
    bswz<4, 2, 3> ba;
    bswz<4, 0, 1, 2> xyz;
    bswz<4, 0, 1, 2> rgb;
    bswz<4, 0, 1, 3> xyw;
    bswz<4, 0, 1, 3> rga;
    bswz<4, 0, 2, 3> xzw;
    bswz<4, 0, 2, 3> rba;
    bswz<4, 1, 2, 3> yzw;
    bswz<4, 1, 2, 3> gba;
    bswz<4, 0, 1, 2, 3> xyzw;
    bswz<4, 0, 1, 2, 3> rgba;
  };
};

// The constructors are constexpr (the storage's array is its initialised
// union member) so that `constexpr bool4 M = bool4(true, false, ...)` is a
// constant, as in MSL.
template <int N>
struct boolvec : boolvec_storage<N> {
  constexpr boolvec() : boolvec(false) {}
  constexpr boolvec(bool s) {
    for (int i = 0; i < N; ++i) this->__a[i] = s;
  }
  constexpr boolvec(const boolvec& o) {
    for (int i = 0; i < N; ++i) this->__a[i] = o.__a[i];
  }
  constexpr boolvec& operator=(const boolvec& o) {
    for (int i = 0; i < N; ++i) this->__a[i] = o.__a[i];
    return *this;
  }
  // a comparison result (int/short/long vector of -1/0) or any N-vector
  template <typename V, std::enable_if_t<vt<V>::is_vec && vt<V>::n == N, int> = 0>
  constexpr boolvec(const V& v) {
    for (int i = 0; i < N; ++i) this->__a[i] = static_cast<bool>(v[i]);
  }
  constexpr bool& operator[](int i) { return this->__a[i]; }
  constexpr const bool& operator[](int i) const { return this->__a[i]; }
  constexpr boolvec operator!() const {
    boolvec r;
    for (int i = 0; i < N; ++i) r.__a[i] = !this->__a[i];
    return r;
  }
};

template <typename T, typename = void>
struct is_boolish_t : std::false_type {};
template <int N>
struct is_boolish_t<boolvec<N>> : std::true_type {};
template <int N, int... I>
struct is_boolish_t<bswz<N, I...>> : std::true_type {};
template <typename T>
constexpr bool is_boolish = is_boolish_t<rm<T>>::value;
// What may meet an N-component bool vector in a logical or equality operator:
// a bool, or a bool vector or comparison result (clang gives an integer vector
// of -1/0 where MSL has a bool vector) of the same size; bool4 && bool3 is an
// error, as in MSL.
template <typename T, int N>
constexpr bool bool_partner =
    std::is_same_v<rm<T>, bool> || (is_boolish<T> && vt<rm<T>>::n == N) ||
    (vt<rm<T>>::is_vec && is_iscalar<typename vt<rm<T>>::elem> && vt<rm<T>>::n == N);
template <typename A, typename B>
constexpr bool bool_operands = (is_boolish<A> && bool_partner<B, vt<rm<A>>::n>) ||
                               (is_boolish<B> && bool_partner<A, vt<rm<B>>::n>);
template <typename A, typename B>
constexpr int bool_n = vt<rm<A>>::n > vt<rm<B>>::n ? vt<rm<A>>::n : vt<rm<B>>::n;

#define __MLXSCI_BOOLVEC_OP(OP)                                                   \
  template <typename A, typename B, std::enable_if_t<bool_operands<A, B>, int> = 0> \
  constexpr boolvec<bool_n<A, B>> operator OP(const A& a, const B& b) {           \
    boolvec<bool_n<A, B>> r;                                                      \
    for (int i = 0; i < bool_n<A, B>; ++i)                                        \
      r[i] = static_cast<bool>(static_cast<bool>(el(a, i)) OP static_cast<bool>(el(b, i))); \
    return r;                                                                     \
  }
__MLXSCI_BOOLVEC_OP(&&)
__MLXSCI_BOOLVEC_OP(||)
__MLXSCI_BOOLVEC_OP(&)
__MLXSCI_BOOLVEC_OP(|)
__MLXSCI_BOOLVEC_OP(^)
__MLXSCI_BOOLVEC_OP(==)
__MLXSCI_BOOLVEC_OP(!=)
#undef __MLXSCI_BOOLVEC_OP
#define __MLXSCI_BOOLVEC_CASSIGN(OP)                                              \
  template <int N, typename B, std::enable_if_t<bool_operands<boolvec<N>, B>, int> = 0> \
  inline boolvec<N>& operator OP##=(boolvec<N>& a, const B& b) {                 \
    return a = a OP b;                                                            \
  }
__MLXSCI_BOOLVEC_CASSIGN(&)
__MLXSCI_BOOLVEC_CASSIGN(|)
__MLXSCI_BOOLVEC_CASSIGN(^)
#undef __MLXSCI_BOOLVEC_CASSIGN
}  // namespace __mlxsci
typedef __mlxsci::boolvec<2> bool2;
typedef __mlxsci::boolvec<3> bool3;
typedef __mlxsci::boolvec<4> bool4;

// ---------------------------------------------------------------------------
// Packed vectors: packed_float3 is 12 bytes with 4-byte alignment.
// ---------------------------------------------------------------------------
namespace __mlxsci {

template <typename T, int N>
struct packed_storage;
template <typename T>
struct packed_storage<T, 2> {
  union {
    T __a[2];
    struct {
      T x, y;
    };
    struct {
      T r, g;
    };
  };
};
template <typename T>
struct packed_storage<T, 3> {
  union {
    T __a[3];
    struct {
      T x, y, z;
    };
    struct {
      T r, g, b;
    };
  };
};
template <typename T>
struct packed_storage<T, 4> {
  union {
    T __a[4];
    struct {
      T x, y, z, w;
    };
    struct {
      T r, g, b, a;
    };
  };
};

template <typename T, int N>
struct packed : packed_storage<T, N> {
  using vec_type = T __attribute__((ext_vector_type(N)));
 private:
  struct from_vec {};
  template <int... I>
  constexpr packed(from_vec, const vec_type& v, std::integer_sequence<int, I...>)
      : packed_storage<T, N>{{{v[I]...}}} {}

 public:
  packed() = default;
  // constexpr (the storage's array is initialised as an aggregate), so that
  // `constexpr packed_float3 P = packed_float3(1, 2, 3)` is a constant, as in MSL
  constexpr packed(const vec_type& v) : packed(from_vec{}, v, std::make_integer_sequence<int, N>{}) {}
  template <typename A0, typename... A,
            std::enable_if_t<!(sizeof...(A) == 0 && std::is_same_v<rm<A0>, packed>), int> = 0>
  constexpr explicit packed(const A0& a0, const A&... a);
  constexpr operator vec_type() const {
    vec_type r{};
    for (int i = 0; i < N; ++i) r[i] = this->__a[i];
    return r;
  }
  vec_type __v() const { return *this; }
  T& operator[](int i) { return this->__a[i]; }
  const T& operator[](int i) const { return this->__a[i]; }
  packed& operator=(const vec_type& v) {
    for (int i = 0; i < N; ++i) this->__a[i] = v[i];
    return *this;
  }
#define __MLXSCI_PACKED_CASSIGN(OP)                                           \
  template <typename U>                                                       \
  packed& operator OP##=(const U& u) {                                        \
    vec_type t = __v();                                                       \
    if constexpr (vt<U>::is_packed)                                           \
      t OP## = u.__v();                                                       \
    else                                                                      \
      t OP## = u;                                                             \
    return *this = t;                                                         \
  }
  __MLXSCI_PACKED_CASSIGN(+)
  __MLXSCI_PACKED_CASSIGN(-)
  __MLXSCI_PACKED_CASSIGN(*)
  __MLXSCI_PACKED_CASSIGN(/)
#undef __MLXSCI_PACKED_CASSIGN
};

template <typename X>
inline decltype(auto) unpack(const X& x) {
  if constexpr (vt<X>::is_packed)
    return x.__v();
  else
    return (x);
}

#define __MLXSCI_PACKED_BINOP(OP)                                                  \
  template <typename T, int N, typename U>                                         \
  inline auto operator OP(const packed<T, N>& a, const U& b)->decltype(a.__v() OP unpack(b)) { \
    return a.__v() OP unpack(b);                                                   \
  }                                                                                \
  template <typename U, typename T, int N, en<!vt<U>::is_packed> = 0>              \
  inline auto operator OP(const U& a, const packed<T, N>& b)->decltype(a OP b.__v()) { \
    return a OP b.__v();                                                           \
  }
__MLXSCI_PACKED_BINOP(+)
__MLXSCI_PACKED_BINOP(-)
__MLXSCI_PACKED_BINOP(*)
__MLXSCI_PACKED_BINOP(/)
__MLXSCI_PACKED_BINOP(==)
__MLXSCI_PACKED_BINOP(!=)
__MLXSCI_PACKED_BINOP(<)
__MLXSCI_PACKED_BINOP(>)
__MLXSCI_PACKED_BINOP(<=)
__MLXSCI_PACKED_BINOP(>=)
#undef __MLXSCI_PACKED_BINOP
template <typename T, int N>
inline auto operator-(const packed<T, N>& a) {
  return -a.__v();
}

}  // namespace __mlxsci

#define __MLXSCI_PACKED(T, NAME)                                               \
  typedef __mlxsci::packed<T, 2> packed_##NAME##2;                             \
  typedef __mlxsci::packed<T, 3> packed_##NAME##3;                             \
  typedef __mlxsci::packed<T, 4> packed_##NAME##4;
__MLXSCI_PACKED(signed char, char)
__MLXSCI_PACKED(unsigned char, uchar)
__MLXSCI_PACKED(short, short)
__MLXSCI_PACKED(unsigned short, ushort)
__MLXSCI_PACKED(int, int)
__MLXSCI_PACKED(unsigned int, uint)
__MLXSCI_PACKED(long, long)
__MLXSCI_PACKED(unsigned long, ulong)
__MLXSCI_PACKED(_Float16, half)
__MLXSCI_PACKED(__bf16, bfloat)
__MLXSCI_PACKED(float, float)
#undef __MLXSCI_PACKED

// ---------------------------------------------------------------------------
// Vector construction: what the rewrite turns `float4(...)`, `half2(...)`,
// `vec<float, 4>(...)`, `static_cast<float4>(...)` and `(float4)x` into.
//   __mlxsci_make<float, 4>()              zero vector
//   __mlxsci_make<float, 4>(s)             splat of a scalar
//   __mlxsci_make<float, 4>(i4)            element-wise conversion of a
//                                          4-component vector (any element type)
//   __mlxsci_make<float, 4>(a.xy, b, c)    concatenation; counts must add up to 4
// ---------------------------------------------------------------------------
namespace __mlxsci {

// The type __mlxsci_make<T, N> builds: an ext vector, or boolvec<N> for bool.
template <typename T, int N>
struct vsel {
  using type = T __attribute__((ext_vector_type(N)));
};
template <int N>
struct vsel<bool, N> {
  using type = boolvec<N>;
};
template <typename T, int N>
using vec_t = typename vsel<T, N>::type;

template <typename T, int N, typename A>
constexpr void put(vec_t<T, N>& r, int& k, const A& a) {
  if constexpr (has_comp<A>) {
    for (int i = 0; i < vt<A>::n; ++i) r[k++] = static_cast<T>(a[i]);
  } else {
    static_assert(is_scalar<A>,
                  "vector constructor: argument is neither a scalar nor a vector");
    r[k++] = static_cast<T>(a);
  }
}

// constexpr, so that vector constants (`constexpr uint3 M(1, 2, 3);`,
// `constexpr float4 V = float4(0.5f);`) are constant expressions, as in MSL.
template <typename T, int N, typename... A>
constexpr vec_t<T, N> make(const A&... a) {
  static_assert(N >= 2 && N <= 4, "vectors have 2, 3 or 4 components");
  constexpr int total = (0 + ... + vt<rm<A>>::n);
  vec_t<T, N> r{};
  if constexpr (sizeof...(A) == 0) {
    for (int i = 0; i < N; ++i) r[i] = T(0);
  } else if constexpr (sizeof...(A) == 1 && total == 1) {
    T s = T();
    ((s = static_cast<T>(a)), ...);
    for (int i = 0; i < N; ++i) r[i] = s;
  } else {
    static_assert(total == N,
                  "vector constructor: the components of the arguments do not add up "
                  "to the vector size");
    int k = 0;
    (put<T, N>(r, k, a), ...);
  }
  return r;
}

template <typename T, int N>
template <typename A0, typename... A,
          std::enable_if_t<!(sizeof...(A) == 0 && std::is_same_v<rm<A0>, packed<T, N>>), int>>
constexpr packed<T, N>::packed(const A0& a0, const A&... a) : packed(make<T, N>(a0, a...)) {}

}  // namespace __mlxsci

template <typename T, int N, typename... A>
constexpr __mlxsci::vec_t<T, N> __mlxsci_make(const A&... a) {
  return __mlxsci::make<T, N>(a...);
}

// ---------------------------------------------------------------------------
// Matrices: floatCxR / halfCxR with C columns of R components, column-major
// as in MSL. m[c] is column c. Constructors: () zero, (s) s on the diagonal,
// (col0, ..., colC-1), or C*R scalars in column order. Operators: m * v,
// v * m, m * m, m + m, m - m, m * s, s * m, -m; transpose, determinant.
// ---------------------------------------------------------------------------
namespace __mlxsci {
template <typename T, int C, int R>
struct mat {
  using col_type = T __attribute__((ext_vector_type(R)));
  // constexpr constructors: `constexpr float2x2 R = float2x2(...)` is a constant, as in MSL
  col_type __c[C] = {};
  constexpr mat() {
    for (int c = 0; c < C; ++c) __c[c] = col_type(0);
  }
  constexpr explicit mat(T s) {
    for (int c = 0; c < C; ++c) {
      __c[c] = col_type(0);
      if (c < R) __c[c][c] = s;
    }
  }
  template <typename... A, std::enable_if_t<(sizeof...(A) == C && C > 1) &&
                                                (std::is_same_v<rm<A>, col_type> && ...), int> = 0>
  constexpr mat(const A&... cols) : __c{cols...} {}
  template <typename... A, std::enable_if_t<sizeof...(A) == C * R && (is_scalar<rm<A>> && ...), int> = 0>
  constexpr mat(const A&... s) {
    const T v[] = {static_cast<T>(s)...};
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R; ++r) __c[c][r] = v[c * R + r];
  }
  constexpr col_type& operator[](int c) { return __c[c]; }
  constexpr const col_type& operator[](int c) const { return __c[c]; }
  mat& operator+=(const mat& o) {
    for (int c = 0; c < C; ++c) __c[c] += o.__c[c];
    return *this;
  }
  mat& operator-=(const mat& o) {
    for (int c = 0; c < C; ++c) __c[c] -= o.__c[c];
    return *this;
  }
  mat& operator*=(T s) {
    for (int c = 0; c < C; ++c) __c[c] *= s;
    return *this;
  }
};
template <typename T, int C, int R>
inline mat<T, C, R> operator+(mat<T, C, R> a, const mat<T, C, R>& b) {
  return a += b;
}
template <typename T, int C, int R>
inline mat<T, C, R> operator-(mat<T, C, R> a, const mat<T, C, R>& b) {
  return a -= b;
}
template <typename T, int C, int R>
inline mat<T, C, R> operator-(mat<T, C, R> a) {
  for (int c = 0; c < C; ++c) a.__c[c] = -a.__c[c];
  return a;
}
template <typename T, int C, int R, typename S, std::enable_if_t<is_scalar<S>, int> = 0>
inline mat<T, C, R> operator*(mat<T, C, R> a, S s) {
  return a *= static_cast<T>(s);
}
template <typename T, int C, int R, typename S, std::enable_if_t<is_scalar<S>, int> = 0>
inline mat<T, C, R> operator*(S s, mat<T, C, R> a) {
  return a *= static_cast<T>(s);
}
template <typename T, int C, int R>
inline typename mat<T, C, R>::col_type operator*(const mat<T, C, R>& m,
                                                 T __attribute__((ext_vector_type(C))) v) {
  typename mat<T, C, R>::col_type r = m.__c[0] * v[0];
  for (int c = 1; c < C; ++c) r += m.__c[c] * v[c];
  return r;
}
template <typename T, int C, int R>
inline T __attribute__((ext_vector_type(C))) operator*(T __attribute__((ext_vector_type(R))) v,
                                                       const mat<T, C, R>& m) {
  T __attribute__((ext_vector_type(C))) r{};
  for (int c = 0; c < C; ++c) {
    T s = 0;
    for (int k = 0; k < R; ++k) s += v[k] * m.__c[c][k];
    r[c] = s;
  }
  return r;
}
template <typename T, int K, int R, int C>
inline mat<T, C, R> operator*(const mat<T, K, R>& a, const mat<T, C, K>& b) {
  mat<T, C, R> r;
  for (int c = 0; c < C; ++c) r.__c[c] = a * b.__c[c];
  return r;
}
template <typename T, int C, int R>
inline bool operator==(const mat<T, C, R>& a, const mat<T, C, R>& b) {
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r)
      if (a.__c[c][r] != b.__c[c][r]) return false;
  return true;
}
}  // namespace __mlxsci

#define __MLXSCI_MAT(T, NAME)                                                 \
  typedef __mlxsci::mat<T, 2, 2> NAME##2x2;                                   \
  typedef __mlxsci::mat<T, 2, 3> NAME##2x3;                                   \
  typedef __mlxsci::mat<T, 2, 4> NAME##2x4;                                   \
  typedef __mlxsci::mat<T, 3, 2> NAME##3x2;                                   \
  typedef __mlxsci::mat<T, 3, 3> NAME##3x3;                                   \
  typedef __mlxsci::mat<T, 3, 4> NAME##3x4;                                   \
  typedef __mlxsci::mat<T, 4, 2> NAME##4x2;                                   \
  typedef __mlxsci::mat<T, 4, 3> NAME##4x3;                                   \
  typedef __mlxsci::mat<T, 4, 4> NAME##4x4;
__MLXSCI_MAT(float, float)
__MLXSCI_MAT(_Float16, half)
#undef __MLXSCI_MAT

// ---------------------------------------------------------------------------
// namespace metal
// ---------------------------------------------------------------------------
namespace metal {

// Types are global and also reachable as metal::float4 etc.
using ::half;
using ::bfloat;
using ::uchar;
using ::ushort;
using ::uint;
using ::ulong;
#define __MLXSCI_USING_VEC(NAME) \
  using ::NAME##2;               \
  using ::NAME##3;               \
  using ::NAME##4;               \
  using ::packed_##NAME##2;      \
  using ::packed_##NAME##3;      \
  using ::packed_##NAME##4;
__MLXSCI_USING_VEC(char)
__MLXSCI_USING_VEC(uchar)
__MLXSCI_USING_VEC(short)
__MLXSCI_USING_VEC(ushort)
__MLXSCI_USING_VEC(int)
__MLXSCI_USING_VEC(uint)
__MLXSCI_USING_VEC(long)
__MLXSCI_USING_VEC(ulong)
__MLXSCI_USING_VEC(half)
__MLXSCI_USING_VEC(bfloat)
__MLXSCI_USING_VEC(float)
#undef __MLXSCI_USING_VEC
using ::bool2;
using ::bool3;
using ::bool4;
#define __MLXSCI_USING_MAT(NAME)                                                 \
  using ::NAME##2x2;                                                             \
  using ::NAME##2x3;                                                             \
  using ::NAME##2x4;                                                             \
  using ::NAME##3x2;                                                             \
  using ::NAME##3x3;                                                             \
  using ::NAME##3x4;                                                             \
  using ::NAME##4x2;                                                             \
  using ::NAME##4x3;                                                             \
  using ::NAME##4x4;
__MLXSCI_USING_MAT(float)
__MLXSCI_USING_MAT(half)
#undef __MLXSCI_USING_MAT

// ---- bit casts -------------------------------------------------------------
template <typename To, typename From>
inline To as_type(const From& x) {
  static_assert(sizeof(To) == sizeof(From), "as_type: the two types differ in size");
  return __builtin_bit_cast(To, x);
}

// ---- numeric_limits ----------------------------------------------------------
template <typename T>
struct numeric_limits : std::numeric_limits<T> {};
template <>
struct numeric_limits<_Float16> {
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr int digits = 11;
  static constexpr _Float16 min() { return __builtin_bit_cast(_Float16, (unsigned short)0x0400); }
  static constexpr _Float16 max() { return __builtin_bit_cast(_Float16, (unsigned short)0x7bff); }
  static constexpr _Float16 lowest() { return __builtin_bit_cast(_Float16, (unsigned short)0xfbff); }
  static constexpr _Float16 epsilon() { return __builtin_bit_cast(_Float16, (unsigned short)0x1400); }
  static constexpr _Float16 infinity() { return __builtin_bit_cast(_Float16, (unsigned short)0x7c00); }
  static constexpr _Float16 quiet_NaN() { return __builtin_bit_cast(_Float16, (unsigned short)0x7e00); }
  static constexpr _Float16 denorm_min() { return __builtin_bit_cast(_Float16, (unsigned short)0x0001); }
};
template <>
struct numeric_limits<__bf16> {
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr int digits = 8;
  static constexpr __bf16 min() { return __builtin_bit_cast(__bf16, (unsigned short)0x0080); }
  static constexpr __bf16 max() { return __builtin_bit_cast(__bf16, (unsigned short)0x7f7f); }
  static constexpr __bf16 lowest() { return __builtin_bit_cast(__bf16, (unsigned short)0xff7f); }
  static constexpr __bf16 epsilon() { return __builtin_bit_cast(__bf16, (unsigned short)0x3c00); }
  static constexpr __bf16 infinity() { return __builtin_bit_cast(__bf16, (unsigned short)0x7f80); }
  static constexpr __bf16 quiet_NaN() { return __builtin_bit_cast(__bf16, (unsigned short)0x7fc0); }
  static constexpr __bf16 denorm_min() { return __builtin_bit_cast(__bf16, (unsigned short)0x0001); }
};

// ---- scalar kernels (float or double) -----------------------------------------
namespace __k {
#define __MLXSCI_K1(NAME, FEXPR, DEXPR)                       \
  inline float NAME(float x) { return FEXPR; }                \
  inline double NAME(double x) { return DEXPR; }
__MLXSCI_K1(acos, __builtin_acosf(x), __builtin_acos(x))
__MLXSCI_K1(acosh, __builtin_acoshf(x), __builtin_acosh(x))
__MLXSCI_K1(asin, __builtin_asinf(x), __builtin_asin(x))
__MLXSCI_K1(asinh, __builtin_asinhf(x), __builtin_asinh(x))
__MLXSCI_K1(atan, __builtin_atanf(x), __builtin_atan(x))
__MLXSCI_K1(atanh, __builtin_atanhf(x), __builtin_atanh(x))
__MLXSCI_K1(ceil, __builtin_ceilf(x), __builtin_ceil(x))
__MLXSCI_K1(cos, __builtin_cosf(x), __builtin_cos(x))
__MLXSCI_K1(cosh, __builtin_coshf(x), __builtin_cosh(x))
__MLXSCI_K1(cospi, float(__builtin_cos(3.14159265358979323846 * __builtin_fmod(double(x), 2.0))),
            __builtin_cos(3.14159265358979323846 * __builtin_fmod(x, 2.0)))
__MLXSCI_K1(exp, __builtin_expf(x), __builtin_exp(x))
__MLXSCI_K1(exp2, __builtin_exp2f(x), __builtin_exp2(x))
__MLXSCI_K1(exp10, __builtin_powf(10.0f, x), __builtin_pow(10.0, x))
__MLXSCI_K1(fabs, __builtin_fabsf(x), __builtin_fabs(x))
__MLXSCI_K1(floor, __builtin_floorf(x), __builtin_floor(x))
__MLXSCI_K1(fract, __builtin_fminf(x - __builtin_floorf(x), 0x1.fffffep-1f),
            __builtin_fmin(x - __builtin_floor(x), 0x1.fffffffffffffp-1))
__MLXSCI_K1(log, __builtin_logf(x), __builtin_log(x))
__MLXSCI_K1(log2, __builtin_log2f(x), __builtin_log2(x))
__MLXSCI_K1(log10, __builtin_log10f(x), __builtin_log10(x))
__MLXSCI_K1(rint, __builtin_rintf(x), __builtin_rint(x))
__MLXSCI_K1(round, __builtin_roundf(x), __builtin_round(x))
__MLXSCI_K1(rsqrt, 1.0f / __builtin_sqrtf(x), 1.0 / __builtin_sqrt(x))
__MLXSCI_K1(sin, __builtin_sinf(x), __builtin_sin(x))
__MLXSCI_K1(sinh, __builtin_sinhf(x), __builtin_sinh(x))
__MLXSCI_K1(sinpi, float(__builtin_sin(3.14159265358979323846 * __builtin_fmod(double(x), 2.0))),
            __builtin_sin(3.14159265358979323846 * __builtin_fmod(x, 2.0)))
__MLXSCI_K1(sqrt, __builtin_sqrtf(x), __builtin_sqrt(x))
__MLXSCI_K1(tan, __builtin_tanf(x), __builtin_tan(x))
__MLXSCI_K1(tanh, __builtin_tanhf(x), __builtin_tanh(x))
__MLXSCI_K1(tanpi, float(__builtin_tan(3.14159265358979323846 * __builtin_fmod(double(x), 2.0))),
            __builtin_tan(3.14159265358979323846 * __builtin_fmod(x, 2.0)))
__MLXSCI_K1(trunc, __builtin_truncf(x), __builtin_trunc(x))
__MLXSCI_K1(log1p, __builtin_log1pf(x), __builtin_log1p(x))
__MLXSCI_K1(sign, x > 0 ? 1.0f : (x < 0 ? -1.0f : (x == x ? x : 0.0f)),
            x > 0 ? 1.0 : (x < 0 ? -1.0 : (x == x ? x : 0.0)))
__MLXSCI_K1(saturate, __builtin_fminf(__builtin_fmaxf(x, 0.0f), 1.0f),
            __builtin_fmin(__builtin_fmax(x, 0.0), 1.0))
#undef __MLXSCI_K1
#define __MLXSCI_K2(NAME, FEXPR, DEXPR)                       \
  inline float NAME(float x, float y) { return FEXPR; }       \
  inline double NAME(double x, double y) { return DEXPR; }
__MLXSCI_K2(atan2, __builtin_atan2f(x, y), __builtin_atan2(x, y))
__MLXSCI_K2(copysign, __builtin_copysignf(x, y), __builtin_copysign(x, y))
__MLXSCI_K2(fdim, __builtin_fdimf(x, y), __builtin_fdim(x, y))
__MLXSCI_K2(fmax, __builtin_fmaxf(x, y), __builtin_fmax(x, y))
__MLXSCI_K2(fmin, __builtin_fminf(x, y), __builtin_fmin(x, y))
__MLXSCI_K2(fmod, __builtin_fmodf(x, y), __builtin_fmod(x, y))
__MLXSCI_K2(hypot, __builtin_hypotf(x, y), __builtin_hypot(x, y))
__MLXSCI_K2(nextafter, __builtin_nextafterf(x, y), __builtin_nextafter(x, y))
__MLXSCI_K2(pow, __builtin_powf(x, y), __builtin_pow(x, y))
__MLXSCI_K2(powr, __builtin_powf(x, y), __builtin_pow(x, y))
__MLXSCI_K2(divide, x / y, x / y)
__MLXSCI_K2(step, y < x ? 0.0f : 1.0f, y < x ? 0.0 : 1.0)
#undef __MLXSCI_K2
inline float fma(float x, float y, float z) { return __builtin_fmaf(x, y, z); }
inline double fma(double x, double y, double z) { return __builtin_fma(x, y, z); }
}  // namespace __k

// Unary float functions: T is float, half, bfloat (computed in float and
// rounded) or double, or a vector of them.
#define __MLXSCI_F1(NAME)                                                      \
  template <typename T, __mlxsci::en<__mlxsci::is_float<T>> = 0>              \
  inline T NAME(T x) {                                                         \
    return __mlxsci::map<T>(                                                   \
        [](auto e) {                                                           \
          using E = decltype(e);                                               \
          return static_cast<E>(__k::NAME(static_cast<__mlxsci::calc_t<E>>(e))); \
        },                                                                     \
        x);                                                                    \
  }
__MLXSCI_F1(acos)
__MLXSCI_F1(acosh)
__MLXSCI_F1(asin)
__MLXSCI_F1(asinh)
__MLXSCI_F1(atan)
__MLXSCI_F1(atanh)
__MLXSCI_F1(ceil)
__MLXSCI_F1(cos)
__MLXSCI_F1(cosh)
__MLXSCI_F1(cospi)
__MLXSCI_F1(exp)
__MLXSCI_F1(exp2)
__MLXSCI_F1(exp10)
__MLXSCI_F1(fabs)
__MLXSCI_F1(floor)
__MLXSCI_F1(fract)
__MLXSCI_F1(log)
__MLXSCI_F1(log2)
__MLXSCI_F1(log10)
__MLXSCI_F1(rint)
__MLXSCI_F1(round)
__MLXSCI_F1(rsqrt)
__MLXSCI_F1(sin)
__MLXSCI_F1(sinh)
__MLXSCI_F1(sinpi)
__MLXSCI_F1(sqrt)
__MLXSCI_F1(tan)
__MLXSCI_F1(tanh)
__MLXSCI_F1(tanpi)
__MLXSCI_F1(trunc)
__MLXSCI_F1(log1p)
__MLXSCI_F1(saturate)
#undef __MLXSCI_F1

// The C library's overloads, so that metal::pow(x, 2.0f) (qualified, also
// through metal::fast and metal::precise) finds them too.
using ::atan2;
using ::copysign;
using ::fdim;
using ::fmax;
using ::fmin;
using ::fmod;
using ::hypot;
using ::nextafter;
using ::pow;
using ::fma;

// Binary float functions; scalars mix with vectors (splat). When both
// arguments are standard C++ arithmetic scalars (float, double, int, ...),
// the C library's overloads (from <cmath>, which is always included) are the
// ones that apply, so that e.g. pow(x, 2) is not ambiguous: the same value
// for float arguments, computed in double for mixed ones.
#define __MLXSCI_F2(NAME, LIBM)                                                \
  template <typename A, typename B, typename R = __mlxsci::common_t<A, B>,     \
            __mlxsci::en<__mlxsci::is_float<R> &&                              \
                         !(LIBM && __mlxsci::libm_args<A, B>)> = 0>            \
  inline R NAME(A x, B y) {                                                    \
    return __mlxsci::map<R>(                                                   \
        [](auto a, auto b) {                                                   \
          using E = decltype(a);                                               \
          using C = __mlxsci::calc_t<E>;                                       \
          return static_cast<E>(__k::NAME(static_cast<C>(a), static_cast<C>(b))); \
        },                                                                     \
        x, y);                                                                 \
  }
__MLXSCI_F2(atan2, true)
__MLXSCI_F2(copysign, true)
__MLXSCI_F2(fdim, true)
__MLXSCI_F2(fmax, true)
__MLXSCI_F2(fmin, true)
__MLXSCI_F2(fmod, true)
__MLXSCI_F2(hypot, true)
__MLXSCI_F2(nextafter, true)
__MLXSCI_F2(pow, true)
__MLXSCI_F2(powr, false)
__MLXSCI_F2(divide, false)
__MLXSCI_F2(step, false)
#undef __MLXSCI_F2

// abs: floats and signed integers (unsigned: identity).
template <typename T, __mlxsci::en<__mlxsci::is_num<T>> = 0>
inline T abs(T x) {
  return __mlxsci::map<T>(
      [](auto e) -> decltype(e) {
        using E = decltype(e);
        if constexpr (__mlxsci::is_fscalar<E>)
          return static_cast<E>(__k::fabs(static_cast<__mlxsci::calc_t<E>>(e)));
        else if constexpr (std::is_signed_v<E>)
          return e < 0 ? static_cast<E>(static_cast<__mlxsci::uint_of<E>>(0) -
                                        static_cast<__mlxsci::uint_of<E>>(e))
                       : e;
        else
          return e;
      },
      x);
}

// sign (floats)
template <typename T, __mlxsci::en<__mlxsci::is_float<T>> = 0>
inline T sign(T x) {
  return __mlxsci::map<T>(
      [](auto e) {
        using E = decltype(e);
        return static_cast<E>(__k::sign(static_cast<__mlxsci::calc_t<E>>(e)));
      },
      x);
}

// min / max: floats follow fmin/fmax (a NaN operand yields the other one);
// integers compare as integers.
template <typename A, typename B, typename R = __mlxsci::common_t<A, B>,
          __mlxsci::en<__mlxsci::is_num<R>> = 0>
inline R max(A x, B y) {
  return __mlxsci::map<R>(
      [](auto a, auto b) -> decltype(a) {
        using E = decltype(a);
        if constexpr (__mlxsci::is_fscalar<E>) {
          using C = __mlxsci::calc_t<E>;
          return static_cast<E>(__k::fmax(static_cast<C>(a), static_cast<C>(b)));
        } else {
          return a < b ? b : a;
        }
      },
      x, y);
}
template <typename A, typename B, typename R = __mlxsci::common_t<A, B>,
          __mlxsci::en<__mlxsci::is_num<R>> = 0>
inline R min(A x, B y) {
  return __mlxsci::map<R>(
      [](auto a, auto b) -> decltype(a) {
        using E = decltype(a);
        if constexpr (__mlxsci::is_fscalar<E>) {
          using C = __mlxsci::calc_t<E>;
          return static_cast<E>(__k::fmin(static_cast<C>(a), static_cast<C>(b)));
        } else {
          return b < a ? b : a;
        }
      },
      x, y);
}
template <typename A, typename B, typename C, typename R = __mlxsci::common_t<A, B, C>,
          __mlxsci::en<__mlxsci::is_num<R>> = 0>
inline R clamp(A x, B lo, C hi) {
  return metal::min(metal::max(static_cast<R>(x), static_cast<R>(lo)), static_cast<R>(hi));
}
template <typename A, typename B, typename C, typename R = __mlxsci::common_t<A, B, C>,
          __mlxsci::en<__mlxsci::is_num<R>> = 0>
inline R max3(A x, B y, C z) {
  return metal::max(metal::max(static_cast<R>(x), static_cast<R>(y)), static_cast<R>(z));
}
template <typename A, typename B, typename C, typename R = __mlxsci::common_t<A, B, C>,
          __mlxsci::en<__mlxsci::is_num<R>> = 0>
inline R min3(A x, B y, C z) {
  return metal::min(metal::min(static_cast<R>(x), static_cast<R>(y)), static_cast<R>(z));
}
template <typename A, typename B, typename C, typename R = __mlxsci::common_t<A, B, C>,
          __mlxsci::en<__mlxsci::is_num<R>> = 0>
inline R median3(A x, B y, C z) {
  R a = static_cast<R>(x), b = static_cast<R>(y), c = static_cast<R>(z);
  return metal::max(metal::min(a, b), metal::min(metal::max(a, b), c));
}
template <typename A, typename B, typename C, typename R = __mlxsci::common_t<A, B, C>,
          __mlxsci::en<__mlxsci::is_float<R>> = 0>
inline R fmax3(A x, B y, C z) {
  return metal::max3(x, y, z);
}
template <typename A, typename B, typename C, typename R = __mlxsci::common_t<A, B, C>,
          __mlxsci::en<__mlxsci::is_float<R>> = 0>
inline R fmin3(A x, B y, C z) {
  return metal::min3(x, y, z);
}
template <typename A, typename B, typename C, typename R = __mlxsci::common_t<A, B, C>,
          __mlxsci::en<__mlxsci::is_float<R>> = 0>
inline R fmedian3(A x, B y, C z) {
  return metal::median3(x, y, z);
}

// fma / mad / mix / smoothstep
template <typename A, typename B, typename C, typename R = __mlxsci::common_t<A, B, C>,
          __mlxsci::en<__mlxsci::is_float<R> && !__mlxsci::libm_args<A, B, C>> = 0>
inline R fma(A x, B y, C z) {
  return __mlxsci::map<R>(
      [](auto a, auto b, auto c) {
        using E = decltype(a);
        using K = __mlxsci::calc_t<E>;
        return static_cast<E>(__k::fma(static_cast<K>(a), static_cast<K>(b), static_cast<K>(c)));
      },
      x, y, z);
}
template <typename A, typename B, typename C, typename R = __mlxsci::common_t<A, B, C>,
          __mlxsci::en<__mlxsci::is_float<R>> = 0>
inline R mad(A x, B y, C z) {
  return metal::fma(static_cast<R>(x), static_cast<R>(y), static_cast<R>(z));
}
template <typename A, typename B, typename C, typename R = __mlxsci::common_t<A, B, C>,
          __mlxsci::en<__mlxsci::is_float<R>> = 0>
inline R mix(A x, B y, C a) {
  R xr = static_cast<R>(x), yr = static_cast<R>(y), ar = static_cast<R>(a);
  return xr + (yr - xr) * ar;
}
template <typename A, typename B, typename C, typename R = __mlxsci::common_t<A, B, C>,
          __mlxsci::en<__mlxsci::is_float<R>> = 0>
inline R smoothstep(A e0, B e1, C x) {
  R t = metal::clamp((static_cast<R>(x) - static_cast<R>(e0)) /
                         (static_cast<R>(e1) - static_cast<R>(e0)),
                     0, 1);
  return t * t * (static_cast<R>(3) - static_cast<R>(2) * t);
}

// sincos(x, cosval): returns sin, writes cos.
template <typename T, typename U, __mlxsci::en<__mlxsci::is_float<T>> = 0>
inline T sincos(T x, U& c) {
  c = metal::cos(x);
  return metal::sin(x);
}
template <typename T, typename U, __mlxsci::en<__mlxsci::is_float<T>> = 0>
inline T sincos(T x, U* c) {
  *c = metal::cos(x);
  return metal::sin(x);
}

// ldexp / frexp / modf / ilogb
template <typename T, typename I, __mlxsci::en<__mlxsci::is_float<T>> = 0>
inline T ldexp(T x, I k) {
  return __mlxsci::map<T>(
      [](auto a, auto b) {
        using E = decltype(a);
        using C = __mlxsci::calc_t<E>;
        return static_cast<E>(C(a) * __builtin_pow(2.0, static_cast<double>(b)));
      },
      x, k);
}
template <typename T, typename I, __mlxsci::en<__mlxsci::is_float<T>> = 0>
inline T frexp(T x, I& e) {
  if constexpr (__mlxsci::vt<T>::is_vec) {
    T r{};
    for (int i = 0; i < __mlxsci::vt<T>::n; ++i) {
      int k;
      r[i] = static_cast<__mlxsci::elem_t<T>>(__builtin_frexp(static_cast<double>(x[i]), &k));
      e[i] = k;
    }
    return r;
  } else {
    int k;
    T r = static_cast<T>(__builtin_frexp(static_cast<double>(x), &k));
    e = k;
    return r;
  }
}
template <typename T, __mlxsci::en<__mlxsci::is_float<T>> = 0>
inline T modf(T x, T& ip) {
  ip = metal::trunc(x);
  return __mlxsci::map<T>(
      [](auto a) {
        using E = decltype(a);
        using C = __mlxsci::calc_t<E>;
        C t = __k::trunc(C(a));
        return static_cast<E>(__builtin_isinf(C(a)) ? __builtin_copysign(0.0, double(a)) : C(a) - t);
      },
      x);
}
template <typename T, __mlxsci::en<__mlxsci::is_float<T>> = 0>
inline auto ilogb(T x) {
  if constexpr (__mlxsci::vt<T>::is_vec) {
    __mlxsci::v<int, __mlxsci::vt<T>::n> r{};
    for (int i = 0; i < __mlxsci::vt<T>::n; ++i) r[i] = __builtin_ilogb(static_cast<double>(x[i]));
    return r;
  } else {
    return static_cast<int>(__builtin_ilogb(static_cast<double>(x)));
  }
}

// ---- relational ------------------------------------------------------------------
#define __MLXSCI_REL(NAME, EXPR)                                                \
  template <typename T, __mlxsci::en<__mlxsci::is_float<T>> = 0>               \
  inline __mlxsci::bool_t<T> NAME(T x) {                                        \
    return __mlxsci::map_to<__mlxsci::bool_t<T>, T>(                             \
        [](auto e) -> bool {                                                    \
          auto c = static_cast<__mlxsci::calc_t<decltype(e)>>(e);               \
          return EXPR;                                                          \
        },                                                                      \
        x);                                                                     \
  }
__MLXSCI_REL(isnan, __builtin_isnan(c))
__MLXSCI_REL(isinf, __builtin_isinf(c))
__MLXSCI_REL(isfinite, __builtin_isfinite(c))
__MLXSCI_REL(isnormal, __builtin_isnormal(e))
__MLXSCI_REL(signbit, __builtin_signbit(c))
#undef __MLXSCI_REL

#define __MLXSCI_REL2(NAME, EXPR)                                               \
  template <typename A, typename B, typename R = __mlxsci::common_t<A, B>,       \
            __mlxsci::en<__mlxsci::is_float<R>> = 0>                             \
  inline __mlxsci::bool_t<R> NAME(A x, B y) {                                    \
    __mlxsci::bool_t<R> r{};                                                    \
    if constexpr (__mlxsci::vt<R>::is_vec) {                                     \
      for (int i = 0; i < __mlxsci::vt<R>::n; ++i) {                             \
        auto a = static_cast<float>(__mlxsci::el(x, i)),                         \
             b = static_cast<float>(__mlxsci::el(y, i));                         \
        r[i] = (EXPR);                                                           \
      }                                                                          \
    } else {                                                                     \
      auto a = static_cast<double>(x), b = static_cast<double>(y);               \
      r = (EXPR);                                                                \
    }                                                                            \
    return r;                                                                    \
  }
__MLXSCI_REL2(isordered, (a == a) && (b == b))
__MLXSCI_REL2(isunordered, (a != a) || (b != b))
__MLXSCI_REL2(isequal, a == b)
__MLXSCI_REL2(isnotequal, a != b)
__MLXSCI_REL2(isless, a < b)
__MLXSCI_REL2(islessequal, a <= b)
__MLXSCI_REL2(isgreater, a > b)
__MLXSCI_REL2(isgreaterequal, a >= b)
#undef __MLXSCI_REL2

// all / any: bool vectors, comparison results (int vectors of -1/0) and bool.
template <typename T, __mlxsci::en<__mlxsci::vt<T>::is_vec> = 0>
inline bool all(T x) {
  for (int i = 0; i < __mlxsci::vt<T>::n; ++i)
    if (!x[i]) return false;
  return true;
}
template <typename T, __mlxsci::en<__mlxsci::vt<T>::is_vec> = 0>
inline bool any(T x) {
  for (int i = 0; i < __mlxsci::vt<T>::n; ++i)
    if (x[i]) return true;
  return false;
}
template <typename T, __mlxsci::en<__mlxsci::is_boolish<T>> = 0>
inline bool all(const T& x) {
  for (int i = 0; i < __mlxsci::vt<T>::n; ++i)
    if (!x[i]) return false;
  return true;
}
template <typename T, __mlxsci::en<__mlxsci::is_boolish<T>> = 0>
inline bool any(const T& x) {
  for (int i = 0; i < __mlxsci::vt<T>::n; ++i)
    if (x[i]) return true;
  return false;
}
inline bool all(bool x) { return x; }
inline bool any(bool x) { return x; }

// select(a, b, c): c ? b : a, element-wise for vectors.
template <typename A, typename B, typename C, typename R = __mlxsci::common_t<A, B>,
          __mlxsci::en<__mlxsci::vt<R>::is_vec || __mlxsci::is_scalar<R>> = 0>
inline R select(A a, B b, C c) {
  if constexpr (__mlxsci::vt<R>::is_vec) {
    static_assert(!__mlxsci::has_comp<C> || __mlxsci::vt<C>::n == __mlxsci::vt<R>::n,
                  "select: the condition and the values have different numbers of components");
    R r{};
    for (int i = 0; i < __mlxsci::vt<R>::n; ++i) {
      bool ci;
      if constexpr (__mlxsci::has_comp<C>)
        ci = static_cast<bool>(c[i]);
      else
        ci = static_cast<bool>(c);
      r[i] = ci ? static_cast<__mlxsci::elem_t<R>>(__mlxsci::el(b, i))
                : static_cast<__mlxsci::elem_t<R>>(__mlxsci::el(a, i));
    }
    return r;
  } else {
    static_assert(!__mlxsci::has_comp<C>, "select: vector condition with scalar values");
    return c ? static_cast<R>(b) : static_cast<R>(a);
  }
}

// ---- geometric ---------------------------------------------------------------------
template <typename T, __mlxsci::en<__mlxsci::vt<T>::is_vec && __mlxsci::is_float<T>> = 0>
inline __mlxsci::elem_t<T> dot(T a, T b) {
  using E = __mlxsci::elem_t<T>;
  __mlxsci::calc_t<E> s = 0;
  for (int i = 0; i < __mlxsci::vt<T>::n; ++i) s += __mlxsci::calc_t<E>(a[i]) * __mlxsci::calc_t<E>(b[i]);
  return static_cast<E>(s);
}
template <typename T, __mlxsci::en<__mlxsci::is_fscalar<T>> = 0>
inline T dot(T a, T b) {
  return a * b;
}
template <typename T, __mlxsci::en<__mlxsci::is_float<T>> = 0>
inline __mlxsci::elem_t<T> length_squared(T a) {
  return metal::dot(a, a);
}
template <typename T, __mlxsci::en<__mlxsci::is_float<T>> = 0>
inline __mlxsci::elem_t<T> length(T a) {
  using E = __mlxsci::elem_t<T>;
  return static_cast<E>(__k::sqrt(static_cast<__mlxsci::calc_t<E>>(metal::dot(a, a))));
}
template <typename T, __mlxsci::en<__mlxsci::is_float<T>> = 0>
inline __mlxsci::elem_t<T> distance(T a, T b) {
  return metal::length(a - b);
}
template <typename T, __mlxsci::en<__mlxsci::is_float<T>> = 0>
inline __mlxsci::elem_t<T> distance_squared(T a, T b) {
  return metal::length_squared(a - b);
}
template <typename T, __mlxsci::en<__mlxsci::is_float<T>> = 0>
inline T normalize(T a) {
  using E = __mlxsci::elem_t<T>;
  return a * static_cast<E>(__k::rsqrt(static_cast<__mlxsci::calc_t<E>>(metal::dot(a, a))));
}
template <typename T, __mlxsci::en<__mlxsci::vt<T>::is_vec && __mlxsci::vt<T>::n == 3> = 0>
inline T cross(T a, T b) {
  T r{};
  r.x = a.y * b.z - a.z * b.y;
  r.y = a.z * b.x - a.x * b.z;
  r.z = a.x * b.y - a.y * b.x;
  return r;
}
template <typename T, __mlxsci::en<__mlxsci::is_float<T>> = 0>
inline T reflect(T i, T n) {
  return i - static_cast<__mlxsci::elem_t<T>>(2) * metal::dot(n, i) * n;
}
template <typename T, typename S, __mlxsci::en<__mlxsci::is_float<T>> = 0>
inline T refract(T i, T n, S eta) {
  using E = __mlxsci::elem_t<T>;
  E e = static_cast<E>(eta);
  E d = metal::dot(n, i);
  E k = E(1) - e * e * (E(1) - d * d);
  if (k < E(0)) return T(0);
  return e * i - (e * d + metal::sqrt(k)) * n;
}
template <typename T, __mlxsci::en<__mlxsci::is_float<T>> = 0>
inline T faceforward(T n, T i, T nref) {
  return metal::dot(nref, i) < 0 ? n : -n;
}

// ---- integer functions ---------------------------------------------------------------
namespace __ik {
template <typename E>
inline E popcount(E x) {
  using U = __mlxsci::uint_of<E>;
  return static_cast<E>(__builtin_popcountll(static_cast<unsigned long long>(static_cast<U>(x))));
}
template <typename E>
inline E clz(E x) {
  using U = __mlxsci::uint_of<E>;
  constexpr int bits = sizeof(E) * 8;
  U u = static_cast<U>(x);
  if (u == 0) return static_cast<E>(bits);
  return static_cast<E>(__builtin_clzll(static_cast<unsigned long long>(u)) - (64 - bits));
}
template <typename E>
inline E ctz(E x) {
  using U = __mlxsci::uint_of<E>;
  constexpr int bits = sizeof(E) * 8;
  U u = static_cast<U>(x);
  if (u == 0) return static_cast<E>(bits);
  return static_cast<E>(__builtin_ctzll(static_cast<unsigned long long>(u)));
}
template <typename E>
inline E reverse_bits(E x) {
  using U = __mlxsci::uint_of<E>;
  constexpr int bits = sizeof(E) * 8;
  unsigned long long u = static_cast<U>(x);
  return static_cast<E>(static_cast<U>(__builtin_bitreverse64(u) >> (64 - bits)));
}
template <typename E>
inline E mulhi(E a, E b) {
  constexpr int bits = sizeof(E) * 8;
  if constexpr (bits == 64) {
    using W = std::conditional_t<std::is_signed_v<E>, __int128, unsigned __int128>;
    return static_cast<E>((W(a) * W(b)) >> 64);
  } else {
    using W = std::conditional_t<std::is_signed_v<E>, long long, unsigned long long>;
    return static_cast<E>((W(a) * W(b)) >> bits);
  }
}
template <typename E>
inline E rotate(E v, E i) {
  using U = __mlxsci::uint_of<E>;
  constexpr unsigned bits = sizeof(E) * 8;
  U u = static_cast<U>(v);
  unsigned s = static_cast<unsigned>(static_cast<U>(i)) % bits;
  if (s == 0) return v;
  return static_cast<E>(static_cast<U>((u << s) | (u >> (bits - s))));
}
template <typename E>
inline E addsat(E a, E b) {
  E r;
  if (__builtin_add_overflow(a, b, &r))
    return (std::is_signed_v<E> && b < 0) ? std::numeric_limits<E>::min()
                                           : std::numeric_limits<E>::max();
  return r;
}
template <typename E>
inline E subsat(E a, E b) {
  E r;
  if (__builtin_sub_overflow(a, b, &r)) {
    if constexpr (std::is_signed_v<E>)
      return b > 0 ? std::numeric_limits<E>::min() : std::numeric_limits<E>::max();
    else
      return 0;
  }
  return r;
}
template <typename E>
inline E absdiff(E a, E b) {
  using U = __mlxsci::uint_of<E>;
  return static_cast<E>(a > b ? static_cast<U>(static_cast<U>(a) - static_cast<U>(b))
                              : static_cast<U>(static_cast<U>(b) - static_cast<U>(a)));
}
template <typename E>
inline E hadd(E a, E b) {
  return static_cast<E>((a >> 1) + (b >> 1) + (a & b & 1));
}
template <typename E>
inline E rhadd(E a, E b) {
  return static_cast<E>((a >> 1) + (b >> 1) + ((a | b) & 1));
}
}  // namespace __ik

#define __MLXSCI_I1(NAME)                                                      \
  template <typename T, __mlxsci::en<__mlxsci::is_int<T>> = 0>                \
  inline T NAME(T x) {                                                         \
    return __mlxsci::map<T>([](auto e) { return __ik::NAME(e); }, x);          \
  }
__MLXSCI_I1(popcount)
__MLXSCI_I1(clz)
__MLXSCI_I1(ctz)
__MLXSCI_I1(reverse_bits)
#undef __MLXSCI_I1
#define __MLXSCI_I2(NAME)                                                      \
  template <typename A, typename B, typename R = __mlxsci::common_t<A, B>,     \
            __mlxsci::en<__mlxsci::is_int<R>> = 0>                             \
  inline R NAME(A x, B y) {                                                    \
    return __mlxsci::map<R>([](auto a, auto b) { return __ik::NAME(a, b); }, x, y); \
  }
__MLXSCI_I2(mulhi)
__MLXSCI_I2(rotate)
__MLXSCI_I2(addsat)
__MLXSCI_I2(subsat)
__MLXSCI_I2(absdiff)
__MLXSCI_I2(hadd)
__MLXSCI_I2(rhadd)
#undef __MLXSCI_I2

template <typename A, typename B, typename C, typename R = __mlxsci::common_t<A, B, C>,
          __mlxsci::en<__mlxsci::is_int<R>> = 0>
inline R madhi(A a, B b, C c) {
  return metal::mulhi(static_cast<R>(a), static_cast<R>(b)) + static_cast<R>(c);
}
template <typename A, typename B, typename C, typename R = __mlxsci::common_t<A, B, C>,
          __mlxsci::en<__mlxsci::is_int<R>> = 0>
inline R madsat(A a, B b, C c) {
  return __mlxsci::map<R>(
      [](auto x, auto y, auto z) {
        using E = decltype(x);
        E p;
        if (__builtin_mul_overflow(x, y, &p))
          p = ((x < 0) != (y < 0)) ? std::numeric_limits<E>::min() : std::numeric_limits<E>::max();
        return __ik::addsat(p, z);
      },
      a, b, c);
}
template <typename A, typename B, typename R = __mlxsci::common_t<A, B>,
          __mlxsci::en<__mlxsci::is_int<R>> = 0>
inline R mul24(A a, B b) {
  return static_cast<R>(a) * static_cast<R>(b);
}
template <typename A, typename B, typename C, typename R = __mlxsci::common_t<A, B, C>,
          __mlxsci::en<__mlxsci::is_int<R>> = 0>
inline R mad24(A a, B b, C c) {
  return static_cast<R>(a) * static_cast<R>(b) + static_cast<R>(c);
}
template <typename T, __mlxsci::en<__mlxsci::is_int<T>> = 0>
inline T extract_bits(T x, uint offset, uint bits) {
  return __mlxsci::map<T>(
      [offset, bits](auto e) {
        using E = decltype(e);
        using U = __mlxsci::uint_of<E>;
        constexpr uint W = sizeof(E) * 8;
        if (bits == 0) return E(0);
        if constexpr (std::is_signed_v<E>) {
          // sign-extend the extracted field
          U u = static_cast<U>(static_cast<U>(e) << (W - offset - bits));
          return static_cast<E>(static_cast<E>(u) >> (W - bits));
        } else {
          U u = static_cast<U>(static_cast<U>(e) >> offset);
          if (bits < W) u = static_cast<U>(u & ((U(1) << bits) - U(1)));
          return static_cast<E>(u);
        }
      },
      x);
}
template <typename T, __mlxsci::en<__mlxsci::is_int<T>> = 0>
inline T insert_bits(T base, T insert, uint offset, uint bits) {
  return __mlxsci::map<T>(
      [offset, bits](auto b, auto ins) {
        using E = decltype(b);
        using U = __mlxsci::uint_of<E>;
        constexpr uint W = sizeof(E) * 8;
        if (bits == 0) return b;
        U mask = bits >= W ? U(~U(0)) : static_cast<U>(((U(1) << bits) - U(1)) << offset);
        return static_cast<E>((static_cast<U>(b) & ~mask) |
                              (static_cast<U>(static_cast<U>(ins) << offset) & mask));
      },
      base, insert);
}

// ---- address-space-free memory model ----------------------------------------------------
enum class mem_flags : uint {
  mem_none = 0,
  mem_device = 1,
  mem_threadgroup = 2,
  mem_texture = 4,
  mem_threadgroup_imageblock = 8,
  mem_object_data = 16,
};
constexpr mem_flags operator|(mem_flags a, mem_flags b) {
  return static_cast<mem_flags>(static_cast<uint>(a) | static_cast<uint>(b));
}
constexpr mem_flags operator&(mem_flags a, mem_flags b) {
  return static_cast<mem_flags>(static_cast<uint>(a) & static_cast<uint>(b));
}

enum memory_order {
  memory_order_relaxed = 0,
  memory_order_acquire = 2,
  memory_order_release = 3,
  memory_order_acq_rel = 4,
  memory_order_seq_cst = 5,
};
enum thread_scope {
  thread_scope_thread = 0,
  thread_scope_simdgroup = 1,
  thread_scope_threadgroup = 2,
  thread_scope_device = 3,
};
inline void atomic_thread_fence(mem_flags, memory_order, thread_scope = thread_scope_device) {}

// ---- atomics -------------------------------------------------------------------------------
// sim_runtime.h defines __SIM_ATOMIC_SCOPE for a kernel's TU; a program that
// includes this prelude alone (its tests) marks nothing.
#ifndef __SIM_ATOMIC_SCOPE
#define __SIM_ATOMIC_SCOPE(ADDR) ((void)0)
#endif
// Same size and layout as T; the fibers never switch inside these functions.
// __SIM_ATOMIC_SCOPE tells the profiled variant's hooks that each is one
// atomic access (sim_runtime.h): the race detector and the lock-step
// schedule need to know.
template <typename T>
struct atomic {
  T __v;
};
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<float> atomic_float;
typedef atomic<bool> atomic_bool;
typedef atomic<ulong> atomic_ulong;
typedef atomic<long> atomic_long;

namespace __at {
template <typename T>
inline atomic<T>* nv(volatile atomic<T>* p) {
  return const_cast<atomic<T>*>(p);
}
template <typename T>
inline atomic<T>* nv(atomic<T>* p) {
  return p;
}
template <typename T>
struct is_atomic_ptr : std::false_type {};
template <typename T>
struct is_atomic_ptr<atomic<T>*> : std::true_type {
  using value_type = T;
};
template <typename T>
struct is_atomic_ptr<volatile atomic<T>*> : std::true_type {
  using value_type = T;
};
template <typename P>
using val_t = typename is_atomic_ptr<P>::value_type;
}  // namespace __at

#define __MLXSCI_ATOMIC_PTR(P) std::enable_if_t<__at::is_atomic_ptr<P>::value, int> = 0

template <typename P, typename U, __MLXSCI_ATOMIC_PTR(P)>
inline void atomic_store_explicit(P obj, U desired, memory_order = memory_order_relaxed) {
  __SIM_ATOMIC_SCOPE(obj);
  __at::nv(obj)->__v = static_cast<__at::val_t<P>>(desired);
}
template <typename P, __MLXSCI_ATOMIC_PTR(P)>
inline __at::val_t<P> atomic_load_explicit(P obj, memory_order = memory_order_relaxed) {
  __SIM_ATOMIC_SCOPE(obj);
  return __at::nv(obj)->__v;
}
template <typename P, typename U, __MLXSCI_ATOMIC_PTR(P)>
inline __at::val_t<P> atomic_exchange_explicit(P obj, U desired, memory_order = memory_order_relaxed) {
  __SIM_ATOMIC_SCOPE(obj);
  auto* o = __at::nv(obj);
  __at::val_t<P> old = o->__v;
  o->__v = static_cast<__at::val_t<P>>(desired);
  return old;
}
template <typename P, typename E, typename U, __MLXSCI_ATOMIC_PTR(P)>
inline bool atomic_compare_exchange_weak_explicit(P obj, E* expected, U desired,
                                                  memory_order = memory_order_relaxed,
                                                  memory_order = memory_order_relaxed) {
  __SIM_ATOMIC_SCOPE(obj);
  auto* o = __at::nv(obj);
  using T = __at::val_t<P>;
  T cur = o->__v;
  // bitwise comparison, as the hardware compares words
  if (memcmp(&cur, expected, sizeof(T)) == 0) {
    o->__v = static_cast<T>(desired);
    return true;
  }
  *expected = cur;
  return false;
}
template <typename P, typename E, typename U, __MLXSCI_ATOMIC_PTR(P)>
inline bool atomic_compare_exchange_strong_explicit(P obj, E* expected, U desired,
                                                    memory_order s = memory_order_relaxed,
                                                    memory_order f = memory_order_relaxed) {
  return metal::atomic_compare_exchange_weak_explicit(obj, expected, desired, s, f);
}

#define __MLXSCI_ATOMIC_RMW(NAME, EXPR)                                                  \
  template <typename P, typename U, __MLXSCI_ATOMIC_PTR(P)>                              \
  inline __at::val_t<P> NAME(P obj, U operand, memory_order = memory_order_relaxed) {    \
    __SIM_ATOMIC_SCOPE(obj);                                                             \
    using T = __at::val_t<P>;                                                            \
    auto* o = __at::nv(obj);                                                             \
    T old = o->__v;                                                                      \
    T b = static_cast<T>(operand);                                                       \
    o->__v = static_cast<T>(EXPR);                                                       \
    return old;                                                                          \
  }
__MLXSCI_ATOMIC_RMW(atomic_fetch_add_explicit, old + b)
__MLXSCI_ATOMIC_RMW(atomic_fetch_sub_explicit, old - b)
__MLXSCI_ATOMIC_RMW(atomic_fetch_min_explicit, b < old ? b : old)
__MLXSCI_ATOMIC_RMW(atomic_fetch_max_explicit, old < b ? b : old)
__MLXSCI_ATOMIC_RMW(atomic_fetch_and_explicit, old & b)
__MLXSCI_ATOMIC_RMW(atomic_fetch_or_explicit, old | b)
__MLXSCI_ATOMIC_RMW(atomic_fetch_xor_explicit, old ^ b)
#undef __MLXSCI_ATOMIC_RMW

// Short forms (C11 style, seq_cst); MSL only has the _explicit ones, but they
// cost nothing here.
template <typename P, __MLXSCI_ATOMIC_PTR(P)>
inline __at::val_t<P> atomic_load(P obj) {
  return metal::atomic_load_explicit(obj);
}
template <typename P, typename U, __MLXSCI_ATOMIC_PTR(P)>
inline void atomic_store(P obj, U v) {
  metal::atomic_store_explicit(obj, v);
}
#undef __MLXSCI_ATOMIC_PTR

// ---- matrices ------------------------------------------------------------------------
template <typename T, int C, int R>
inline __mlxsci::mat<T, R, C> transpose(const __mlxsci::mat<T, C, R>& m) {
  __mlxsci::mat<T, R, C> t;
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) t[r][c] = m[c][r];
  return t;
}
template <typename T>
inline T determinant(const __mlxsci::mat<T, 2, 2>& m) {
  return m[0][0] * m[1][1] - m[1][0] * m[0][1];
}
template <typename T>
inline T determinant(const __mlxsci::mat<T, 3, 3>& m) {
  return m[0][0] * (m[1][1] * m[2][2] - m[2][1] * m[1][2]) -
         m[1][0] * (m[0][1] * m[2][2] - m[2][1] * m[0][2]) +
         m[2][0] * (m[0][1] * m[1][2] - m[1][1] * m[0][2]);
}
template <typename T>
inline T determinant(const __mlxsci::mat<T, 4, 4>& m) {
  T d = 0;
  for (int c = 0; c < 4; ++c) {
    __mlxsci::mat<T, 3, 3> minor;
    for (int cc = 0, k = 0; cc < 4; ++cc) {
      if (cc == c) continue;
      for (int r = 1; r < 4; ++r) minor[k][r - 1] = m[cc][r];
      ++k;
    }
    T s = (c % 2 == 0) ? T(1) : T(-1);
    d += s * m[c][0] * metal::determinant(minor);
  }
  return d;
}

// ---- SIMD-group matrices -----------------------------------------------------------------
// MSL 3.2 §2.4: simdgroup_matrix<T, Cols, Rows> with T half, bfloat (Metal 3.1+) or float
// and Cols = Rows = 8 (simdgroup_half8x8, simdgroup_bfloat8x8, simdgroup_float8x8); the
// threads of a SIMD-group execute every operation on it cooperatively, so each operation
// must run under control flow that is uniform in the SIMD-group (otherwise undefined),
// and "the mapping of matrix elements to threads in the SIMD-group is unspecified".
// MSL 3.2 §6.7 (§6.8 in MSL 4), Tables 6.9 and 6.10: the diagonal constructor,
// make_filled_simdgroup_matrix, simdgroup_load/simdgroup_store (threadgroup or device
// memory; elements_per_row = the row stride of the memory layout, default Cols;
// matrix_origin, default 0; transpose_matrix, default false), simdgroup_multiply
// (d = a * b), simdgroup_multiply_accumulate (d = a * b + c) and a * b.
//
// Emulation: every lane holds the WHOLE 8x8 matrix (64 elements, row-major). A load
// reads all 64 elements, a multiply computes the full product, a store writes all 64,
// every lane the same values. Because the spec requires the whole SIMD-group to execute
// each call with the same arguments (uniform control flow), every lane's copy equals the
// matrix the SIMD-group holds together, whatever the hardware's element-to-lane mapping
// is, so results are those of the GPU (up to the accumulation order, which the spec does
// not fix: here products are summed in k order in float and rounded to T once).
// Loads and stores are collective: the lanes meet before the memory access (so writes
// that other lanes made before the call are seen, as in the GPU's lockstep execution)
// and after it (so no lane's later write reaches the access); the access itself runs on
// each lane, where a fault is reported against the lane and the buffer.
//
// thread_elements() breaks the "every lane holds the same matrix" picture: it is the
// lane's own two elements, as a vec<T, 2> the kernel reads and writes one lane at a
// time (MLX's steel GEMM fills A and B fragments through it and reads its results
// through it). Where the mapping comes from: the MSL specification (3.2, section 2.4)
// does not list the member and says the element-to-thread mapping is unspecified, and
// no Apple document found gives it. Apple's compiler accepts the member, and the
// mapping emulated here is the one Apple's own MLX Metal kernels rely on (and are
// correct with on Apple GPUs): mlx/backend/metal/kernels/steel/gemm/mma.h, BlockMMA's
// constructor and BaseMMAFrag<T, 8, 8>::get_coord; other published kernels use the
// same formula. With q = lane / 4, lane `lane` holds row (q & 4) + (lane / 2) % 4,
// columns c and c + 1 where c = (q & 2) * 2 + (lane % 2) * 2: thread_elements()[0] is
// (row, c), [1] is (row, c + 1). Lanes 0-7 hold rows 0-3 x columns 0-3, lanes 8-15
// rows 0-3 x columns 4-7, lanes 16-23 rows 4-7 x 0-3, lanes 24-31 rows 4-7 x 4-7:
// each element exactly once.
// How: the view is the lane's own two elements of its whole copy, in place (__e is
// aligned for a vec<T, 2> at an even column), so a write through it, or through a
// reference the kernel kept, changes this lane's copy at this lane's elements, and a
// load or multiply into the matrix changes what the view reads, as with the GPU's
// registers. The other lanes' copies do not see the write yet: before any collective
// use of a matrix (simdgroup_store, simdgroup_multiply(_accumulate), a * b) the lanes
// meet and every lane's whole copy is rebuilt from the lanes' own elements, which hold
// the matrix whether or not a lane wrote; an element whose lane is not at the meeting
// (a partial SIMD-group, a lane that diverged or returned) is NaN, the poison of every
// value the language leaves undefined. Whether a use meets and rebuilds must be the
// same for every lane (a lane that skips a meeting the others wait at would read as
// absent), so it is decided per kernel: only a kernel that uses thread_elements()
// anywhere (te_in_use(), fixed when the library is linked) rebuilds, and meets at its
// multiplies (one rendezvous each; a store meets anyway). So in such a kernel a matrix
// is held distributed, as on the GPU: a lane that is not there holds no element of
// any matrix. Kernels that never name thread_elements() run as before, with the same
// code and matrix size (a per-matrix "written" flag, tried first, made a
// load-multiply-store loop ~15% slower for every kernel).
//
// What it cannot catch: a call in divergent control flow or with arguments that differ
// between lanes (undefined on the GPU, here each lane computes a whole, correct-looking
// matrix; in a kernel that uses thread_elements(), the elements of lanes that are not
// there are NaN); a GPU whose mapping differs from the one above (the specification
// does not promise it).
// Where the spec gives no semantics (MSL 3.2 §6.7 lists matrix_origin without
// describing it), the layout is the one kernels written for Apple GPUs rely on:
// matrix_origin = (column, row) of the tile's first element in the memory layout, and
// with transpose_matrix element (r, c) of the matrix is memory element (c, r) of the tile.
namespace __sgm {
template <typename T>
constexpr bool elem_ok =
    std::is_same_v<T, float> || std::is_same_v<T, _Float16> || std::is_same_v<T, __bf16>;

// The lanes of the SIMD-group that reach this call site meet here (no data moves):
// the runtime's collective rendezvous, the one simdgroup_barrier uses.
inline void meet(const void* site) {
#ifdef MLXSCI_SIM_RUNTIME_H
  __sim_simd_wait(site, nullptr, nullptr, nullptr, 0, 0);
#else
  (void)site;  // the prelude compiled on its own (tests): one thread, nothing to meet
#endif
}

// The lane a fiber runs (thread_index_in_simdgroup); 0 when the prelude is compiled on
// its own.
inline uint lane() {
#ifdef MLXSCI_SIM_RUNTIME_H
  return __sim_current_lane();
#else
  return 0;
#endif
}
// The element thread_elements()[0] of lane l (the layout in the comment above);
// [1] is the next column.
constexpr int te_row(uint l) { return int(((l >> 2) & 4u) | ((l >> 1) & 3u)); }
constexpr int te_col(uint l) { return int(((l >> 1) & 4u) | ((l & 1u) << 1)); }

// Whether the kernel uses thread_elements() anywhere: the same answer for every lane of
// every SIMD-group, fixed before any thread runs, and no writable state (the kernel
// library may define none, see kernel_symbols.py). thread_elements() takes the address
// of te_use<T>::mark, which instantiates a read-only byte in the section sim_sgm_te
// (`retain`: no code refers to it, and the link drops unreferenced sections); the
// linker defines __start_sim_sgm_te only when that section exists, and the weak
// reference is null otherwise.
template <typename T>
struct te_use {
  static const char mark;
};
#if defined(__ELF__)
extern "C" const char __start_sim_sgm_te[] __attribute__((weak, visibility("hidden")));
template <typename T>
__attribute__((section("sim_sgm_te"), used, retain)) const char te_use<T>::mark = 1;
inline bool te_in_use() { return __start_sim_sgm_te != nullptr; }
#else
// No section bounds (Mach-O): every kernel is taken to use it (every multiply meets,
// every use rebuilds): correct for those that do, slower for all.
template <typename T>
const char te_use<T>::mark = 1;
inline bool te_in_use() { return true; }
#endif
}  // namespace __sgm

template <typename T, int Cols, int Rows>
struct simdgroup_matrix {
  static_assert(__sgm::elem_ok<T>,
                "simdgroup_matrix: the element type must be half, bfloat or float "
                "(Metal Shading Language Specification 3.2, section 2.4)");
  static_assert(Cols == 8 && Rows == 8,
                "simdgroup_matrix: only 8x8 matrices exist (Metal Shading Language "
                "Specification 3.2, section 2.4)");
  // mutable: the rebuild before a collective use changes how the value is held (the
  // lanes' own elements folded into every lane's copy), not the value, also for a const
  // matrix. Aligned for thread_elements()'s vec<T, 2> at an even column.
  alignas(2 * sizeof(T)) mutable T __e[Rows][Cols];  // the whole matrix, row-major

  // Declared without a value the GPU's registers hold garbage: here NaN, so a kernel
  // that multiplies or stores a matrix it never loaded or filled fails verification.
  simdgroup_matrix() { fill(static_cast<T>(__builtin_nanf(""))); }
  // MSL 3.2 Table 6.9: a diagonal matrix with the given value.
  explicit simdgroup_matrix(T dval) {
    fill(T(0));
    for (int i = 0; i < Rows && i < Cols; ++i) __e[i][i] = dval;
  }
  void fill(T value) {
    for (int r = 0; r < Rows; ++r)
      for (int c = 0; c < Cols; ++c) __e[r][c] = value;
  }
  // Not in MSL 3.2 (see above): this lane's two elements, in place in its copy.
  vec<T, 2>& thread_elements() {
    (void)&__sgm::te_use<T>::mark;
    const uint l = __sgm::lane();
    return *reinterpret_cast<vec<T, 2>*>(&__e[__sgm::te_row(l)][__sgm::te_col(l)]);
  }
  // MLX reads results so: `thread const auto& accum = results[i].thread_elements();`
  const vec<T, 2>& thread_elements() const {
    (void)&__sgm::te_use<T>::mark;
    const uint l = __sgm::lane();
    return *reinterpret_cast<const vec<T, 2>*>(&__e[__sgm::te_row(l)][__sgm::te_col(l)]);
  }
};
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;

namespace __sgm {
#ifdef MLXSCI_SIM_RUNTIME_H
// The resolver of a meeting before a collective use: io[l]->in is lane l's array of
// io[l]->arg operand pointers (the same operands in every lane, uniform control flow).
// Every operand is rebuilt whole in every lane from the lanes' own elements; a lane
// not at the meeting gives NaN.
template <typename M, typename T>
void rebuild(__SimLaneIO* const* io, uint32_t mask) {
  int first = -1;
  for (int l = 0; l < 32 && first < 0; ++l)
    if (mask & (1u << l)) first = l;
  if (first < 0) return;
  const int n = int(io[first]->arg);
  for (int k = 0; k < n; ++k) {
    auto operand = [&](int l) { return static_cast<const M* const*>(io[l]->in)[k]; };
    T whole[8][8];
    for (int l = 0; l < 32; ++l) {
      const int r = te_row(uint(l)), c = te_col(uint(l));
      const bool here = mask & (1u << l);
      whole[r][c] = here ? operand(l)->__e[r][c] : static_cast<T>(__builtin_nanf(""));
      whole[r][c + 1] = here ? operand(l)->__e[r][c + 1] : static_cast<T>(__builtin_nanf(""));
      // a lane that is not there: the runtime's account of the read it poisons (the
      // first lane here reads it, as every lane here does), named in the verdict
      if (!here) __sim_undefined_read("thread_elements", uint32_t(first), l, __SIM_UB_INACTIVE, 0);
    }
    for (int l = 0; l < 32; ++l)
      if (mask & (1u << l)) memcpy(operand(l)->__e, whole, sizeof whole);
  }
}
#endif

// The meeting before a collective use of the n matrices ops[0..n): with the rebuild
// when the kernel uses thread_elements(), a plain meeting otherwise.
template <typename M>
inline void meet_using(const void* site, const M* const* ops, int n) {
#ifdef MLXSCI_SIM_RUNTIME_H
  using T = std::remove_cv_t<std::remove_reference_t<decltype(ops[0]->__e[0][0])>>;
  if (te_in_use())
    __sim_simd_wait(site, &rebuild<M, T>, ops, nullptr, n, 0);
  else
    meet(site);
#else
  (void)ops, (void)n;  // one thread: its copy is the whole matrix
  meet(site);
#endif
}

// d = a * b + c in every lane from its whole copies, products summed in k order in float
// and rounded to T once. Into a local first: d may be one of the operands.
template <typename T>
inline void multiply_copies(simdgroup_matrix<T, 8, 8>& d, const simdgroup_matrix<T, 8, 8>& a,
                            const simdgroup_matrix<T, 8, 8>& b,
                            const simdgroup_matrix<T, 8, 8>& c) {
  // Row by row, k outermost, so the eight sums of a row run side by side in vector
  // registers (each sum still in k order): every lane of every SIMD-group computes the
  // whole product, a fifth of a run of an hmc candidate built on these.
  T out[8][8];
  for (int r = 0; r < 8; ++r) {
    float acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = static_cast<float>(c.__e[r][j]);
    for (int k = 0; k < 8; ++k) {
      const float ark = static_cast<float>(a.__e[r][k]);
      for (int j = 0; j < 8; ++j) acc[j] += ark * static_cast<float>(b.__e[k][j]);
    }
    for (int j = 0; j < 8; ++j) out[r][j] = static_cast<T>(acc[j]);
  }
  memcpy(d.__e, out, sizeof out);
}
// The multiply of a kernel that uses thread_elements(): the lanes meet at the call
// site and rebuild the operands first. Out of line, so that in the other kernels the
// multiply takes no operand's address.
template <typename T>
__attribute__((noinline, convergent)) void multiply_meeting(simdgroup_matrix<T, 8, 8>& d,
                                                            const simdgroup_matrix<T, 8, 8>& a,
                                                            const simdgroup_matrix<T, 8, 8>& b,
                                                            const simdgroup_matrix<T, 8, 8>& c) {
  const simdgroup_matrix<T, 8, 8>* ops[3] = {&a, &b, &c};
  meet_using(__builtin_return_address(0), ops, 3);
  multiply_copies(d, a, b, c);
}
}  // namespace __sgm

// MSL 3.2 Table 6.9: a matrix filled with the given value.
template <typename T, int Cols, int Rows>
inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, Cols, Rows> m(T(0));
  m.fill(value);
  return m;
}

// Element (r, c) of a tile at `origin` (column, row) in a row-major layout with
// `elements_per_row` elements per row; transposed: the tile's element (c, r).
inline ulong __simdgroup_offset(int r, int c, ulong elements_per_row, ulong2 origin,
                                bool transpose_matrix) {
  const ulong row = origin.y + ulong(transpose_matrix ? c : r);
  const ulong col = origin.x + ulong(transpose_matrix ? r : c);
  return row * elements_per_row + col;
}

namespace __sgm {
// The transposed copies between a tile and a matrix, element by element. Out of line:
// inlined beside the row copies of the plain case, clang merged the two into one scalar
// copy per element through an address select, which undid the row copies.
template <typename T, int Cols, int Rows>
__attribute__((noinline)) void load_transposed(T (&m)[Rows][Cols], const T* src,
                                               ulong elements_per_row, ulong2 origin) {
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < Cols; ++c) m[r][c] = src[__simdgroup_offset(r, c, elements_per_row, origin, true)];
}
template <typename T, int Cols, int Rows>
__attribute__((noinline)) void store_transposed(const T (&m)[Rows][Cols], T* dst,
                                                ulong elements_per_row, ulong2 origin) {
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < Cols; ++c) dst[__simdgroup_offset(r, c, elements_per_row, origin, true)] = m[r][c];
}
}  // namespace __sgm

// MSL 3.2 Table 6.9 (threadgroup and device memory: one overload, address spaces are not
// modelled). T is deduced from both arguments, so a half pointer into a float matrix is
// rejected, as Metal's declarations reject it.
template <typename T, int Cols, int Rows>
__attribute__((noinline, convergent)) void simdgroup_load(simdgroup_matrix<T, Cols, Rows>& d,
                                                          const T* src,
                                                          ulong elements_per_row = Cols,
                                                          ulong2 matrix_origin = 0,
                                                          bool transpose_matrix = false) {
  const char* site = static_cast<const char*>(__builtin_return_address(0));
  __sgm::meet(site);
  T m[Rows][Cols];
  if (!transpose_matrix) {
    // a row at a time, as vector copies: every lane loads all 64 elements, and element
    // by element this was a fifth of a run of an hmc candidate built on these. A read
    // past a buffer faults at the first element past it, as element by element.
    for (int r = 0; r < Rows; ++r)
      memcpy(m[r], src + __simdgroup_offset(r, 0, elements_per_row, matrix_origin, false),
             sizeof m[r]);
  } else {
    __sgm::load_transposed(m, src, elements_per_row, matrix_origin);
  }
  __sgm::meet(site + 1);
  memcpy(d.__e, m, sizeof m);
}

template <typename T, int Cols, int Rows>
__attribute__((noinline, convergent)) void simdgroup_store(const simdgroup_matrix<T, Cols, Rows>& a,
                                                           T* dst,
                                                           ulong elements_per_row = Cols,
                                                           ulong2 matrix_origin = 0,
                                                           bool transpose_matrix = false) {
  const char* site = static_cast<const char*>(__builtin_return_address(0));
  const simdgroup_matrix<T, Cols, Rows>* ops[1] = {&a};
  __sgm::meet_using(site, ops, 1);  // the lanes' own elements folded in (thread_elements())
  if (!transpose_matrix) {
    for (int r = 0; r < Rows; ++r)  // a row at a time, as simdgroup_load
      memcpy(dst + __simdgroup_offset(r, 0, elements_per_row, matrix_origin, false), a.__e[r],
             sizeof a.__e[r]);
  } else {
    __sgm::store_transposed(a.__e, dst, elements_per_row, matrix_origin);
  }
  __sgm::meet(site + 1);
}

// MSL 3.2 Table 6.10: d = a * b + c (a is Rows x K, b is K x Cols; all 8x8). d may be
// one of the operands (acc = a * b + acc).
template <typename T, int Cols, int Rows, int K>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<T, Cols, Rows>& d,
                                          const simdgroup_matrix<T, K, Rows>& a,
                                          const simdgroup_matrix<T, Cols, K>& b,
                                          const simdgroup_matrix<T, Cols, Rows>& c) {
  if (__sgm::te_in_use())
    __sgm::multiply_meeting(d, a, b, c);
  else
    __sgm::multiply_copies(d, a, b, c);
}
// MSL 3.2 Table 6.10: d = a * b.
template <typename T, int Cols, int Rows, int K>
inline void simdgroup_multiply(simdgroup_matrix<T, Cols, Rows>& d,
                               const simdgroup_matrix<T, K, Rows>& a,
                               const simdgroup_matrix<T, Cols, K>& b) {
  metal::simdgroup_multiply_accumulate(d, a, b, simdgroup_matrix<T, Cols, Rows>(T(0)));
}
template <typename T, int Cols, int Rows, int K>
inline simdgroup_matrix<T, Cols, Rows> operator*(const simdgroup_matrix<T, K, Rows>& a,
                                                 const simdgroup_matrix<T, Cols, K>& b) {
  simdgroup_matrix<T, Cols, Rows> d(T(0));
  metal::simdgroup_multiply(d, a, b);
  return d;
}

// ---- fast:: and precise:: ----------------------------------------------------------------
namespace fast {
using namespace ::metal;
}
namespace precise {
using namespace ::metal;
}

}  // namespace metal

using namespace metal;

// ---------------------------------------------------------------------------
// Constants (MSL names)
// ---------------------------------------------------------------------------
#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.434294481903251827651f
#define M_LN2_F 0.693147180559945309417f
#define M_LN10_F 2.30258509299404568402f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.785398163397448309616f
#define M_1_PI_F 0.318309886183790671538f
#define M_2_PI_F 0.636619772367581343076f
#define M_2_SQRTPI_F 1.12837916709551257390f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.707106781186547524401f
#define M_E_H ((half)2.71828182845904523536f)
#define M_LOG2E_H ((half)1.44269504088896340736f)
#define M_LOG10E_H ((half)0.434294481903251827651f)
#define M_LN2_H ((half)0.693147180559945309417f)
#define M_LN10_H ((half)2.30258509299404568402f)
#define M_PI_H ((half)3.14159265358979323846f)
#define M_PI_2_H ((half)1.57079632679489661923f)
#define M_PI_4_H ((half)0.785398163397448309616f)
#define M_1_PI_H ((half)0.318309886183790671538f)
#define M_2_PI_H ((half)0.636619772367581343076f)
#define M_2_SQRTPI_H ((half)1.12837916709551257390f)
#define M_SQRT2_H ((half)1.41421356237309504880f)
#define M_SQRT1_2_H ((half)0.707106781186547524401f)
#ifndef MAXFLOAT
#define MAXFLOAT 0x1.fffffep+127f
#endif
#ifndef HUGE_VALF
#define HUGE_VALF __builtin_huge_valf()
#endif
#ifndef INFINITY
#define INFINITY __builtin_inff()
#endif
#ifndef NAN
#define NAN __builtin_nanf("")
#endif
#ifndef FLT_MAX
#define FLT_MAX 0x1.fffffep+127f
#endif
#ifndef FLT_MIN
#define FLT_MIN 0x1p-126f
#endif
#ifndef FLT_EPSILON
#define FLT_EPSILON 0x1p-23f
#endif
#define HALF_MAX ((half)65504.0f)
#define HALF_MIN ((half)0x1p-14f)
#define HALF_EPSILON ((half)0x1p-10f)
#define MAXHALF HALF_MAX
#define HUGE_VALH ((half)__builtin_inff())

// ---------------------------------------------------------------------------
// MLX utils.h subset (what mx.fast.metal_kernel prepends)
// ---------------------------------------------------------------------------
#define METAL_FUNC inline __attribute__((always_inline))
#define MTL_CONST static constexpr const
#define MLX_MTL_CONST static constexpr const
#define MLX_MTL_PRAGMA_UNROLL _Pragma("clang loop unroll(full)")
#define STEEL_CONST static constexpr const
#define STEEL_PRAGMA_UNROLL _Pragma("clang loop unroll(full)")

template <typename U>
struct Limits {
  static constexpr U max = metal::numeric_limits<U>::max();
  static constexpr U min = metal::numeric_limits<U>::min();
  static constexpr U finite_max = metal::numeric_limits<U>::max();
  static constexpr U finite_min = metal::numeric_limits<U>::min();
};
#define __MLXSCI_FLOAT_LIMITS(T)                                       \
  template <>                                                          \
  struct Limits<T> {                                                   \
    static constexpr T max = metal::numeric_limits<T>::infinity();     \
    static constexpr T min = -metal::numeric_limits<T>::infinity();    \
    static constexpr T finite_max = metal::numeric_limits<T>::max();   \
    static constexpr T finite_min = metal::numeric_limits<T>::lowest(); \
  };
__MLXSCI_FLOAT_LIMITS(float)
__MLXSCI_FLOAT_LIMITS(_Float16)
__MLXSCI_FLOAT_LIMITS(__bf16)
__MLXSCI_FLOAT_LIMITS(double)
#undef __MLXSCI_FLOAT_LIMITS
template <>
struct Limits<bool> {
  static constexpr bool max = true;
  static constexpr bool min = false;
};

template <typename T, typename U>
inline constexpr auto ceildiv(T n, U m) -> decltype(n / m) {
  return (n + m - 1) / m;
}

template <typename IdxT = int64_t>
inline IdxT elem_to_loc(IdxT elem, const int* shape, const int64_t* strides, int ndim) {
  IdxT loc = 0;
  for (int i = ndim - 1; i >= 0 && elem > 0; --i) {
    loc += (elem % shape[i]) * IdxT(strides[i]);
    elem /= shape[i];
  }
  return loc;
}
template <typename IdxT = int64_t>
inline IdxT elem_to_loc(uint3 elem, const int* shape, const int64_t* strides, int ndim) {
  IdxT loc = 0;
  if (ndim >= 1) loc += IdxT(elem.x) * IdxT(strides[ndim - 1]);
  if (ndim >= 2) loc += IdxT(elem.y) * IdxT(strides[ndim - 2]);
  IdxT z = elem.z;
  for (int d = ndim - 3; d >= 0; --d) {
    loc += (z % shape[d]) * IdxT(strides[d]);
    z /= shape[d];
  }
  return loc;
}
template <typename IdxT = int64_t>
inline IdxT elem_to_loc_1(uint elem, int64_t stride) {
  return IdxT(elem) * IdxT(stride);
}
template <typename IdxT = int64_t>
inline IdxT elem_to_loc_2(uint2 elem, const int64_t* strides) {
  return IdxT(elem.x) * IdxT(strides[1]) + IdxT(elem.y) * IdxT(strides[0]);
}
template <typename IdxT = int64_t>
inline IdxT elem_to_loc_3(uint3 elem, const int64_t* strides) {
  return IdxT(elem.x) * IdxT(strides[2]) + IdxT(elem.y) * IdxT(strides[1]) +
         IdxT(elem.z) * IdxT(strides[0]);
}

struct complex64_t {
  float real;
  float imag;
  constexpr complex64_t() : real(0), imag(0) {}
  constexpr complex64_t(float r, float i) : real(r), imag(i) {}
  template <typename T, std::enable_if_t<__mlxsci::is_scalar<T>, int> = 0>
  constexpr complex64_t(T r) : real(static_cast<float>(r)), imag(0) {}
  constexpr complex64_t(const complex64_t&) = default;
  complex64_t& operator=(const complex64_t&) = default;
  complex64_t& operator+=(complex64_t o) { real += o.real; imag += o.imag; return *this; }
  complex64_t& operator-=(complex64_t o) { real -= o.real; imag -= o.imag; return *this; }
  complex64_t& operator*=(complex64_t o) {
    float r = real * o.real - imag * o.imag;
    imag = real * o.imag + imag * o.real;
    real = r;
    return *this;
  }
};
inline complex64_t operator+(complex64_t a, complex64_t b) { return {a.real + b.real, a.imag + b.imag}; }
inline complex64_t operator-(complex64_t a, complex64_t b) { return {a.real - b.real, a.imag - b.imag}; }
inline complex64_t operator-(complex64_t a) { return {-a.real, -a.imag}; }
inline complex64_t operator*(complex64_t a, complex64_t b) {
  return {a.real * b.real - a.imag * b.imag, a.real * b.imag + a.imag * b.real};
}
inline complex64_t operator/(complex64_t a, complex64_t b) {
  float d = b.real * b.real + b.imag * b.imag;
  return {(a.real * b.real + a.imag * b.imag) / d, (a.imag * b.real - a.real * b.imag) / d};
}
inline bool operator==(complex64_t a, complex64_t b) { return a.real == b.real && a.imag == b.imag; }
inline bool operator!=(complex64_t a, complex64_t b) { return !(a == b); }

// ---------------------------------------------------------------------------
// Address spaces and function qualifiers: nothing on a CPU. Threadgroup
// variable declarations are rewritten to __SIM_THREADGROUP (the runtime's
// storage) before compilation; everywhere else `threadgroup` disappears.
// `constant` data is read-only in Metal, and program-scope `constant`
// variables are usable in constant expressions (`threadgroup float b[TILE];`),
// so it becomes `const`; MLX's `const constant T&` parameters then carry a
// harmless duplicate const (-Wno-duplicate-decl-specifier in the build).
// ---------------------------------------------------------------------------
#define device
#define constant const
#define thread
#define threadgroup
#define threadgroup_imageblock
#define ray_data
#define object_data

#endif  // MLXSCI_METAL_PRELUDE_H
