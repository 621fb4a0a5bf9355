//! kernel heat_step
//! grid = (ceil_div(NX, 16) * 16, ceil_div(NY, 16) * 16, 1)
//! threadgroup = (64, 4, 1)
// Naive seed: one thread per cell, five direct global loads, no tiling.
uint i = thread_position_in_grid.x;
uint j = thread_position_in_grid.y;
if (i >= NX || j >= NY) {
    return;
}
uint idx = j * NX + i;
float c = u_in[idx];
if (i == 0 || j == 0 || i == NX - 1 || j == NY - 1) {
    u_out[idx] = c;
    return;
}
float left = u_in[idx - 1];
float right = u_in[idx + 1];
float down = u_in[idx - NX];
float up = u_in[idx + NX];
u_out[idx] = c + alpha * (left + right + down + up - 4.0f * c);
