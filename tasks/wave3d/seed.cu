//! kernel wave_step
//! grid = (ceil_div(NX, 8) * 8, ceil_div(NY, 8) * 8, ceil_div(NZ, 4) * 4)
//! threadgroup = (8, 8, 4)
// Naive seed: one thread per cell, eight direct global loads, no shared memory.
uint32_t nx = NX[0];
uint32_t ny = NY[0];
uint32_t nz = NZ[0];
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t j = blockIdx.y * blockDim.y + threadIdx.y;
uint32_t k = blockIdx.z * blockDim.z + threadIdx.z;
if (i >= nx || j >= ny || k >= nz) {
    return;
}
uint32_t plane = nx * ny;
uint32_t idx = (k * ny + j) * nx + i;
float c = u_curr[idx];
if (i == 0 || j == 0 || k == 0 || i == nx - 1 || j == ny - 1 || k == nz - 1) {
    u_next[idx] = c;
    return;
}
float xm = u_curr[idx - 1];
float xp = u_curr[idx + 1];
float ym = u_curr[idx - nx];
float yp = u_curr[idx + nx];
float zm = u_curr[idx - plane];
float zp = u_curr[idx + plane];
float lap = xm + xp + ym + yp + zm + zp - 6.0f * c;
u_next[idx] = 2.0f * c - u_prev[idx] + alpha[0] * lap;
