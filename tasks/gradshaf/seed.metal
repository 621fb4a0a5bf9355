//! kernel gradshaf_axis_reduce
//! grid = (256, 1, 1)
//! threadgroup = (256, 1, 1)
// Naive seed: one threadgroup; each thread takes a strided max over the
// flattened interior, then a tree reduction in threadgroup memory with a
// barrier per level (assumes a power-of-two threadgroup width <= 256).
threadgroup float partial[256];
uint tid = thread_position_in_threadgroup.x;
uint tgsize = threads_per_threadgroup.x;
uint nri = NR - 2;
uint total = nri * (NZ - 2);
float m = -FLT_MAX;
for (uint n = tid; n < total; n += tgsize) {
    uint j = 1 + n / nri;
    uint i = 1 + n % nri;
    m = max(m, psi[j * NR + i]);
}
partial[tid] = m;
threadgroup_barrier(mem_flags::mem_threadgroup);
for (uint s = tgsize / 2; s > 0; s >>= 1) {
    if (tid < s) {
        partial[tid] = max(partial[tid], partial[tid + s]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
}
if (tid == 0) {
    psi_axis[0] = partial[0];
}

//! kernel gradshaf_step
//! grid = (ceil_div(NR, 16) * 16, ceil_div(NZ, 16) * 16, 1)
//! threadgroup = (16, 16, 1)
// Naive seed: one thread per cell, coefficients recomputed per thread,
// five direct global loads.
uint i = thread_position_in_grid.x;
uint j = thread_position_in_grid.y;
if (i >= NR || j >= NZ) {
    return;
}
uint idx = j * NR + i;
float c = psi_in[idx];
if (i == 0 || j == 0 || i == NR - 1 || j == NZ - 1) {
    psi_out[idx] = c;
    return;
}
float R = Rmin + float(i) * dR;
float psin = c / psi_axis[0];
float J = 0.0f;
if (psin > 0.0f && psin < 1.0f) {
    J = R * p_axis * 4.0f * psin * (1.0f - psin);
}
float rhs = -mu0 * R * J;
float idR2 = 1.0f / (dR * dR);
float idZ2 = 1.0f / (dZ * dZ);
float half_r = 1.0f / (2.0f * R * dR);
float aW = idR2 + half_r;
float aE = idR2 - half_r;
float aN = idZ2;
float aS = idZ2;
float aC = -2.0f * idR2 - 2.0f * idZ2;
float lap = aW * psi_in[idx - 1] + aE * psi_in[idx + 1]
          + aN * psi_in[idx + NR] + aS * psi_in[idx - NR] + aC * c;
psi_out[idx] = c + omega * (rhs - lap) / aC;
