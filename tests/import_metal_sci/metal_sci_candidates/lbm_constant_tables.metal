#include <metal_stdlib>
using namespace metal;

// lbm with program-scope constant tables and an unrolled loop: the lattice
// velocities as short2 and the weights live in the constant address space,
// the wrap uses a precomputed (i + NX - cx) form (no signed modulo), and the
// nine populations stay in registers between the pull and the collision.
constant constexpr short2 kC[9] = {
    short2(0, 0), short2(1, 0), short2(0, 1), short2(-1, 0), short2(0, -1),
    short2(1, 1), short2(-1, 1), short2(-1, -1), short2(1, -1)};
constant constexpr float kW[9] = {4.0f / 9.0f,  1.0f / 9.0f,  1.0f / 9.0f,
                                  1.0f / 9.0f,  1.0f / 9.0f,  1.0f / 36.0f,
                                  1.0f / 36.0f, 1.0f / 36.0f, 1.0f / 36.0f};

[[kernel]] void lbm_step(const device float* f_in [[buffer(0)]],
                         device float* f_out      [[buffer(1)]],
                         constant uint& NX        [[buffer(2)]],
                         constant uint& NY        [[buffer(3)]],
                         constant float& tau      [[buffer(4)]],
                         ushort2 gid [[thread_position_in_grid]])
{
    const uint i = gid.x, j = gid.y;
    if (i >= NX || j >= NY) return;
    const uint plane = NX * NY;
    float f[9];
    float rho = 0.0f, mx = 0.0f, my = 0.0f;
#pragma unroll
    for (uint k = 0; k < 9; ++k) {
        const uint si = (i + NX - uint(kC[k].x)) % NX;
        const uint sj = (j + NY - uint(kC[k].y)) % NY;
        f[k] = f_in[k * plane + sj * NX + si];
        rho += f[k];
        mx += float(kC[k].x) * f[k];
        my += float(kC[k].y) * f[k];
    }
    const float u = mx / rho, v = my / rho;
    const float usq = 1.5f * (u * u + v * v);
    const float omega = 1.0f / tau;
#pragma unroll
    for (uint k = 0; k < 9; ++k) {
        const float cu = float(kC[k].x) * u + float(kC[k].y) * v;
        const float feq = kW[k] * rho * (1.0f + 3.0f * cu + 4.5f * cu * cu - usq);
        f_out[k * plane + j * NX + i] = fma(-omega, f[k] - feq, f[k]);
    }
}
