#include <metal_stdlib>
using namespace metal;

// lbm seed: D2Q9 BGK, fused pull-stream + collide, one thread per cell,
// periodic wrap with a signed modulo, SoA f[k*NX*NY + j*NX + i].
constant int   CX[9] = {0, 1, 0, -1, 0, 1, -1, -1, 1};
constant int   CY[9] = {0, 0, 1, 0, -1, 1, 1, -1, -1};
constant float W[9]  = {4.0f / 9.0f,
                        1.0f / 9.0f, 1.0f / 9.0f, 1.0f / 9.0f, 1.0f / 9.0f,
                        1.0f / 36.0f, 1.0f / 36.0f, 1.0f / 36.0f, 1.0f / 36.0f};

static inline int wrap(int v, int n) {
    int r = v % n;
    return r < 0 ? r + n : r;
}

kernel void lbm_step(device const float* f_in  [[buffer(0)]],
                     device float*       f_out [[buffer(1)]],
                     constant uint&      NX    [[buffer(2)]],
                     constant uint&      NY    [[buffer(3)]],
                     constant float&     tau   [[buffer(4)]],
                     uint2 gid [[thread_position_in_grid]])
{
    uint i = gid.x;
    uint j = gid.y;
    if (i >= NX || j >= NY) return;
    uint plane = NX * NY;
    float f[9];
    float rho = 0.0f, mx = 0.0f, my = 0.0f;
    for (int k = 0; k < 9; ++k) {
        int si = wrap(int(i) - CX[k], int(NX));
        int sj = wrap(int(j) - CY[k], int(NY));
        f[k] = f_in[uint(k) * plane + uint(sj) * NX + uint(si)];
        rho += f[k];
        mx += float(CX[k]) * f[k];
        my += float(CY[k]) * f[k];
    }
    float u = mx / rho;
    float v = my / rho;
    float usq = u * u + v * v;
    float inv_tau = 1.0f / tau;
    for (int k = 0; k < 9; ++k) {
        float cu = float(CX[k]) * u + float(CY[k]) * v;
        float feq = W[k] * rho * (1.0f + 3.0f * cu + 4.5f * cu * cu - 1.5f * usq);
        f_out[uint(k) * plane + j * NX + i] = f[k] - inv_tau * (f[k] - feq);
    }
}
