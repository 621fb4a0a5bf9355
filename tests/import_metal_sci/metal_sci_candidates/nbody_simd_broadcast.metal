#include <metal_stdlib>
using namespace metal;

// nbody with simdgroup broadcasts instead of threadgroup memory: each lane
// loads one body of a 32-body chunk into registers and the simdgroup loops
// over the chunk with simd_shuffle, so positions are read once per
// simdgroup. No barriers; lanes past N keep shuffling (their own body is
// clamped) and exit at the end.
static inline float3 pair_acc(float4 other, float3 ri, float eps2) {
    float3 d = other.xyz - ri;
    float r2 = dot(d, d) + eps2;
    float inv = rsqrt(r2);
    return (other.w * (inv * inv * inv)) * d;
}

kernel void nbody_step(device const float4* pos_in  [[buffer(0)]],
                       device float4*       pos_out [[buffer(1)]],
                       device const float4* vel_in  [[buffer(2)]],
                       device float4*       vel_out [[buffer(3)]],
                       device const float*  mass    [[buffer(4)]],
                       constant uint&       N       [[buffer(5)]],
                       constant float&      dt      [[buffer(6)]],
                       constant float&      eps     [[buffer(7)]],
                       constant float&      G       [[buffer(8)]],
                       uint   i     [[thread_position_in_grid]],
                       ushort lane  [[thread_index_in_simdgroup]],
                       ushort width [[threads_per_simdgroup]])
{
    const float3 ri = pos_in[min(i, N - 1)].xyz;
    const float eps2 = eps * eps;
    float3 acc = 0.0f;
    for (uint base = 0; base < N; base += width) {
        const uint j = base + lane;
        const float4 mine = (j < N) ? float4(pos_in[j].xyz, mass[j]) : float4(0.0f);
        for (ushort k = 0; k < width; ++k) {
            acc += pair_acc(simd_shuffle(mine, k), ri, eps2);
        }
    }
    if (i >= N) return;
    const float3 v = vel_in[i].xyz + G * acc * dt;
    pos_out[i] = float4(ri + v * dt, 0.0f);
    vel_out[i] = float4(v, 0.0f);
}
