#include <metal_stdlib>
using namespace metal;

// nbody seed: one thread per body, all-pairs loop over every j (j == i adds
// nothing: d = 0 and eps > 0), direct global loads, rsqrt of r2^3.
kernel void nbody_step(device const float4* pos_in  [[buffer(0)]],
                       device float4*       pos_out [[buffer(1)]],
                       device const float4* vel_in  [[buffer(2)]],
                       device float4*       vel_out [[buffer(3)]],
                       device const float*  mass    [[buffer(4)]],
                       constant uint&       N       [[buffer(5)]],
                       constant float&      dt      [[buffer(6)]],
                       constant float&      eps     [[buffer(7)]],
                       constant float&      G       [[buffer(8)]],
                       uint i [[thread_position_in_grid]])
{
    if (i >= N) return;
    float3 ri = pos_in[i].xyz;
    float3 acc = float3(0.0f);
    float eps2 = eps * eps;
    for (uint j = 0; j < N; ++j) {
        float3 d = pos_in[j].xyz - ri;
        float r2 = dot(d, d) + eps2;
        float inv_r3 = rsqrt(r2 * r2 * r2);
        acc += (mass[j] * inv_r3) * d;
    }
    float3 v = vel_in[i].xyz + (G * acc) * dt;
    float3 r = ri + v * dt;
    pos_out[i] = float4(r, 0.0f);
    vel_out[i] = float4(v, 0.0f);
}
