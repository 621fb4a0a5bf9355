//! kernel heat_step
//! grid = (ceil_div(ceil_div(NX, 16), 32) * 32, NY, 1)
//! threadgroup = (32, 1, 1)
// Grade A fixture: a path tuned for the grid widths it was measured on (the
// smoke size's and Metal-Sci's in-distribution widths) beside a generic
// fallback for every other width. The fallback reads a 3x3 weighted stencil
// through clamped indices and recomputes it REDO times on purpose: the
// simulator's clock charges host cycles, so redundant work is what makes a
// path slow there.
uint32_t nx = NX[0];
uint32_t ny = NY[0];
float a = alpha[0];
uint32_t i0 = (blockIdx.x * blockDim.x + threadIdx.x) * 16u;
uint32_t j = (blockIdx.y * blockDim.y + threadIdx.y);
if (i0 >= nx || j >= ny) {
    return;
}
uint32_t i1 = min(i0 + 16u, nx);
uint32_t row = j * nx;
bool on_edge = j == 0 || j == ny - 1 || i0 == 0 || i1 == nx;
if (nx == 67u || nx == 256u || nx == 512u || nx == 1024u) {
    if (on_edge) {
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
    float m[18];
    for (uint32_t k = 0; k < 18u; ++k) {
        m[k] = mid[(int)k - 1];
    }
    float res[16];
    for (uint32_t k = 0; k < 16u; ++k) {
        res[k] = m[k + 1] + a * (m[k] + m[k + 2] + up[k] + down[k] - 4.0f * m[k + 1]);
    }
    for (uint32_t k = 0; k < 16u; ++k) {
        u_out[row + i0 + k] = res[k];
    }
    return;
}
const float weights[9] = {0.0f, 1.0f, 0.0f, 1.0f, -4.0f, 1.0f, 0.0f, 1.0f, 0.0f};
const uint32_t REDO = 24u;
for (uint32_t i = i0; i < i1; ++i) {
    float c = u_in[row + i];
    if (i == 0 || j == 0 || i == nx - 1 || j == ny - 1) {
        u_out[row + i] = c;
        continue;
    }
    float result = 0.0f;
    for (uint32_t r = 0; r < REDO; ++r) {
        float lap = 0.0f;
        for (int dj = -1; dj <= 1; ++dj) {
            for (int di = -1; di <= 1; ++di) {
                int jj = min(max((int)j + dj, 0), (int)ny - 1);
                int ii = min(max((int)i + di, 0), (int)nx - 1);
                lap += weights[(dj + 1) * 3 + di + 1] * u_in[(uint32_t)jj * nx + (uint32_t)ii];
            }
        }
        // `result * 0.0f` keeps every pass (without fast-math no compiler may
        // drop it) and adds nothing: each pass computes the same value.
        result = c + a * lap + result * 0.0f;
    }
    u_out[row + i] = result;
}
