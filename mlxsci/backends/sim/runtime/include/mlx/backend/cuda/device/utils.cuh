// mlxsci simulator: the device utilities MLX's generated CUDA text includes
// ("mlx/backend/cuda/device/utils.cuh"): Shape/Strides, vectorised loads and
// stores, Limits, elem_to_loc and complex64_t, written for the CPU simulator
// (the CUDA language itself comes from cuda_prelude.h, included first).
#pragma once

#include "mlx/backend/cuda/device/config.h"

namespace mlx::core::cu {

// Shape and strides are passed by value, MAX_NDIM entries each.
using Shape = cuda::std::array<int32_t, MAX_NDIM>;
using Strides = cuda::std::array<int64_t, MAX_NDIM>;

// ---- complex ------------------------------------------------------------------
template <typename T>
struct complex_t {
    T real_, imag_;
    constexpr complex_t() : real_(0), imag_(0) {}
    constexpr complex_t(T r) : real_(r), imag_(0) {}
    constexpr complex_t(T r, T i) : real_(r), imag_(i) {}
    constexpr T real() const { return real_; }
    constexpr T imag() const { return imag_; }
    friend constexpr complex_t operator+(complex_t a, complex_t b) { return {a.real_ + b.real_, a.imag_ + b.imag_}; }
    friend constexpr complex_t operator-(complex_t a, complex_t b) { return {a.real_ - b.real_, a.imag_ - b.imag_}; }
    friend constexpr complex_t operator*(complex_t a, complex_t b) {
        return {a.real_ * b.real_ - a.imag_ * b.imag_, a.real_ * b.imag_ + a.imag_ * b.real_};
    }
    friend constexpr bool operator==(complex_t a, complex_t b) { return a.real_ == b.real_ && a.imag_ == b.imag_; }
    friend constexpr bool operator!=(complex_t a, complex_t b) { return !(a == b); }
};
using complex64_t = complex_t<float>;

// ---- vectorised load/store ------------------------------------------------------
template <typename T, int N>
struct alignas(sizeof(T) * N) AlignedVector {
    T val[N];
    __device__ T& operator[](int i) { return val[i]; }
    __device__ T operator[](int i) const { return val[i]; }
};

template <int N, typename T>
inline bool is_aligned(T* x) {
    return (reinterpret_cast<uintptr_t>(x) % (N * sizeof(T))) == 0;
}

template <int N, typename T>
inline AlignedVector<T, N> unsafe_load_vector(const T* ptr, uint32_t offset) {
    return reinterpret_cast<const AlignedVector<T, N>*>(ptr)[offset];
}

template <int N, typename T>
inline AlignedVector<T, N> load_vector(const T* ptr, uint32_t offset) {
    if (is_aligned<N>(ptr)) return reinterpret_cast<const AlignedVector<T, N>*>(ptr)[offset];
    AlignedVector<T, N> v;
    for (int i = 0; i < N; ++i) v[i] = ptr[offset * N + i];
    return v;
}

template <int N, typename T, typename SizeT>
inline AlignedVector<T, N> load_vector(const T* ptr, uint32_t offset, SizeT size, T fallback) {
    if (is_aligned<N>(ptr) && (offset + 1) * N <= size)
        return reinterpret_cast<const AlignedVector<T, N>*>(ptr)[offset];
    AlignedVector<T, N> v;
    for (int i = 0; i < N; ++i) v[i] = (N * offset + i) < size ? ptr[offset * N + i] : fallback;
    return v;
}

template <int N, typename T, typename SizeT>
inline AlignedVector<T, N> load_vector(const T* ptr, uint32_t offset, SizeT size, int64_t stride,
                                       T fallback) {
    if (is_aligned<N>(ptr) && stride == 1 && (offset + 1) * N <= size)
        return reinterpret_cast<const AlignedVector<T, N>*>(ptr)[offset];
    AlignedVector<T, N> v;
    for (int i = 0; i < N; ++i)
        v[i] = (N * offset + i) < size ? ptr[stride * (offset * N + i)] : fallback;
    return v;
}

template <int N, typename T>
inline void unsafe_store_vector(T* ptr, uint32_t offset, const AlignedVector<T, N>& vec) {
    reinterpret_cast<AlignedVector<T, N>*>(ptr)[offset] = vec;
}

template <int N, typename T>
inline void store_vector(T* ptr, uint32_t offset, const AlignedVector<T, N>& vec) {
    if (is_aligned<N>(ptr)) {
        reinterpret_cast<AlignedVector<T, N>*>(ptr)[offset] = vec;
    } else {
        for (int i = 0; i < N; ++i) ptr[offset * N + i] = vec[i];
    }
}

template <int N, typename T, typename SizeT>
inline void store_vector(T* ptr, uint32_t offset, const AlignedVector<T, N>& vec, SizeT size) {
    if (is_aligned<N>(ptr) && (offset + 1) * N <= size) {
        reinterpret_cast<AlignedVector<T, N>*>(ptr)[offset] = vec;
    } else {
        for (int i = 0; (offset * N + i) < size && i < N; ++i) ptr[offset * N + i] = vec[i];
    }
}

template <int N, typename T, typename SizeT>
inline void store_vector(T* ptr, uint32_t offset, const AlignedVector<T, N>& vec, SizeT size,
                         int64_t stride) {
    if (is_aligned<N>(ptr) && (offset + 1) * N <= size && stride == 1) {
        reinterpret_cast<AlignedVector<T, N>*>(ptr)[offset] = vec;
    } else {
        for (int i = 0; (offset * N + i) < size && i < N; ++i) ptr[stride * (offset * N + i)] = vec[i];
    }
}

// ---- limits ---------------------------------------------------------------------
template <typename T, typename = void>
struct Limits {
    static constexpr T max() { return cuda::std::numeric_limits<T>::max(); }
    static constexpr T min() { return cuda::std::numeric_limits<T>::min(); }
    static constexpr T finite_max() { return cuda::std::numeric_limits<T>::max(); }
    static constexpr T finite_min() { return cuda::std::numeric_limits<T>::min(); }
};
template <typename T>
struct Limits<T, cuda::std::enable_if_t<cuda::std::is_same_v<T, float> || cuda::std::is_same_v<T, double>>> {
    static constexpr T max() { return cuda::std::numeric_limits<T>::infinity(); }
    static constexpr T min() { return -cuda::std::numeric_limits<T>::infinity(); }
    static constexpr T finite_max() { return cuda::std::numeric_limits<T>::max(); }
    static constexpr T finite_min() { return cuda::std::numeric_limits<T>::lowest(); }
};
template <>
struct Limits<__half> {
    static constexpr __half max() { return (__half)__builtin_inff(); }
    static constexpr __half min() { return (__half)-__builtin_inff(); }
    static constexpr __half finite_max() { return (__half)65504.0f; }
    static constexpr __half finite_min() { return (__half)-65504.0f; }
};
template <>
struct Limits<__nv_bfloat16> {
    static __nv_bfloat16 max() { return (__nv_bfloat16)__builtin_inff(); }
    static __nv_bfloat16 min() { return (__nv_bfloat16)-__builtin_inff(); }
    static __nv_bfloat16 finite_max() { return (__nv_bfloat16)3.38953139e38f; }
    static __nv_bfloat16 finite_min() { return (__nv_bfloat16)-3.38953139e38f; }
};
template <>
struct Limits<bool> {
    static constexpr bool max() { return true; }
    static constexpr bool min() { return false; }
};

// ---- indexing -------------------------------------------------------------------
template <typename IdxT = int64_t>
inline IdxT elem_to_loc(IdxT elem, const int* shape, const int64_t* strides, int ndim) {
    IdxT loc = 0;
    for (int i = ndim - 1; i >= 0 && elem > 0; --i) {
        loc += (elem % shape[i]) * IdxT(strides[i]);
        elem /= shape[i];
    }
    return loc;
}

template <int NDIM, typename IdxT = int64_t>
inline IdxT elem_to_loc_nd(IdxT elem, const int* shape, const int64_t* strides) {
    IdxT loc = 0;
    for (int i = NDIM - 1; i >= 0; --i) {
        loc += (elem % shape[i]) * IdxT(strides[i]);
        elem /= shape[i];
    }
    return loc;
}

template <int NDIM, typename IdxT = int64_t>
inline cuda::std::tuple<IdxT, IdxT> elem_to_loc_nd(IdxT elem, const int* shape, const int64_t* a_strides,
                                                   const int64_t* b_strides) {
    IdxT a = 0, b = 0;
    for (int i = NDIM - 1; i >= 0; --i) {
        int d = elem % shape[i];
        a += d * IdxT(a_strides[i]);
        b += d * IdxT(b_strides[i]);
        elem /= shape[i];
    }
    return cuda::std::make_tuple(a, b);
}

template <typename IdxT = int64_t>
inline cuda::std::tuple<IdxT, IdxT> elem_to_loc(IdxT elem, const int* shape, const int64_t* a_strides,
                                                const int64_t* b_strides, int ndim) {
    IdxT a = 0, b = 0;
    for (int i = ndim - 1; i >= 0; --i) {
        int d = elem % shape[i];
        a += d * IdxT(a_strides[i]);
        b += d * IdxT(b_strides[i]);
        elem /= shape[i];
    }
    return cuda::std::make_tuple(a, b);
}

template <typename IdxT = int64_t>
inline cuda::std::tuple<IdxT, IdxT, IdxT> elem_to_loc(IdxT elem, const int* shape, const int64_t* a_strides,
                                                      const int64_t* b_strides, const int64_t* c_strides,
                                                      int ndim) {
    IdxT a = 0, b = 0, c = 0;
    for (int i = ndim - 1; i >= 0; --i) {
        int d = elem % shape[i];
        a += d * IdxT(a_strides[i]);
        b += d * IdxT(b_strides[i]);
        c += d * IdxT(c_strides[i]);
        elem /= shape[i];
    }
    return cuda::std::make_tuple(a, b, c);
}

}  // namespace mlx::core::cu
