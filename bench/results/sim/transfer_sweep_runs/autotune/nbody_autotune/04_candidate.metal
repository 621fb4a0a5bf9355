//! kernel nbody_step
//! grid = (ceil_div(N, 128) * 128, 1, 1)
//! threadgroup = (512, 1, 1)
// Naive seed: one thread per body, loops over all N bodies with direct global
// loads; no threadgroup memory, no tiling.
uint i = thread_position_in_grid.x;
if (i >= N) {
    return;
}
const device float4* P = (const device float4*)pos_in;
const device float4* V = (const device float4*)vel_in;
float3 ri = P[i].xyz;
float eps2 = eps * eps;
float3 acc = float3(0.0f);
for (uint j = 0; j < N; ++j) {
    float3 d = P[j].xyz - ri;
    float r2 = dot(d, d) + eps2;
    float inv_r3 = rsqrt(r2 * r2 * r2);
    acc += (mass[j] * inv_r3) * d;
}
float3 v = V[i].xyz + (G * acc) * dt;
float3 r = ri + v * dt;
((device float4*)pos_out)[i] = float4(r, 0.0f);
((device float4*)vel_out)[i] = float4(v, 0.0f);
