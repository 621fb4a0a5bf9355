#include <metal_stdlib>
using namespace metal;

// gradshaf: the axis reduction is a per-thread strided max, simd_max within
// each simdgroup, the simdgroup partials through threadgroup memory and one
// final simd_max (one barrier instead of log2(256)). The Jacobi step hoists
// 1/psi_axis and the coefficients' reciprocals.

[[max_total_threads_per_threadgroup(256)]]
kernel void gradshaf_axis_reduce(device const float* psi      [[buffer(0)]],
                                 device float*       psi_axis [[buffer(1)]],
                                 constant uint&      NR       [[buffer(2)]],
                                 constant uint&      NZ       [[buffer(3)]],
                                 uint tid    [[thread_position_in_threadgroup]],
                                 uint tgsize [[threads_per_threadgroup]],
                                 uint lane   [[thread_index_in_simdgroup]],
                                 uint sg     [[simdgroup_index_in_threadgroup]],
                                 uint nsg    [[simdgroups_per_threadgroup]])
{
    threadgroup float partial[32];
    const uint w = NR - 2;
    const uint count = w * (NZ - 2);
    float m = -INFINITY;
    for (uint n = tid; n < count; n += tgsize) {
        const uint j = 1 + n / w;
        const uint i = 1 + n - (j - 1) * w;
        m = max(m, psi[j * NR + i]);
    }
    m = simd_max(m);
    if (lane == 0) partial[sg] = m;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        float v = (lane < nsg) ? partial[lane] : -INFINITY;
        v = simd_max(v);
        if (lane == 0) psi_axis[0] = v;
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
    const float inv_axis = 1.0f / psi_axis[0];
    const float R = fma(float(i), dR, Rmin);
    const float idR2 = 1.0f / (dR * dR);
    const float idZ2 = 1.0f / (dZ * dZ);
    const float h = 1.0f / (2.0f * R * dR);
    const float aC = -2.0f * (idR2 + idZ2);
    const float psin = c * inv_axis;
    const float J = (psin > 0.0f && psin < 1.0f) ? 4.0f * R * p_axis * psin * (1.0f - psin) : 0.0f;
    const float rhs = -mu0 * R * J;
    const float lap = (idR2 + h) * psi_in[idx - 1] + (idR2 - h) * psi_in[idx + 1]
                    + idZ2 * (psi_in[idx + NR] + psi_in[idx - NR]) + aC * c;
    psi_out[idx] = c + omega * (rhs - lap) / aC;
}
