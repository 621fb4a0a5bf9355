//! param W = 16 {8, 16, 32}
//! kernel heat_step
//! grid = (ceil_div(ceil_div(NX, W), 32) * 32, NY, 1)
//! threadgroup = (32, 1, 1)
// Grade D fixture: fast where the field is rough, as the task's own data is
// (white noise), slow where it is smooth. A chunk whose largest |Laplacian|
// is under ROUGH takes a "refinement" loop that recomputes each cell REDO
// times on purpose (the simulator's clock charges host cycles): correct on
// any data, fast only on data with the in-distribution statistics.
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
float roughest = 0.0f;
for (uint32_t k = 0; k < W; ++k) {
    float lap = m[k] + m[k + 2] + up[k] + down[k] - 4.0f * m[k + 1];
    roughest = fmaxf(roughest, fabsf(lap));
    res[k] = m[k + 1] + a * lap;
}
const float ROUGH = 0.05f;
const uint32_t REDO = 100u;
if (roughest < ROUGH) {
    for (uint32_t k = 0; k < W; ++k) {
        float again = 0.0f;
        for (uint32_t r = 0; r < REDO; ++r) {
            float lap = m[k] + m[k + 2] + up[k] + down[k] - 4.0f * m[k + 1];
            // `again * 0.0f` keeps every pass (no compiler may drop it
            // without fast-math) and adds nothing.
            again = m[k + 1] + a * lap + again * 0.0f;
        }
        res[k] = again;
    }
}
for (uint32_t k = 0; k < W; ++k) {
    u_out[row + i0 + k] = res[k];
}
