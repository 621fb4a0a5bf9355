//! param W = 16 {8, 16, 32}
//! kernel heat_step
//! grid = (ceil_div(ceil_div(NX, W), 32) * 32, NY, 1)
//! threadgroup = (32, 1, 1)
// Grade D fixture: fast where the field is rough, as the task's own data is
// (white noise), slow where it is smooth. A chunk whose largest |Laplacian|
// is under ROUGH takes a "refinement" loop that recomputes each cell REDO
// times on purpose (the simulator's clock charges host cycles): correct on
// any data, fast only on data with the in-distribution statistics.
uint i0 = thread_position_in_grid.x * W;
uint j = thread_position_in_grid.y;
if (i0 >= NX || j >= NY) {
    return;
}
uint i1 = min(i0 + W, NX);
uint row = j * NX;
if (j == 0 || j == NY - 1 || i0 == 0 || i1 == NX) {
    // A chunk on an edge of the grid: cell by cell, edge cells copied.
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
float m[W + 2];
for (uint k = 0; k < W + 2; ++k) {
    m[k] = mid[int(k) - 1];
}
float res[W];
float roughest = 0.0f;
for (uint k = 0; k < W; ++k) {
    float lap = m[k] + m[k + 2] + up[k] + down[k] - 4.0f * m[k + 1];
    roughest = max(roughest, fabs(lap));
    res[k] = m[k + 1] + alpha * lap;
}
const float ROUGH = 0.05f;
const uint REDO = 100u;
if (roughest < ROUGH) {
    for (uint k = 0; k < W; ++k) {
        float again = 0.0f;
        for (uint r = 0; r < REDO; ++r) {
            float lap = m[k] + m[k + 2] + up[k] + down[k] - 4.0f * m[k + 1];
            // `again * 0.0f` keeps every pass (no compiler may drop it
            // without fast-math) and adds nothing.
            again = m[k + 1] + alpha * lap + again * 0.0f;
        }
        res[k] = again;
    }
}
for (uint k = 0; k < W; ++k) {
    u_out[row + i0 + k] = res[k];
}
