#include <metal_stdlib>
using namespace metal;

// nbody with threadgroup tiling: each threadgroup of 128 bodies walks the
// body list in tiles of 128; every thread stages one body (xyz, mass in w)
// in threadgroup memory, a barrier, then all threads consume the tile from
// threadgroup memory with float4 math. Threads past N still load tiles (the
// barriers need them) and store nothing.
#define TILE 128

[[max_total_threads_per_threadgroup(TILE)]]
kernel void nbody_step(device const float4* pos_in  [[buffer(0)]],
                       device float4*       pos_out [[buffer(1)]],
                       device const float4* vel_in  [[buffer(2)]],
                       device float4*       vel_out [[buffer(3)]],
                       device const float*  mass    [[buffer(4)]],
                       constant uint&       N       [[buffer(5)]],
                       constant float&      dt      [[buffer(6)]],
                       constant float&      eps     [[buffer(7)]],
                       constant float&      G       [[buffer(8)]],
                       uint gid [[thread_position_in_grid]],
                       uint lid [[thread_position_in_threadgroup]])
{
    threadgroup float4 body[TILE];
    const bool active = gid < N;
    const float3 ri = active ? pos_in[gid].xyz : float3(0.0f);
    const float eps2 = eps * eps;
    float3 acc = float3(0.0f);
    for (uint base = 0; base < N; base += TILE) {
        const uint j = base + lid;
        body[lid] = (j < N) ? float4(pos_in[j].xyz, mass[j]) : float4(0.0f);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const uint count = min(uint(TILE), N - base);
#pragma unroll(4)
        for (uint k = 0; k < count; ++k) {
            const float4 b = body[k];
            const float3 d = b.xyz - ri;
            const float r2 = fma(d.x, d.x, fma(d.y, d.y, fma(d.z, d.z, eps2)));
            const float inv_r = rsqrt(r2);
            acc = fma(float3(b.w * inv_r * inv_r * inv_r), d, acc);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (!active) return;
    const float3 v = vel_in[gid].xyz + (G * dt) * acc;
    pos_out[gid] = float4(ri + v * dt, 0.0f);
    vel_out[gid] = float4(v, 0.0f);
}
