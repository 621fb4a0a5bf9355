#include <metal_stdlib>
using namespace metal;

// gradshaf: the reduction walks the interior row by row (consecutive threads
// on consecutive cells), folds each simdgroup with a simd_shuffle_xor
// butterfly, and the eight simdgroup maxima meet in threadgroup memory.
// The step kernel is the seed's, with the coefficients in a struct.
#define TG_MAX 256
#define SIMD 32

struct Coeffs {
    float aW, aE, aNS, aC;
};

static inline Coeffs coeffs_at(float R, float dR, float dZ) {
    Coeffs k;
    const float a = 1.0f / (dR * dR);
    const float b = 1.0f / (2.0f * R * dR);
    k.aW = a + b;
    k.aE = a - b;
    k.aNS = 1.0f / (dZ * dZ);
    k.aC = -2.0f * a - 2.0f * k.aNS;
    return k;
}

static inline float simd_fold_max(float v) {
    for (ushort off = SIMD / 2; off > 0; off >>= 1) {
        v = max(v, simd_shuffle_xor(v, off));
    }
    return v;
}

[[max_total_threads_per_threadgroup(TG_MAX)]]
kernel void gradshaf_axis_reduce(device const float* psi      [[buffer(0)]],
                                 device float*       psi_axis [[buffer(1)]],
                                 constant uint&      NR       [[buffer(2)]],
                                 constant uint&      NZ       [[buffer(3)]],
                                 ushort tid    [[thread_position_in_threadgroup]],
                                 ushort tgsize [[threads_per_threadgroup]],
                                 ushort sgid   [[simdgroup_index_in_threadgroup]],
                                 ushort lane   [[thread_index_in_simdgroup]])
{
    threadgroup float best[TG_MAX / SIMD];
    float m = -INFINITY;
    for (uint j = 1; j + 1 < NZ; ++j) {
        for (uint i = 1 + tid; i + 1 < NR; i += tgsize) {
            m = max(m, psi[j * NR + i]);
        }
    }
    m = simd_fold_max(m);
    if (lane == 0) best[sgid] = m;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) {
        float r = best[0];
        for (ushort s = 1; s < tgsize / SIMD; ++s) r = max(r, best[s]);
        psi_axis[0] = r;
    }
}

kernel void gradshaf_step(device const float* psi_in   [[buffer(0)]],
                          device float*       psi_out  [[buffer(1)]],
                          device const float* psi_axis [[buffer(2)]],
                          constant uint&      NR       [[buffer(3)]],
                          constant uint&      NZ       [[buffer(4)]],
                          constant float&     Rmin     [[buffer(5)]],
                          constant float&     dR       [[buffer(6)]],
                          constant float&     dZ       [[buffer(7)]],
                          constant float&     p_axis   [[buffer(8)]],
                          constant float&     mu0      [[buffer(9)]],
                          constant float&     omega    [[buffer(10)]],
                          uint2 gid [[thread_position_in_grid]])
{
    const uint i = gid.x, j = gid.y;
    if (i >= NR || j >= NZ) return;
    const uint idx = j * NR + i;
    const float c = psi_in[idx];
    if (i == 0 || j == 0 || i == NR - 1 || j == NZ - 1) {
        psi_out[idx] = c;
        return;
    }
    const float R = Rmin + float(i) * dR;
    const Coeffs k = coeffs_at(R, dR, dZ);
    const float psin = c / psi_axis[0];
    const float J = (psin > 0.0f && psin < 1.0f) ? R * p_axis * 4.0f * psin * (1.0f - psin) : 0.0f;
    const float rhs = -mu0 * R * J;
    const float lap = k.aW * psi_in[idx - 1] + k.aE * psi_in[idx + 1]
                    + k.aNS * psi_in[idx + NR] + k.aNS * psi_in[idx - NR] + k.aC * c;
    psi_out[idx] = c + omega * (rhs - lap) / k.aC;
}
