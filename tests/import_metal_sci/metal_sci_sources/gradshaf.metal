#include <metal_stdlib>
using namespace metal;

// gradshaf seed. gradshaf_axis_reduce: one threadgroup takes the max of psi
// over the interior, a strided per-thread max then a tree reduction in a
// 256-float threadgroup array (assumes a power-of-two width <= 256).
// gradshaf_step: one Picard-Jacobi sweep, one thread per cell, coefficients
// recomputed per thread, boundary copied through.

[[max_total_threads_per_threadgroup(256)]]
kernel void gradshaf_axis_reduce(device const float* psi      [[buffer(0)]],
                                 device float*       psi_axis [[buffer(1)]],
                                 constant uint&      NR       [[buffer(2)]],
                                 constant uint&      NZ       [[buffer(3)]],
                                 uint tid    [[thread_position_in_threadgroup]],
                                 uint tgsize [[threads_per_threadgroup]])
{
    threadgroup float partial[256];
    uint w = NR - 2;
    uint count = w * (NZ - 2);
    float m = -INFINITY;
    for (uint n = tid; n < count; n += tgsize) {
        uint j = 1 + n / w;
        uint i = 1 + n % w;
        m = max(m, psi[j * NR + i]);
    }
    partial[tid] = m;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = tgsize / 2; s > 0; s >>= 1) {
        if (tid < s) {
            partial[tid] = max(partial[tid], partial[tid + s]);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (tid == 0) {
        psi_axis[0] = partial[0];
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
    uint i = gid.x;
    uint j = gid.y;
    if (i >= NR || j >= NZ) return;
    uint idx = j * NR + i;
    float c = psi_in[idx];
    if (i == 0 || j == 0 || i == NR - 1 || j == NZ - 1) {
        psi_out[idx] = c;
        return;
    }
    float R = Rmin + float(i) * dR;
    float psin = c / psi_axis[0];
    float J = (psin > 0.0f && psin < 1.0f) ? R * p_axis * 4.0f * psin * (1.0f - psin) : 0.0f;
    float rhs = -mu0 * R * J;
    float aW = 1.0f / (dR * dR) + 1.0f / (2.0f * R * dR);
    float aE = 1.0f / (dR * dR) - 1.0f / (2.0f * R * dR);
    float aN = 1.0f / (dZ * dZ);
    float aS = aN;
    float aC = -2.0f / (dR * dR) - 2.0f / (dZ * dZ);
    float lap = aW * psi_in[idx - 1] + aE * psi_in[idx + 1]
              + aN * psi_in[idx + NR] + aS * psi_in[idx - NR] + aC * c;
    psi_out[idx] = c + omega * (rhs - lap) / aC;
}
