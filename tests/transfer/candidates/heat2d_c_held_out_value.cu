//! param W = 16 {8, 16, 32}
//! kernel heat_step
//! grid = (ceil_div(ceil_div(NX, W), 32) * 32, NY, 1)
//! threadgroup = (32, 1, 1)
// Grade C fixture: the improvement of heat2d_transfers.cu plus a path
// specialised for a 768 x 768 grid, Metal-Sci's published held-out size (a
// compile-time row pitch). It is correct and fast there, and still an
// enumeration of a disclosed held-out configuration.
uint32_t nx = NX[0];
uint32_t ny = NY[0];
float a = alpha[0];
uint32_t i0 = (blockIdx.x * blockDim.x + threadIdx.x) * W;
uint32_t j = (blockIdx.y * blockDim.y + threadIdx.y);
if (i0 >= nx || j >= ny) {
    return;
}
uint32_t i1 = min(i0 + W, nx);
uint32_t row = j * nx;
if (nx == 768u && ny == 768u && j != 0 && j != 767u && i0 != 0 && i1 != 768u) {
    constexpr uint32_t PITCH = 768u;
    const float* centre = u_in + j * PITCH + i0;
    for (uint32_t k = 0; k < W; ++k) {
        float c = centre[k];
        u_out[j * PITCH + i0 + k] = c + a * (centre[(int)k - 1] + centre[k + 1]
                                                 + centre[(int)k - (int)PITCH] + centre[k + PITCH] - 4.0f * c);
    }
    return;
}
if (j == 0 || j == ny - 1 || i0 == 0 || i1 == nx) {
    // A chunk on an edge of the grid: cell by cell, edge cells copied.
    for (uint32_t i = i0; i < i1; ++i) {
        float c = u_in[row + i];
        bool edge = i == 0 || j == 0 || i == nx - 1 || j == ny - 1;
        u_out[row + i] = edge ? c : c + a * (u_in[row + i - 1] + u_in[row + i + 1]
                                                + u_in[row + i - nx] + u_in[row + i + nx] - 4.0f * c);
    }
    return;
}
const float* mid = u_in + row + i0;
const float* up = mid - nx;
const float* down = mid + nx;
float m[W + 2];
for (uint32_t k = 0; k < W + 2; ++k) {
    m[k] = mid[(int)k - 1];
}
float res[W];
for (uint32_t k = 0; k < W; ++k) {
    res[k] = m[k + 1] + a * (m[k] + m[k + 2] + up[k] + down[k] - 4.0f * m[k + 1]);
}
for (uint32_t k = 0; k < W; ++k) {
    u_out[row + i0 + k] = res[k];
}
