#include <metal_stdlib>
using namespace metal;

// One element per thread is already bandwidth-bound; the only changes are a
// fused multiply-add, a pipeline capped at the host's 256-wide threadgroups
// and the compound assignment.
#define SAXPY_TG 256

[[max_total_threads_per_threadgroup(SAXPY_TG)]]
[[kernel]] void saxpy(const device float* __restrict x [[ buffer(0) ]],
                      device float* __restrict y       [[ buffer(1) ]],
                      constant float &a                [[ buffer(2) ]],
                      constant uint  &N                [[ buffer(3) ]],
                      uint gid [[ thread_position_in_grid ]])
{
    if (gid < N) {
        y[gid] += a * x[gid];
    }
}
