//! kernel lj_build_cells
//! grid = (ceil_div(N, 128) * 128, 1, 1)
//! threadgroup = (128, 1, 1)
// Naive seed: one thread per particle. cell_count and cell_list start at 0
// (init_value). MLX's cuda_kernel has no atomic outputs: both are plain
// uint32_t*; the slot is claimed with atomicAdd on cell_count and the
// particle index is written to cell_list with a plain store.
const uint32_t n = N[0];
const uint32_t mc = M[0];
const float box = L[0];
const uint32_t max_per_cell = MAX_PER_CELL[0];
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
if (i >= n) {
    return;
}
float4 r = reinterpret_cast<const float4*>(pos)[i];
float cs = box / (float)mc;
float wx = r.x - box * floorf(r.x / box);
float wy = r.y - box * floorf(r.y / box);
float wz = r.z - box * floorf(r.z / box);
int cx = min(max((int)floorf(wx / cs), 0), (int)mc - 1);
int cy = min(max((int)floorf(wy / cs), 0), (int)mc - 1);
int cz = min(max((int)floorf(wz / cs), 0), (int)mc - 1);
uint32_t cell = ((uint32_t)cz * mc + (uint32_t)cy) * mc + (uint32_t)cx;
uint32_t slot = atomicAdd(&cell_count[cell], 1u);
if (slot < max_per_cell) {
    cell_list[cell * max_per_cell + slot] = i;
}

//! kernel lj_step
//! grid = (ceil_div(N, 128) * 128, 1, 1)
//! threadgroup = (128, 1, 1)
// Naive seed: one thread per particle scans the 27 neighbour cells with
// direct global loads.
const uint32_t n = N[0];
const uint32_t mc = M[0];
const float box = L[0];
const float rc2 = rcut2[0];
const float step_dt = dt[0];
const uint32_t max_per_cell = MAX_PER_CELL[0];
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
if (i >= n) {
    return;
}
const float4* P = reinterpret_cast<const float4*>(pos_in);
const float4* V = reinterpret_cast<const float4*>(vel_in);
float4 ri = P[i];
float cs = box / (float)mc;
float wx = ri.x - box * floorf(ri.x / box);
float wy = ri.y - box * floorf(ri.y / box);
float wz = ri.z - box * floorf(ri.z / box);
int m = (int)mc;
int cx = min(max((int)floorf(wx / cs), 0), m - 1);
int cy = min(max((int)floorf(wy / cs), 0), m - 1);
int cz = min(max((int)floorf(wz / cs), 0), m - 1);
float fx = 0.0f;
float fy = 0.0f;
float fz = 0.0f;
for (int dz = -1; dz <= 1; ++dz) {
    for (int dy = -1; dy <= 1; ++dy) {
        for (int dx = -1; dx <= 1; ++dx) {
            uint32_t nx = (uint32_t)((cx + dx + m) % m);
            uint32_t ny = (uint32_t)((cy + dy + m) % m);
            uint32_t nz = (uint32_t)((cz + dz + m) % m);
            uint32_t cell = (nz * mc + ny) * mc + nx;
            uint32_t count = min(cell_count[cell], max_per_cell);
            for (uint32_t k = 0; k < count; ++k) {
                uint32_t j = cell_list[cell * max_per_cell + k];
                if (j == i) {
                    continue;
                }
                float4 rj = P[j];
                float ddx = rj.x - ri.x;
                float ddy = rj.y - ri.y;
                float ddz = rj.z - ri.z;
                ddx -= box * roundf(ddx / box);
                ddy -= box * roundf(ddy / box);
                ddz -= box * roundf(ddz / box);
                float r2 = ddx * ddx + ddy * ddy + ddz * ddz;
                if (r2 < rc2 && r2 > 1e-12f) {
                    float inv_r2 = 1.0f / r2;
                    float inv_r6 = inv_r2 * inv_r2 * inv_r2;
                    float inv_r12 = inv_r6 * inv_r6;
                    float coef = -24.0f * (2.0f * inv_r12 - inv_r6) * inv_r2;
                    fx += coef * ddx;
                    fy += coef * ddy;
                    fz += coef * ddz;
                }
            }
        }
    }
}
float4 vi = V[i];
float vx = vi.x + fx * step_dt;
float vy = vi.y + fy * step_dt;
float vz = vi.z + fz * step_dt;
reinterpret_cast<float4*>(pos_out)[i] = make_float4(ri.x + vx * step_dt, ri.y + vy * step_dt,
                                                    ri.z + vz * step_dt, 0.0f);
reinterpret_cast<float4*>(vel_out)[i] = make_float4(vx, vy, vz, 0.0f);
