#include <metal_stdlib>
using namespace metal;

// lj seed: three kernels per step. lj_clear_cells zeroes the cell counts,
// lj_build_cells bins each particle (wrapped into the box) with a relaxed
// atomic fetch-add, lj_step scans the 27 neighbour cells of each particle
// with direct global loads and integrates (symplectic Euler, unwrapped).

static inline int3 cell_of(float3 r, uint M, float L) {
    float3 w = r - L * floor(r / L);
    float cs = L / float(M);
    int3 c = int3(floor(w / cs));
    return clamp(c, int3(0), int3(int(M) - 1));
}

kernel void lj_clear_cells(device atomic_uint* cell_count [[buffer(0)]],
                           constant uint&      M3         [[buffer(1)]],
                           uint gid [[thread_position_in_grid]])
{
    if (gid >= M3) return;
    atomic_store_explicit(&cell_count[gid], 0u, memory_order_relaxed);
}

kernel void lj_build_cells(device const float4* pos          [[buffer(0)]],
                           device atomic_uint*  cell_count   [[buffer(1)]],
                           device uint*         cell_list    [[buffer(2)]],
                           constant uint&       N            [[buffer(3)]],
                           constant uint&       M            [[buffer(4)]],
                           constant float&      L            [[buffer(5)]],
                           constant uint&       MAX_PER_CELL [[buffer(6)]],
                           uint gid [[thread_position_in_grid]])
{
    if (gid >= N) return;
    int3 c = cell_of(pos[gid].xyz, M, L);
    uint cell = (uint(c.z) * M + uint(c.y)) * M + uint(c.x);
    uint slot = atomic_fetch_add_explicit(&cell_count[cell], 1u, memory_order_relaxed);
    if (slot < MAX_PER_CELL) {
        cell_list[cell * MAX_PER_CELL + slot] = gid;
    }
}

kernel void lj_step(device const float4* pos_in       [[buffer(0)]],
                    device float4*       pos_out      [[buffer(1)]],
                    device const float4* vel_in       [[buffer(2)]],
                    device float4*       vel_out      [[buffer(3)]],
                    device const uint*   cell_count   [[buffer(4)]],
                    device const uint*   cell_list    [[buffer(5)]],
                    constant uint&       N            [[buffer(6)]],
                    constant uint&       M            [[buffer(7)]],
                    constant float&      L            [[buffer(8)]],
                    constant float&      rcut2        [[buffer(9)]],
                    constant float&      dt           [[buffer(10)]],
                    constant uint&       MAX_PER_CELL [[buffer(11)]],
                    uint gid [[thread_position_in_grid]])
{
    if (gid >= N) return;
    float3 ri = pos_in[gid].xyz;
    int3 c = cell_of(ri, M, L);
    int m = int(M);
    float3 force = float3(0.0f);
    for (int dz = -1; dz <= 1; ++dz)
    for (int dy = -1; dy <= 1; ++dy)
    for (int dx = -1; dx <= 1; ++dx) {
        uint cx = uint((c.x + dx + m) % m);
        uint cy = uint((c.y + dy + m) % m);
        uint cz = uint((c.z + dz + m) % m);
        uint cell = (cz * M + cy) * M + cx;
        uint n = min(cell_count[cell], MAX_PER_CELL);
        for (uint s = 0; s < n; ++s) {
            uint j = cell_list[cell * MAX_PER_CELL + s];
            if (j == gid) continue;
            float3 d = pos_in[j].xyz - ri;
            d -= L * round(d / L);
            float r2 = dot(d, d);
            if (r2 < rcut2 && r2 > 1e-12f) {
                float inv_r2 = 1.0f / r2;
                float inv_r6 = inv_r2 * inv_r2 * inv_r2;
                float inv_r12 = inv_r6 * inv_r6;
                force += (-24.0f * (2.0f * inv_r12 - inv_r6) * inv_r2) * d;
            }
        }
    }
    float3 v = vel_in[gid].xyz + force * dt;
    float3 r = ri + v * dt;
    pos_out[gid] = float4(r, 0.0f);
    vel_out[gid] = float4(v, 0.0f);
}
