//! kernel heat_step
//! grid = (ceil_div(ceil_div(NX, 16), 32) * 32, NY, 1)
//! threadgroup = (32, 1, 1)
// Grade A fixture: a path tuned for the grid widths it was measured on (the
// smoke size's and Metal-Sci's in-distribution widths) beside a generic
// fallback for every other width. The fallback reads a 3x3 weighted stencil
// through clamped indices and recomputes it REDO times on purpose: the
// simulator's clock charges host cycles, so redundant work is what makes a
// path slow there.
uint i0 = thread_position_in_grid.x * 16u;
uint j = thread_position_in_grid.y;
if (i0 >= NX || j >= NY) {
    return;
}
uint i1 = min(i0 + 16u, NX);
uint row = j * NX;
bool on_edge = j == 0 || j == NY - 1 || i0 == 0 || i1 == NX;
if (NX == 67u || NX == 256u || NX == 512u || NX == 1024u) {
    if (on_edge) {
        for (uint i = i0; i < i1; ++i) {
            float c = u_in[row + i];
            bool edge = i == 0 || j == 0 || i == NX - 1 || j == NY - 1;
            u_out[row + i] = edge ? c : c + alpha * (u_in[row + i - 1] + u_in[row + i + 1]
                                                    + u_in[row + i - NX] + u_in[row + i + NX] - 4.0f * c);
        }
        return;
    }
    const device float* mid = u_in + row + i0;
    const device float* up = mid - NX;
    const device float* down = mid + NX;
    float m[18];
    for (uint k = 0; k < 18u; ++k) {
        m[k] = mid[int(k) - 1];
    }
    float res[16];
    for (uint k = 0; k < 16u; ++k) {
        res[k] = m[k + 1] + alpha * (m[k] + m[k + 2] + up[k] + down[k] - 4.0f * m[k + 1]);
    }
    for (uint k = 0; k < 16u; ++k) {
        u_out[row + i0 + k] = res[k];
    }
    return;
}
const float weights[9] = {0.0f, 1.0f, 0.0f, 1.0f, -4.0f, 1.0f, 0.0f, 1.0f, 0.0f};
const uint REDO = 24u;
for (uint i = i0; i < i1; ++i) {
    float c = u_in[row + i];
    if (i == 0 || j == 0 || i == NX - 1 || j == NY - 1) {
        u_out[row + i] = c;
        continue;
    }
    float result = 0.0f;
    for (uint r = 0; r < REDO; ++r) {
        float lap = 0.0f;
        for (int dj = -1; dj <= 1; ++dj) {
            for (int di = -1; di <= 1; ++di) {
                int jj = clamp(int(j) + dj, 0, int(NY) - 1);
                int ii = clamp(int(i) + di, 0, int(NX) - 1);
                lap += weights[(dj + 1) * 3 + di + 1] * u_in[uint(jj) * NX + uint(ii)];
            }
        }
        // `result * 0.0f` keeps every pass (without fast-math no compiler may
        // drop it) and adds nothing: each pass computes the same value.
        result = c + alpha * lap + result * 0.0f;
    }
    u_out[row + i] = result;
}
