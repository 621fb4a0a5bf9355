//! kernel nbody_step
//! grid = (ceil_div(N, 128) * 128, 1, 1)
//! threadgroup = (128, 1, 1)
// Naive seed: one thread per body, loops over all N bodies with direct global
// loads; no shared memory, no tiling. CUDA's float4 has no arithmetic
// operators, so the three components are spelled out.
uint32_t n = N[0];
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
if (i >= n) {
    return;
}
const float4* P = reinterpret_cast<const float4*>(pos_in);
const float4* V = reinterpret_cast<const float4*>(vel_in);
float4 pi = P[i];
float rx = pi.x;
float ry = pi.y;
float rz = pi.z;
float eps2 = eps[0] * eps[0];
float ax = 0.0f;
float ay = 0.0f;
float az = 0.0f;
for (uint32_t j = 0; j < n; ++j) {
    float4 pj = P[j];
    float dx = pj.x - rx;
    float dy = pj.y - ry;
    float dz = pj.z - rz;
    float r2 = dx * dx + dy * dy + dz * dz + eps2;
    float inv_r3 = rsqrtf(r2 * r2 * r2);
    float s = mass[j] * inv_r3;
    ax += s * dx;
    ay += s * dy;
    az += s * dz;
}
float g = G[0];
float h = dt[0];
float4 vi = V[i];
float vx = vi.x + (g * ax) * h;
float vy = vi.y + (g * ay) * h;
float vz = vi.z + (g * az) * h;
reinterpret_cast<float4*>(pos_out)[i] = make_float4(rx + vx * h, ry + vy * h, rz + vz * h, 0.0f);
reinterpret_cast<float4*>(vel_out)[i] = make_float4(vx, vy, vz, 0.0f);
