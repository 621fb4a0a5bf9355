// mlxsci simulator: <cooperative_groups.h> for CUDA kernels run on the CPU.
// this_grid(), this_thread_block(), tiled_partition<N>() and their common
// members, on top of the CUDA prelude (cuda_prelude.h, included first).
// Grid-wide sync() is not supported (a cooperative launch MLX never does).
#ifndef MLXSCI_STUB_COOPERATIVE_GROUPS_H
#define MLXSCI_STUB_COOPERATIVE_GROUPS_H

namespace cooperative_groups {

struct grid_group {
    __SIM_CU_ALWAYS unsigned long long num_blocks() const {
        return (unsigned long long)__sim_c.ngroups[0] * __sim_c.ngroups[1] * __sim_c.ngroups[2];
    }
    __SIM_CU_ALWAYS unsigned long long block_rank() const {
        const __SimThread* t = __sim_cu_t;
        return t->gid[0] + (unsigned long long)__sim_c.ngroups[0] *
                               (t->gid[1] + (unsigned long long)__sim_c.ngroups[1] * t->gid[2]);
    }
    __SIM_CU_ALWAYS unsigned long long thread_rank() const {
        return block_rank() * __sim_c.tgprod + __sim_cu_t->lin;
    }
    __SIM_CU_ALWAYS unsigned long long num_threads() const { return num_blocks() * __sim_c.tgprod; }
    __SIM_CU_ALWAYS unsigned long long size() const { return num_threads(); }
    __SIM_CU_ALWAYS dim3 group_dim() const { return blockDim; }
    __SIM_CU_ALWAYS dim3 dim_blocks() const { return gridDim; }
    __SIM_CU_ALWAYS dim3 block_index() const { return dim3(blockIdx); }
    __SIM_CU_ALWAYS dim3 dimensions() const {
        return dim3(__sim_c.grid[0], __sim_c.grid[1], __sim_c.grid[2]);
    }
    __SIM_CU_ALWAYS bool is_valid() const { return true; }
    void sync() const {
        fprintf(stderr, "mlxsci sim: grid_group::sync() needs a cooperative launch\n");
        __builtin_trap();
    }
};

struct thread_block {
    __SIM_CU_ALWAYS void sync(int line = __builtin_LINE()) const { __sim_cu_barrier(line); }
    __SIM_CU_ALWAYS unsigned thread_rank() const { return __sim_cu_t->lin; }
    __SIM_CU_ALWAYS unsigned size() const { return __sim_c.tgprod; }
    __SIM_CU_ALWAYS unsigned num_threads() const { return __sim_c.tgprod; }
    __SIM_CU_ALWAYS dim3 group_index() const { return dim3(blockIdx); }
    __SIM_CU_ALWAYS dim3 thread_index() const { return dim3(threadIdx); }
    __SIM_CU_ALWAYS dim3 group_dim() const { return blockDim; }
    __SIM_CU_ALWAYS dim3 dim_threads() const { return blockDim; }
};

__SIM_CU_ALWAYS grid_group this_grid() { return grid_group(); }
__SIM_CU_ALWAYS thread_block this_thread_block() { return thread_block(); }

template <unsigned N>
struct thread_block_tile {
    static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "tile size must be a power of two <= 32");
    __SIM_CU_ALWAYS unsigned thread_rank() const { return __sim_cu_t->lin % N; }
    __SIM_CU_ALWAYS unsigned size() const { return N; }
    __SIM_CU_ALWAYS unsigned num_threads() const { return N; }
    __SIM_CU_ALWAYS unsigned meta_group_rank() const { return __sim_cu_t->lin / N; }
    __SIM_CU_ALWAYS unsigned meta_group_size() const { return (__sim_c.tgprod + N - 1) / N; }
    __SIM_CU_ALWAYS void sync() const { __syncwarp(); }
    template <class T> __SIM_CU_ALWAYS T shfl(T v, int src) const { return __shfl_sync(0xffffffffu, v, src, N); }
    template <class T> __SIM_CU_ALWAYS T shfl_down(T v, unsigned d) const {
        return __shfl_down_sync(0xffffffffu, v, d, N);
    }
    template <class T> __SIM_CU_ALWAYS T shfl_up(T v, unsigned d) const {
        return __shfl_up_sync(0xffffffffu, v, d, N);
    }
    template <class T> __SIM_CU_ALWAYS T shfl_xor(T v, int m) const {
        return __shfl_xor_sync(0xffffffffu, v, m, N);
    }
    __SIM_CU_ALWAYS unsigned ballot(int pred) const {
        const unsigned b = __ballot_sync(0xffffffffu, pred);
        return N == 32 ? b : (b >> (__sim_cu_t->lin % 32u / N * N)) & ((1u << N) - 1u);
    }
    __SIM_CU_ALWAYS bool any(int pred) const { return ballot(pred) != 0; }
    __SIM_CU_ALWAYS bool all(int pred) const { return ballot(pred) == (N == 32 ? 0xffffffffu : (1u << N) - 1u); }
};

template <unsigned N, class Parent>
__SIM_CU_ALWAYS thread_block_tile<N> tiled_partition(const Parent&) { return thread_block_tile<N>(); }

template <class T> struct plus { __SIM_CU_ALWAYS T operator()(T a, T b) const { return a + b; } };
template <class T> struct less { __SIM_CU_ALWAYS T operator()(T a, T b) const { return b < a ? b : a; } };
template <class T> struct greater { __SIM_CU_ALWAYS T operator()(T a, T b) const { return a < b ? b : a; } };
template <class T> struct bit_and { __SIM_CU_ALWAYS T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { __SIM_CU_ALWAYS T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { __SIM_CU_ALWAYS T operator()(T a, T b) const { return a ^ b; } };

// cg::reduce over a tile (butterfly: every lane gets the result).
template <unsigned N, class T, class Op>
__SIM_CU_ALWAYS T reduce(const thread_block_tile<N>& g, T v, Op op) {
    for (unsigned m = N / 2; m > 0; m /= 2) v = op(v, g.shfl_xor(v, (int)m));
    return v;
}

}  // namespace cooperative_groups

#endif
