#include <metal_stdlib>
using namespace metal;

// gradshaf: psi_axis is one float, so both kernels bind it by reference:
// the reduction stores its result through `device float&`, the step reads it
// through `constant float&` (the constant cache broadcasts it to every
// thread). The reduction walks each row's interior through a row pointer,
// folds with simd_max, and the partial maxima meet in threadgroup memory.
#define REDUCE_TG 256

[[max_total_threads_per_threadgroup(REDUCE_TG)]]
kernel void gradshaf_axis_reduce(device const float* psi      [[buffer(0)]],
                                 device float&       psi_axis [[buffer(1)]],
                                 constant uint&      NR       [[buffer(2)]],
                                 constant uint&      NZ       [[buffer(3)]],
                                 uint tid  [[thread_index_in_threadgroup]],
                                 uint lane [[thread_index_in_simdgroup]],
                                 uint sg   [[simdgroup_index_in_threadgroup]])
{
    threadgroup float sg_max[REDUCE_TG / 32];
    float m = -INFINITY;
    const uint inner = NR - 2;
    for (uint j = 1; j + 1 < NZ; ++j) {
        device const float* row = psi + j * NR + 1;
        for (uint i = tid; i < inner; i += REDUCE_TG) {
            m = max(m, row[i]);
        }
    }
    m = simd_max(m);
    if (lane == 0) sg_max[sg] = m;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) {
        float r = sg_max[0];
        for (uint s = 1; s < REDUCE_TG / 32; ++s) r = max(r, sg_max[s]);
        psi_axis = r;
    }
}

kernel void gradshaf_step(device const float* psi_in   [[buffer(0)]],
                          device float*       psi_out  [[buffer(1)]],
                          constant float&     psi_axis [[buffer(2)]],
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
    const float psin = c / psi_axis;
    const float J = (psin > 0.0f && psin < 1.0f) ? R * p_axis * 4.0f * psin * (1.0f - psin) : 0.0f;
    const float rhs = -mu0 * R * J;
    const float inv_dR2 = 1.0f / (dR * dR);
    const float half_RdR = 1.0f / (2.0f * R * dR);
    const float aNS = 1.0f / (dZ * dZ);
    const float aC = -2.0f * inv_dR2 - 2.0f * aNS;
    const float lap = (inv_dR2 + half_RdR) * psi_in[idx - 1] + (inv_dR2 - half_RdR) * psi_in[idx + 1]
                    + aNS * (psi_in[idx + NR] + psi_in[idx - NR]) + aC * c;
    psi_out[idx] = c + omega * (rhs - lap) / aC;
}
