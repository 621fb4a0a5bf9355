//! header
__constant__ int CX[9] = {0, 1, 0, -1, 0, 1, -1, -1, 1};
__constant__ int CY[9] = {0, 0, 1, 0, -1, 1, 1, -1, -1};
__constant__ float W[9] = {4.0f / 9.0f, 1.0f / 9.0f, 1.0f / 9.0f, 1.0f / 9.0f, 1.0f / 9.0f,
                           1.0f / 36.0f, 1.0f / 36.0f, 1.0f / 36.0f, 1.0f / 36.0f};

//! kernel lbm_step
//! grid = (ceil_div(NX, 16) * 16, ceil_div(NY, 16) * 16, 1)
//! threadgroup = (16, 16, 1)
// Naive seed: one thread per cell, loops over the 9 directions with constant
// tables, signed modulo wrap for the pull, SoA loads and stores.
uint32_t NX_ = NX[0];
uint32_t NY_ = NY[0];
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t j = blockIdx.y * blockDim.y + threadIdx.y;
if (i >= NX_ || j >= NY_) {
    return;
}
int nx = int(NX_);
int ny = int(NY_);
uint32_t cells = NX_ * NY_;
float f[9];
for (int k = 0; k < 9; ++k) {
    int si = (int(i) - CX[k]) % nx;
    int sj = (int(j) - CY[k]) % ny;
    if (si < 0) si += nx;
    if (sj < 0) sj += ny;
    f[k] = f_in[uint32_t(k) * cells + uint32_t(sj) * NX_ + uint32_t(si)];
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
float omega = 1.0f / tau[0];
for (int k = 0; k < 9; ++k) {
    float cu = float(CX[k]) * u + float(CY[k]) * v;
    float feq = W[k] * rho * (1.0f + 3.0f * cu + 4.5f * cu * cu - 1.5f * usq);
    f_out[uint32_t(k) * cells + j * NX_ + i] = f[k] - omega * (f[k] - feq);
}
