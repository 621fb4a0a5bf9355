//! kernel saxpy
//! grid = (ceil_div(N, 256) * 256, 1, 1)
//! threadgroup = (64, 1, 1)
// Naive seed: one thread per element, guarded because the grid is rounded up.
uint i = thread_position_in_grid.x;
if (i >= N) {
    return;
}
y_out[i] = a * x[i] + y[i];
