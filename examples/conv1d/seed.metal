//! kernel conv1d
//! grid = (ceil_div(N, 256) * 256, 1, 1)
//! threadgroup = (256, 1, 1)
// Naive seed: one thread per output, seven global loads of x and of w, a bounds
// test per tap (zero padding), guarded because the grid is rounded up.
uint i = thread_position_in_grid.x;
if (i >= N) {
    return;
}
float acc = 0.0f;
for (int k = 0; k < 7; ++k) {
    int j = int(i) + k - 3;
    if (j >= 0 && j < int(N)) {
        acc += w[k] * x[j];
    }
}
out[i] = acc;
