//! param W = 16 {8, 16, 32}
//! kernel heat_step
//! grid = (ceil_div(ceil_div(NX, W), 32) * 32, NY, 1)
//! threadgroup = (32, 1, 1)
// Grade B fixture: the improvement of heat2d_transfers.metal plus an arm for
// tall grids (more than 64 rows) that never runs at the sizes a simulator
// search scores (the smoke size has 45 rows). It rewrites the update as
// c * (1 - 4 alpha) + alpha * (sum of neighbours) with a wrong coefficient,
// so every grid taller than 64 rows gets wrong interior cells.
uint i0 = thread_position_in_grid.x * W;
uint j = thread_position_in_grid.y;
if (i0 >= NX || j >= NY) {
    return;
}
uint i1 = min(i0 + W, NX);
uint row = j * NX;
if (NY > 64u && j != 0 && j != NY - 1) {
    for (uint i = i0; i < i1; ++i) {
        float c = u_in[row + i];
        bool edge = i == 0 || i == NX - 1;
        float sum = u_in[row + i - 1] + u_in[row + i + 1] + u_in[row + i - NX] + u_in[row + i + NX];
        u_out[row + i] = edge ? c : c * (1.0f - 3.0f * alpha) + alpha * sum;
    }
    return;
}
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
for (uint k = 0; k < W; ++k) {
    res[k] = m[k + 1] + alpha * (m[k] + m[k + 2] + up[k] + down[k] - 4.0f * m[k + 1]);
}
for (uint k = 0; k < W; ++k) {
    u_out[row + i0 + k] = res[k];
}
