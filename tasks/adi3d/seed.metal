//! header
// Naive seed: one thread per line. Thread 0 of each threadgroup fills the
// c' coefficients of the line length serially in threadgroup memory, then
// every thread does a serial Thomas solve of its line, streaming d' through
// u_out in device memory and reading it back for the back substitution
// (about twice the ideal traffic). Lines whose off-axis indices touch a face
// copy u_in to u_out.
#define MAX_AXIS 256

// c'_0 = 0, c'_1 = c/b, c'_i = c/(b - a c'_{i-1}) with a = c = -mu, b = 1 + 2 mu.
inline void fill_cprime(threadgroup float* cprime, uint n, float mu) {
    float a = -mu;
    float b = 1.0f + 2.0f * mu;
    cprime[0] = 0.0f;
    for (uint i = 1; i + 1 < n; ++i) {
        cprime[i] = -mu / (b - a * cprime[i - 1]);
    }
}

// Solves (I - mu D2) x = r on the line base + i*stride, 0 <= i < n, with
// Dirichlet endpoints x_0 = r_0, x_{n-1} = r_{n-1}.
inline void solve_line(const device float* u_in, device float* u_out, uint base, uint stride,
                       uint n, float mu, threadgroup const float* cprime) {
    float a = -mu;
    float b = 1.0f + 2.0f * mu;
    float r0 = u_in[base];
    float rl = u_in[base + (n - 1) * stride];
    u_out[base] = r0;
    u_out[base + (n - 1) * stride] = rl;
    float d = 0.0f;
    for (uint i = 1; i + 1 < n; ++i) {
        float r = u_in[base + i * stride];
        if (i == 1) {
            r += mu * r0;
        }
        if (i == n - 2) {
            r += mu * rl;
        }
        d = (r - a * d) / (b - a * cprime[i - 1]);
        u_out[base + i * stride] = d;
    }
    float x = d;
    for (uint i = n - 2; i-- > 1;) {
        x = u_out[base + i * stride] - cprime[i] * x;
        u_out[base + i * stride] = x;
    }
}

inline void copy_line(const device float* u_in, device float* u_out, uint base, uint stride,
                      uint n) {
    for (uint i = 0; i < n; ++i) {
        u_out[base + i * stride] = u_in[base + i * stride];
    }
}

//! kernel adi_x
//! grid = (NY, NZ, 1)
//! threadgroup = (32, 1, 1)
threadgroup float cprime[MAX_AXIS];
if (thread_index_in_threadgroup == 0) {
    fill_cprime(cprime, NX, mu);
}
threadgroup_barrier(mem_flags::mem_threadgroup);
uint j = thread_position_in_grid.x;
uint k = thread_position_in_grid.y;
if (j >= NY || k >= NZ) {
    return;
}
uint base = (k * NY + j) * NX;
if (j == 0 || k == 0 || j == NY - 1 || k == NZ - 1) {
    copy_line(u_in, u_out, base, 1, NX);
    return;
}
solve_line(u_in, u_out, base, 1, NX, mu, cprime);

//! kernel adi_y
//! grid = (NX, NZ, 1)
//! threadgroup = (32, 1, 1)
threadgroup float cprime[MAX_AXIS];
if (thread_index_in_threadgroup == 0) {
    fill_cprime(cprime, NY, mu);
}
threadgroup_barrier(mem_flags::mem_threadgroup);
uint i = thread_position_in_grid.x;
uint k = thread_position_in_grid.y;
if (i >= NX || k >= NZ) {
    return;
}
uint base = k * NY * NX + i;
if (i == 0 || k == 0 || i == NX - 1 || k == NZ - 1) {
    copy_line(u_in, u_out, base, NX, NY);
    return;
}
solve_line(u_in, u_out, base, NX, NY, mu, cprime);

//! kernel adi_z
//! grid = (NX, NY, 1)
//! threadgroup = (32, 1, 1)
threadgroup float cprime[MAX_AXIS];
if (thread_index_in_threadgroup == 0) {
    fill_cprime(cprime, NZ, mu);
}
threadgroup_barrier(mem_flags::mem_threadgroup);
uint i = thread_position_in_grid.x;
uint j = thread_position_in_grid.y;
if (i >= NX || j >= NY) {
    return;
}
uint base = j * NX + i;
if (i == 0 || j == 0 || i == NX - 1 || j == NY - 1) {
    copy_line(u_in, u_out, base, NX * NY, NZ);
    return;
}
solve_line(u_in, u_out, base, NX * NY, NZ, mu, cprime);
