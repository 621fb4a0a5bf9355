//! kernel wave_step
//! grid = (ceil_div(NX, 8) * 8, ceil_div(NY, 8) * 8, ceil_div(NZ, 4) * 4)
//! threadgroup = (8, 8, 4)
// Naive seed: one thread per cell, eight direct global loads, no threadgroup memory.
uint i = thread_position_in_grid.x;
uint j = thread_position_in_grid.y;
uint k = thread_position_in_grid.z;
if (i >= NX || j >= NY || k >= NZ) {
    return;
}
uint plane = NX * NY;
uint idx = (k * NY + j) * NX + i;
float c = u_curr[idx];
if (i == 0 || j == 0 || k == 0 || i == NX - 1 || j == NY - 1 || k == NZ - 1) {
    u_next[idx] = c;
    return;
}
float xm = u_curr[idx - 1];
float xp = u_curr[idx + 1];
float ym = u_curr[idx - NX];
float yp = u_curr[idx + NX];
float zm = u_curr[idx - plane];
float zp = u_curr[idx + plane];
float lap = xm + xp + ym + yp + zm + zp - 6.0f * c;
u_next[idx] = 2.0f * c - u_prev[idx] + alpha * lap;
