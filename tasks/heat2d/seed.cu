//! kernel heat_step
//! grid = (ceil_div(NX, 16) * 16, ceil_div(NY, 16) * 16, 1)
//! threadgroup = (16, 16, 1)
// Naive seed: one thread per cell, five direct global loads, no tiling.
uint32_t nx = NX[0];
uint32_t ny = NY[0];
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t j = blockIdx.y * blockDim.y + threadIdx.y;
if (i >= nx || j >= ny) {
    return;
}
uint32_t idx = j * nx + i;
float c = u_in[idx];
if (i == 0 || j == 0 || i == nx - 1 || j == ny - 1) {
    u_out[idx] = c;
    return;
}
float left = u_in[idx - 1];
float right = u_in[idx + 1];
float down = u_in[idx - nx];
float up = u_in[idx + nx];
u_out[idx] = c + alpha[0] * (left + right + down + up - 4.0f * c);
