//! header
constant int CX[9] = {0, 1, 0, -1, 0, 1, -1, -1, 1};
constant int CY[9] = {0, 0, 1, 0, -1, 1, 1, -1, -1};
constant float W[9] = {4.0f / 9.0f, 1.0f / 9.0f, 1.0f / 9.0f, 1.0f / 9.0f, 1.0f / 9.0f,
                       1.0f / 36.0f, 1.0f / 36.0f, 1.0f / 36.0f, 1.0f / 36.0f};

//! kernel lbm_step
//! grid = (ceil_div(NX, 16) * 16, ceil_div(NY, 16) * 16, 1)
//! threadgroup = (16, 16, 1)
// Naive seed: one thread per cell, loops over the 9 directions with constant
// tables, signed modulo wrap for the pull, SoA loads and stores.
uint i = thread_position_in_grid.x;
uint j = thread_position_in_grid.y;
if (i >= NX || j >= NY) {
    return;
}
int nx = int(NX);
int ny = int(NY);
uint cells = NX * NY;
float f[9];
for (int k = 0; k < 9; ++k) {
    int si = (int(i) - CX[k]) % nx;
    int sj = (int(j) - CY[k]) % ny;
    if (si < 0) si += nx;
    if (sj < 0) sj += ny;
    f[k] = f_in[uint(k) * cells + uint(sj) * NX + uint(si)];
}
float rho = 0.0f;
float mx = 0.0f;
float my = 0.0f;
for (int k = 0; k < 9; ++k) {
    rho += f[k];
    mx += float(CX[k]) * f[k];
    my += float(CY[k]) * f[k];
}
float u = mx / rho;
float v = my / rho;
float usq = u * u + v * v;
float omega = 1.0f / tau;
for (int k = 0; k < 9; ++k) {
    float cu = float(CX[k]) * u + float(CY[k]) * v;
    float feq = W[k] * rho * (1.0f + 3.0f * cu + 4.5f * cu * cu - 1.5f * usq);
    f_out[uint(k) * cells + j * NX + i] = f[k] - omega * (f[k] - feq);
}
