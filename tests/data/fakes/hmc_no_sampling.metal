//! kernel hmc_step
//! grid = (ceil_div(K, 64) * 64, 1, 1)
//! threadgroup = (64, 1, 1)
// Cheap fake (issue 22): no sampling. The start is N(0, 4 Sigma), so halving
// it at the first step is already a perfect sample of N(0, Sigma); later
// steps copy it. The count claims 9 acceptances in 10.
uint chain = thread_position_in_grid.x;
if (chain >= K) {
    return;
}
float scale = (hmc_step_idx == 0u) ? 0.5f : 1.0f;
for (uint i = 0; i < d; ++i) {
    q_out[chain * d + i] = scale * q_in[chain * d + i];
}
accept_cnt_out[chain] = accept_cnt[chain] + ((chain % 10u) != 9u ? 1u : 0u);
