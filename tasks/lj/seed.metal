//! kernel lj_build_cells
//! grid = (ceil_div(N, 128) * 128, 1, 1)
//! threadgroup = (128, 1, 1)
// Naive seed: one thread per particle. cell_count and cell_list start at 0
// (init_value) and are atomic (MLX atomic_outputs makes every output atomic).
uint i = thread_position_in_grid.x;
if (i >= N) {
    return;
}
float3 r = ((const device float4*)pos)[i].xyz;
float cs = L / float(M);
float3 w = r - L * floor(r / L);
int cx = clamp(int(floor(w.x / cs)), 0, int(M) - 1);
int cy = clamp(int(floor(w.y / cs)), 0, int(M) - 1);
int cz = clamp(int(floor(w.z / cs)), 0, int(M) - 1);
uint cell = (uint(cz) * M + uint(cy)) * M + uint(cx);
uint slot = atomic_fetch_add_explicit(&cell_count[cell], 1u, memory_order_relaxed);
if (slot < MAX_PER_CELL) {
    atomic_store_explicit(&cell_list[cell * MAX_PER_CELL + slot], i, memory_order_relaxed);
}

//! kernel lj_step
//! grid = (ceil_div(N, 128) * 128, 1, 1)
//! threadgroup = (128, 1, 1)
// Naive seed: one thread per particle scans the 27 neighbour cells with
// direct global loads.
uint i = thread_position_in_grid.x;
if (i >= N) {
    return;
}
const device float4* P = (const device float4*)pos_in;
const device float4* V = (const device float4*)vel_in;
float3 ri = P[i].xyz;
float cs = L / float(M);
float3 w = ri - L * floor(ri / L);
int m = int(M);
int cx = clamp(int(floor(w.x / cs)), 0, m - 1);
int cy = clamp(int(floor(w.y / cs)), 0, m - 1);
int cz = clamp(int(floor(w.z / cs)), 0, m - 1);
float3 f = float3(0.0f);
for (int dz = -1; dz <= 1; ++dz) {
    for (int dy = -1; dy <= 1; ++dy) {
        for (int dx = -1; dx <= 1; ++dx) {
            uint nx = uint((cx + dx + m) % m);
            uint ny = uint((cy + dy + m) % m);
            uint nz = uint((cz + dz + m) % m);
            uint cell = (nz * M + ny) * M + nx;
            uint count = min(cell_count[cell], MAX_PER_CELL);
            for (uint k = 0; k < count; ++k) {
                uint j = cell_list[cell * MAX_PER_CELL + k];
                if (j == i) {
                    continue;
                }
                float3 d = P[j].xyz - ri;
                d -= L * round(d / L);
                float r2 = dot(d, d);
                if (r2 < rcut2 && r2 > 1e-12f) {
                    float inv_r2 = 1.0f / r2;
                    float inv_r6 = inv_r2 * inv_r2 * inv_r2;
                    float inv_r12 = inv_r6 * inv_r6;
                    f += (-24.0f * (2.0f * inv_r12 - inv_r6) * inv_r2) * d;
                }
            }
        }
    }
}
float3 v = V[i].xyz + f * dt;
float3 r = ri + v * dt;
((device float4*)pos_out)[i] = float4(r, 0.0f);
((device float4*)vel_out)[i] = float4(v, 0.0f);
