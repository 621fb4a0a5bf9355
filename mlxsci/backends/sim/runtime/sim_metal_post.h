// mlxsci CPU simulator: included AFTER the Metal language prelude and before
// the kernel text. Turns barrier calls into calls that know their source line
// (for barrier-divergence diagnostics), and gives the attribute helpers the
// glue uses to build Metal thread attributes.
#ifndef MLXSCI_SIM_METAL_POST_H
#define MLXSCI_SIM_METAL_POST_H

using namespace metal;

#define threadgroup_barrier(...) __sim_threadgroup_barrier(__LINE__, ##__VA_ARGS__)
#define simdgroup_barrier(...) __sim_simdgroup_barrier(__LINE__, ##__VA_ARGS__)

static inline uint3 __sim_u3(uint32_t x, uint32_t y, uint32_t z) {
    uint3 r;
    r.x = x;
    r.y = y;
    r.z = z;
    return r;
}

#define __SIM_CEILDIV(a, b) (((a) + (b) - 1) / (b))
#define __SIM_A_dispatch_quadgroups_per_threadgroup(t) ((uint)__SIM_CEILDIV(__sim_c.tgprod, 4u))
#define __SIM_A_dispatch_simdgroups_per_threadgroup(t) ((uint)__SIM_CEILDIV(__sim_c.tgprod, 32u))
#define __SIM_A_dispatch_threads_per_threadgroup(t) __sim_u3(__sim_c.tg[0], __sim_c.tg[1], __sim_c.tg[2])
#define __SIM_A_grid_origin(t) __sim_u3(0u, 0u, 0u)
#define __SIM_A_grid_size(t) __sim_u3(__sim_c.grid[0], __sim_c.grid[1], __sim_c.grid[2])
#define __SIM_A_quadgroup_index_in_threadgroup(t) ((uint)((t)->lin / 4u))
#define __SIM_A_quadgroups_per_threadgroup(t) ((uint)__SIM_CEILDIV((t)->nthr, 4u))
#define __SIM_A_simdgroup_index_in_threadgroup(t) ((uint)((t)->lin / 32u))
#define __SIM_A_simdgroups_per_threadgroup(t) ((uint)__SIM_CEILDIV((t)->nthr, 32u))
#define __SIM_A_thread_execution_width(t) ((uint)32u)
#define __SIM_A_thread_index_in_quadgroup(t) ((uint)((t)->lin % 4u))
#define __SIM_A_thread_index_in_simdgroup(t) ((uint)((t)->lin % 32u))
#define __SIM_A_thread_index_in_threadgroup(t) ((uint)(t)->lin)
#define __SIM_A_thread_position_in_grid(t)                     \
    __sim_u3((t)->gid[0] * __sim_c.tg[0] + (t)->lid[0],        \
             (t)->gid[1] * __sim_c.tg[1] + (t)->lid[1],        \
             (t)->gid[2] * __sim_c.tg[2] + (t)->lid[2])
#define __SIM_A_thread_position_in_threadgroup(t) __sim_u3((t)->lid[0], (t)->lid[1], (t)->lid[2])
#define __SIM_A_threadgroup_position_in_grid(t) __sim_u3((t)->gid[0], (t)->gid[1], (t)->gid[2])
#define __SIM_A_threadgroups_per_grid(t) __sim_u3(__sim_c.ngroups[0], __sim_c.ngroups[1], __sim_c.ngroups[2])
#define __SIM_A_threads_per_grid(t) __sim_u3(__sim_c.grid[0], __sim_c.grid[1], __sim_c.grid[2])
#define __SIM_A_threads_per_simdgroup(t) ((uint)32u)
#define __SIM_A_threads_per_threadgroup(t) __sim_u3((t)->tsz[0], (t)->tsz[1], (t)->tsz[2])

#endif
