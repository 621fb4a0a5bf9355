#include <metal_stdlib>
using namespace metal;

// lbm: fused pull-stream + BGK collide, fully unrolled over the nine
// directions. The periodic neighbours are computed once per cell with
// selects (no modulo), the SoA planes are read with one load each, and the
// moments are formed from explicit sums instead of a loop over CX/CY tables.
#define W_C (4.0f / 9.0f)
#define W_S (1.0f / 9.0f)
#define W_D (1.0f / 36.0f)

struct Macro {
    float rho;
    float ux;
    float uy;
    float usq15;  // 1.5 * |u|^2
};

static inline float bgk(float f, float w, float cu, Macro m, float omega) {
    const float feq = w * m.rho * (1.0f + 3.0f * cu + 4.5f * cu * cu - m.usq15);
    return f - omega * (f - feq);
}

kernel void lbm_step(device const float* f_in  [[buffer(0)]],
                     device float*       f_out [[buffer(1)]],
                     constant uint&      NX    [[buffer(2)]],
                     constant uint&      NY    [[buffer(3)]],
                     constant float&     tau   [[buffer(4)]],
                     uint2 gid [[thread_position_in_grid]])
{
    const uint i = gid.x, j = gid.y;
    if (i >= NX || j >= NY) return;
    const uint P = NX * NY;
    const uint im = (i == 0) ? NX - 1 : i - 1;
    const uint ip = (i + 1 == NX) ? 0 : i + 1;
    const uint rj = j * NX;
    const uint rm = ((j == 0) ? NY - 1 : j - 1) * NX;
    const uint rp = ((j + 1 == NY) ? 0 : j + 1) * NX;

    // pull: f_k(x) = f_k(x - c_k)
    const float f0 = f_in[0 * P + rj + i];
    const float f1 = f_in[1 * P + rj + im];
    const float f2 = f_in[2 * P + rm + i];
    const float f3 = f_in[3 * P + rj + ip];
    const float f4 = f_in[4 * P + rp + i];
    const float f5 = f_in[5 * P + rm + im];
    const float f6 = f_in[6 * P + rm + ip];
    const float f7 = f_in[7 * P + rp + ip];
    const float f8 = f_in[8 * P + rp + im];

    Macro m;
    m.rho = f0 + f1 + f2 + f3 + f4 + f5 + f6 + f7 + f8;
    const float inv_rho = 1.0f / m.rho;
    m.ux = (f1 - f3 + f5 - f6 - f7 + f8) * inv_rho;
    m.uy = (f2 - f4 + f5 + f6 - f7 - f8) * inv_rho;
    m.usq15 = 1.5f * (m.ux * m.ux + m.uy * m.uy);
    const float om = 1.0f / tau;
    const uint c = rj + i;

    f_out[0 * P + c] = bgk(f0, W_C, 0.0f, m, om);
    f_out[1 * P + c] = bgk(f1, W_S, m.ux, m, om);
    f_out[2 * P + c] = bgk(f2, W_S, m.uy, m, om);
    f_out[3 * P + c] = bgk(f3, W_S, -m.ux, m, om);
    f_out[4 * P + c] = bgk(f4, W_S, -m.uy, m, om);
    f_out[5 * P + c] = bgk(f5, W_D, m.ux + m.uy, m, om);
    f_out[6 * P + c] = bgk(f6, W_D, -m.ux + m.uy, m, om);
    f_out[7 * P + c] = bgk(f7, W_D, -m.ux - m.uy, m, om);
    f_out[8 * P + c] = bgk(f8, W_D, m.ux - m.uy, m, om);
}
