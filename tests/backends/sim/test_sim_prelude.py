"""The simulator's Metal prelude and rewrite, checked without the runtime.

One C++ program, written in Metal syntax, goes through `rewrite_metal`, is
compiled with the prelude by zig's clang and run; its printed results are
compared with NumPy. A second, smaller program checks that things Metal
rejects are rejected here too.
"""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mlxsci.backends.sim.rewrite import rewrite_metal
from mlxsci.backends.sim.source_scan import mask_comments_and_strings

RUNTIME = Path(__file__).resolve().parents[3] / "mlxsci" / "backends" / "sim" / "runtime"
PRELUDE = RUNTIME / "metal_prelude.h"
FLAGS = [
    "-std=c++17",
    "-O2",
    "-mcpu=baseline",
    "-Wno-unknown-attributes",
    "-flax-vector-conversions=none",
    "-Xclang",
    "-ffloat16-excess-precision=none",
    "-Xclang",
    "-fbfloat16-excess-precision=none",
    "-fsigned-char",
    "-ffp-contract=off",
]


def _zig() -> list[str]:
    try:
        import ziglang
    except ImportError:  # pragma: no cover
        pytest.skip("ziglang is not installed")
    return [os.path.join(os.path.dirname(ziglang.__file__), "zig")]


def _compile(
    code: str, out: Path, extra: list[str] = (), target: str | None = None, obj: bool = False
) -> subprocess.CompletedProcess:
    """Compile `code` after the prelude to an object (obj) or an executable.
    The executable is linked as the simulator links kernels (toolchain.LINK_FLAGS'
    -O2 -mcpu=baseline -nostdlib++), so it reuses the compiler_rt that zig
    built for them instead of building libc++ (about a minute on 2 cores)."""
    from mlxsci.backends.sim import toolchain

    _zig()
    src = out.with_suffix(".cpp")
    src.write_text(f'#include "{PRELUDE}"\n' + code)
    cmd = ["c++", *FLAGS, *extra, "-I", str(RUNTIME / "include")]
    if target:
        cmd += ["-target", target]
    if obj:
        return toolchain.run_compiler(cmd + ["-c", str(src), "-o", str(out)])
    o = out.with_suffix(".o")
    res = toolchain.run_compiler(cmd + ["-c", str(src), "-o", str(o)])
    if res.returncode != 0:
        return res
    link = [f for f in toolchain.LINK_FLAGS if f not in ("-shared", "-Wl,-z,defs")]
    return toolchain.run_compiler(["c++", *link, str(o), "-o", str(out)])


# ---------------------------------------------------------------------------
# Inputs shared by the C++ program and the NumPy side
# ---------------------------------------------------------------------------
RNG = np.random.default_rng(1234)
HALF_A = RNG.uniform(-4, 4, 40).astype(np.float16)
HALF_B = RNG.uniform(0.1, 3, 40).astype(np.float16)
XS = np.array([0.3, 1.7, -2.2, 0.05, 3.9, -0.8, 10.5, -7.25], np.float32)
POS = np.array([0.3, 1.7, 2.2, 0.05, 3.9, 0.8, 10.5, 7.25], np.float32)
UNIT = np.array([0.3, -0.7, 0.2, 0.05, 0.9, -0.8, 0.5, -0.25], np.float32)
INTS = np.array([0, 1, -1, 7, 0x7FFFFFFF, -0x80000000, 123456789, -98765], np.int64)


def _flit(v) -> str:
    """An exact C++ float literal."""
    return float(v).hex() + "f"


def _carr(name: str, ctype: str, values, fmt=str) -> str:
    return f"static const {ctype} {name}[] = {{" + ", ".join(fmt(v) for v in values) + "};\n"


UNARY = [
    "sin",
    "cos",
    "tan",
    "exp",
    "exp2",
    "exp10",
    "log",
    "log2",
    "log10",
    "sqrt",
    "rsqrt",
    "tanh",
    "sinh",
    "cosh",
    "asin",
    "acos",
    "atan",
    "floor",
    "ceil",
    "round",
    "rint",
    "trunc",
    "fract",
    "fabs",
    "abs",
    "sign",
    "saturate",
    "sinpi",
    "cospi",
    "log1p",
]
# which input each unary function gets
UNARY_DOMAIN = {
    "log": "POS",
    "log2": "POS",
    "log10": "POS",
    "sqrt": "POS",
    "rsqrt": "POS",
    "asin": "UNIT",
    "acos": "UNIT",
    "log1p": "POS",
}


def _np_unary(name: str, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    table = {
        "exp10": lambda v: 10.0**v,
        "rsqrt": lambda v: 1 / np.sqrt(v),
        "fract": lambda v: v - np.floor(v),
        "round": lambda v: np.sign(v) * np.floor(np.abs(v) + 0.5),
        "saturate": lambda v: np.clip(v, 0, 1),
        "sinpi": lambda v: np.sin(np.pi * v),
        "cospi": lambda v: np.cos(np.pi * v),
        "fabs": np.abs,
        "abs": np.abs,
        "asin": np.arcsin,
        "acos": np.arccos,
        "atan": np.arctan,
    }
    return table.get(name, getattr(np, name, None))(x)


PROGRAM = r"""
#include <metal_stdlib>
#include <metal_math>
#include <metal_atomic>
#include <metal_simdgroup>
#include <metal_compute>
#include <metal_integer>
#include <metal_common>
#include <metal_geometric>
#include <metal_relational>
using namespace metal;

#define P(...) printf(__VA_ARGS__)
static void pf(const char* k, float v) { printf("%s %.17g\n", k, v); }
template <typename V> static void pv(const char* k, V v) {
  printf("%s", k);
  for (int i = 0; i < (int)(sizeof(v) / sizeof(v[0])) && i < 4; ++i) printf(" %.17g", (double)v[i]);
  printf("\n");
}
template <typename V> static void pv3(const char* k, V v) { printf("%s %.17g %.17g %.17g\n", k, (double)v.x, (double)v.y, (double)v.z); }
static void pi(const char* k, long long v) { printf("%s %lld\n", k, v); }

// a header-style helper, as a candidate would write one
inline float4 scale_helper(float4 a, float s) { return a * s; }
template <typename T> inline T twice(T x) { return x + x; }
constant float COEFFS[3] = {1.0f, 2.0f, 3.0f};
constexpr constant int NTAPS = 3;

struct Particle { float3 pos; float mass; };

// Call forms that mix argument types: none may be ambiguous (the C library's
// overloads from <cmath> are visible next to metal::'s).
float overloads(float x, int n, uint u, half h, double d) {
  float r = 0;
  r += pow(x, 2); r += pow(x, 2.0); r += pow(2, x); r += fmax(x, 0.0); r += fmin(x, 0); r += atan2(x, 1);
  r += fmod(x, 2); r += copysign(1, x); r += hypot(x, 1.0); r += pow(h, 2); r += pow(x, h);
  r += min(x, 1.0); r += max(n, 0); r += min(u, 3); r += max(x, n); r += clamp(x, 0, 1); r += clamp(n, 0, 10);
  r += abs(n); r += abs(x); r += fabs(n); r += sqrt(n); r += exp(d); r += sqrt(2.0f); r += isnan(x);
  r += isinf(h); r += signbit(x); r += fma(x, 2, 1); r += mix(x, 1, 0.5); r += step(0, x);
  r += round(x); r += floor(h); r += trunc(d); r += ceil(n);
  r += ldexp(x, 3); int e; r += frexp(x, e); float ip; r += modf(x, ip);
  r += fmax3(x, 1, 2); r += max3(n, 1, 2); r += median3(x, 0.0f, 1.0f); r += log(2.0f); r += log2(x);
  r += fast::pow(x, 2.0f); r += precise::exp2(x); r += metal::abs(x); r += metal::max(x, 1.0f);
  r += metal::pow(x, 0.5f) + metal::fmax(x, 1.0f) + metal::precise::fma(x, x, x);
  return r;
}

int main() {
  // ---------------- constructors and swizzles ----------------
  float2 a2 = float2(1.0f, 2.0f);
  float4 c = float4(a2.yx, 3.0f, 4);
  pv("ctor_mix", c);
  float3 s3 = float3(1.5f);
  pv3("ctor_splat", s3);
  int4 i4 = int4(1, -2, 3, -4);
  pv("ctor_conv", float4(i4));
  pv("ccast_conv", (float4)i4);
  pv("scast_conv", static_cast<float4>(i4 * 2));
  pv3("swz_read", c.zyx);
  float4 w = c;
  w.xy = float2(9.0f, 8.0f);
  w.zw = w.xy * 2.0f;
  pv("swz_write", w);
  pv("swz_rgba", w.abgr);
  uint2 u2 = uint2(float2(3.7f, 0.2f));
  pv("ctor_f2u", u2);
  pv("ctor_zero", float4());
  float4 d(1.0f);
  float4 e{a2, a2 * 3.0f};
  pv("direct_init", d + e);
  float4 li = {a2.yx, 5, 6};
  pv("list_init", li);
  vec<float, 3> vv = vec<float, 3>(1, 2, 3);
  pv3("vec_tpl", vv);
  int3 gi = int3(uint3(4u, 5u, 6u));
  pv3("ctor_u2i", gi);
  half4 h4 = half4(float4(0.1f, 0.2f, 0.3f, 65504.0f));
  pv("ctor_half", float4(h4));
  float4 nested = float4(float2(1, 2), float2(float(3), 4.0f));
  pv("ctor_nested", nested);
  pv("ctor_multiline", float4(
      1.0f,
      2.0f, 3.0f,
      4.0f));
  pv("helper", scale_helper(float4(1, 2, 3, 4), 0.5f));
  pv("template_helper", twice(float2(1.25f, 2.5f)));
  pf("constant_array", COEFFS[0] + COEFFS[1] + COEFFS[2] + NTAPS);
  pv("ctor_bool", (int4)bool4(true, false, true, false));
  float4 fromp = float4(float3(1, 2, 3), 4);
  pv("ctor_v3s", fromp);
  // vector arithmetic with scalars of other types
  pv("vec_scalar", float4(1, 2, 3, 4) * 2 + 0.5);
  pv("ivec_scalar", uint4(1, 2, 3, 4) * 3u + 1u);

  // ---------------- packed vectors ----------------
  pi("sizeof_packed_float3", sizeof(packed_float3));
  pi("alignof_packed_float3", alignof(packed_float3));
  pi("sizeof_float3", sizeof(float3));
  pi("sizeof_half3", sizeof(half3));
  pi("sizeof_packed_half3", sizeof(packed_half3));
  pi("sizeof_packed_float4", sizeof(packed_float4));
  pi("sizeof_Particle", sizeof(Particle));
  packed_float3 pk = packed_float3(1.0f, 2.0f, 3.0f);
  float3 fromk = pk;
  pk = fromk * 2.0f;
  pk[1] = 10.0f;
  pk.z += 1.0f;
  pv3("packed", float3(pk));
  float raw[7] = {0, 1, 2, 3, 4, 5, 6};
  device packed_float3* pp = (device packed_float3*)(raw + 1);
  float3 q = pp[1];
  pv3("packed_buffer", q);
  pp[0] = q + 1.0f;
  pv3("packed_store", float3(raw[1], raw[2], raw[3]));
  pv3("packed_arith", pk * 0.5f + pp[1]);

  // ---------------- bool vectors, relational ----------------
  bool4 m = c > 2.5f;
  pi("all_any", (all(m) ? 10 : 0) + (any(m) ? 1 : 0));
  pi("all_cmp", all(c == c) ? 1 : 0);
  pv("select_v", select(float4(0.0f), c, m));
  pv("select_cmp", select(c, -c, c < 2.5f));
  pf("select_s", select(1.0f, 2.0f, true));
  pv("ternary_v", (c > 2.5f) ? c : float4(-1.0f));
  bool3 b3 = bool3(true, false, true);
  pi("bool3_members", b3.x * 100 + b3.y * 10 + b3.z + sizeof(bool3) * 1000 + sizeof(bool4) * 10000);
  bool4 nb = !m && bool4(true);
  nb.w = true;
  nb[0] = true;
  pv("bool_ops", (int4)(nb | (m & false)));
  bool2 b2 = true;
  pi("bool_splat", all(b2) && !any(!b2));
  bool4 eq = (float4(1, 2, 3, 4) == float4(1, 0, 3, 0));
  pv("bool_eq", (int4)eq);
  pi("bool_swz", all(m.zw) * 1000 + any(m.xy) * 100 + all(eq.xz) * 10 + any(eq.yw));
  bool2 sw = m.zw;
  eq.xy = sw;
  eq.zw = !m.xy;
  pv("bool_swz_write", (int4)eq);
  pv("bool_swz_ops", (int4)bool4(m.xy && eq.zw, m.zw || false));
  pv("bool_select_swz", select(float2(1, 2), float2(3, 4), m.yz));
  float4 specials = float4(INFINITY, -INFINITY, NAN, 1.0f);
  pv("isnan", (int4)isnan(specials));
  pv("isinf", (int4)isinf(specials));
  pv("isfinite", (int4)isfinite(specials));
  pv("signbit", (int4)signbit(float4(-0.0f, 0.0f, -2.0f, 3.0f)));

  // ---------------- float math vs numpy ----------------
  @@MATH@@

  float xs[8] = {@@XS@@};
  for (int i = 0; i < 8; ++i) {
    float x = xs[i];
    P("atan2 %.17g\n", atan2(x, 1.3f));
    P("pow %.17g\n", pow(fabs(x), 1.7f));
    P("powr %.17g\n", powr(fabs(x) + 0.5f, 0.3f));
    P("fmod %.17g\n", fmod(x, 1.1f));
    P("hypot %.17g\n", hypot(x, 2.0f));
    P("copysign %.17g\n", copysign(2.0f, x));
    P("fmin %.17g\n", fmin(x, 0.5f));
    P("fmax %.17g\n", fmax(x, 0.5f));
    P("clamp %.17g\n", clamp(x, -1.0f, 2.0f));
    P("mix %.17g\n", mix(x, 3.0f, 0.25f));
    P("step %.17g\n", step(0.5f, x));
    P("smoothstep %.17g\n", smoothstep(-1.0f, 2.0f, x));
    P("fma %.17g\n", fma(x, 1.5f, 0.25f));
    P("mad %.17g\n", mad(x, 1.5f, 0.25f));
    float cs;
    float sn = sincos(x, cs);
    P("sincos %.17g %.17g\n", sn, cs);
    P("fast_exp %.17g\n", fast::exp(x));
    P("precise_sin %.17g\n", metal::precise::sin(x));
    P("metal_fast_tanh %.17g\n", metal::fast::tanh(x));
    P("min3 %.17g\n", min3(x, 0.5f, -1.0f));
    P("max3 %.17g\n", max3(x, 0.5f, -1.0f));
    P("median3 %.17g\n", median3(x, 0.5f, -1.0f));
    P("mixed_max %.17g\n", max(x, 0.0));
    P("mixed_min %.17g\n", min(x, 1));
  }
  pf("overloads", overloads(3.0f, 2, 5u, half(1.5h), 0.5));
  pv("vec_math", sqrt(float4(1, 4, 9, 16)) + exp(float4(0.0f)) + max(float4(-1, 2, -3, 4), 0.0f));
  pv("vec_clamp", clamp(float4(-1, 0.5, 2, 3), 0.0f, 1.0f));
  pv("vec_half_math", float4(sqrt(half4(1, 4, 9, 16))));
  pf("half_exp", float(exp(half(1.0h))));
  pf("bf16_exp", float(exp(bfloat(1.0f))));
  pf("log1p_small", log1p(1e-7f));

  // ---------------- geometric ----------------
  float3 ga = float3(1, 2, 3), gb = float3(-2, 0.5, 4);
  pf("dot", dot(ga, gb));
  pv3("cross", cross(ga, gb));
  pf("length", length(ga));
  pf("length_squared", length_squared(ga));
  pf("distance", distance(ga, gb));
  pv3("normalize", normalize(ga));
  pv3("reflect", reflect(ga, normalize(gb)));

  // ---------------- matrices ----------------
  float3x3 M = float3x3(float3(1, 2, 3), float3(0, 1, 4), float3(5, 6, 0));
  float3 mv = M * float3(1, -1, 2);
  float3 vm = float3(1, -1, 2) * M;
  float3x3 MM = M * transpose(M) + float3x3(1.0f) * 2.0f;
  pv3("mat_mv", mv);
  pv3("mat_vm", vm);
  pv3("mat_mm_col1", MM[1]);
  pf("mat_det", determinant(M) + 1000 * determinant(float2x2(1, 2, 3, 4)));
  float4x4 M4 = float4x4(2.0f);
  M4[3] = float4(1, 2, 3, 1);
  pv("mat4_affine", M4 * float4(1, 1, 1, 1));
  pf("mat4_det", determinant(M4));
  float2x3 R23 = float2x3(float3(1, 2, 3), float3(4, 5, 6));
  pv3("mat23_mv", R23 * float2(1, 10));
  pi("sizeof_float3x3", sizeof(float3x3));

  // ---------------- half arithmetic (rounds like numpy float16) ----------------
  @@HALF@@
  for (int i = 0; i < @@NHALF@@; ++i) {
    half a = as_type<half>(HA[i]), b = as_type<half>(HB[i]);
    half r1 = a * b + a;
    half r2 = (a - b) / b;
    half r3 = a * a * a - b;
    half2 hv = half2(a, b) * half2(b, a) + half(0.1h);
    P("half_ops %u %u %u %u %u\n", (unsigned)as_type<ushort>(r1), (unsigned)as_type<ushort>(r2),
      (unsigned)as_type<ushort>(r3), (unsigned)as_type<ushort>(hv.x), (unsigned)as_type<ushort>(hv.y));
  }
  half big = 60000.0h;
  pf("half_overflow", float(big * 2.0h));
  pf("half_literal", float(0.1h));
  bfloat bf = bfloat(1.0f) + bfloat(0.00390625f);
  pf("bfloat_round", float(bf));
  bfloat16_t bb = 3.0f;
  pf("bfloat_arith", float(bb * bfloat16_t(1.1f)));
  float16_t f16 = 2.5h;
  pf("float16_t", float(f16 + f16));

  // ---------------- as_type ----------------
  pi("as_type_f2u", as_type<uint>(1.0f));
  pf("as_type_u2f", as_type<float>(0x40490fdbu));
  pi("as_type_h2us", as_type<ushort>(half(1.0h)));
  pi("as_type_half2", as_type<uint>(half2(1.0h, -2.0h)));
  uint2 u2b = as_type<uint2>(float2(1.0f, -0.0f));
  pi("as_type_vec", ((long long)u2b.x << 32) | u2b.y);
  pi("as_type_int_neg", as_type<uint>(-1));

  // ---------------- integer functions ----------------
  @@INTS@@
  for (int k = 0; k < 8; ++k) {
    int v = (int)IS[k];
    uint uv = as_type<uint>(v);
    P("int_fns %d %u %u %u %u %d %u %d %d %d\n", abs(v), popcount(uv), clz(uv), ctz(uv),
      reverse_bits(uv), mulhi(v, 1234567), rotate(uv, 5u), extract_bits(v, 4u, 8u),
      addsat(v, 1000000000), subsat(v, 1000000000));
  }
  pi("int_minmax", min(3, -4) * 100 + (int)max(3u, 7u) * 10 + clamp(15, 0, 9));
  pv("int_vec", abs(int4(-1, 2, -3, 4)) + min(int4(5), int4(1, 9, 2, 8)));
  pi("ushort_clz", clz((ushort)1));
  pi("uchar_popcount", popcount((uchar)0xff));
  pi("long_mulhi", mulhi((ulong)0xffffffffffffffffull, (ulong)2));
  pi("insert_bits", insert_bits(0u, 0xfu, 4u, 4u));
  pi("absdiff", absdiff(3, -5));
  pi("ceildiv", ceildiv(10, 3) * 100 + ceildiv(9u, 3u));

  // ---------------- atomics ----------------
  atomic_int ai[2];
  atomic_store_explicit(&ai[0], 5, memory_order_relaxed);
  atomic_store_explicit(&ai[1], 0, memory_order_relaxed);
  for (int k = 0; k < 100; ++k) atomic_fetch_add_explicit(&ai[0], 2, memory_order_relaxed);
  int old = atomic_fetch_sub_explicit(&ai[0], 5, memory_order_relaxed);
  pi("atomic_add", atomic_load_explicit(&ai[0], memory_order_relaxed) * 1000 + (old == 205));
  device atomic<int>* ap = &ai[1];
  atomic_fetch_max_explicit(ap, 7, memory_order_relaxed);
  atomic_fetch_min_explicit(ap, 3, memory_order_relaxed);
  atomic_fetch_or_explicit(ap, 8, memory_order_relaxed);
  atomic_fetch_xor_explicit(ap, 1, memory_order_relaxed);
  atomic_fetch_and_explicit(ap, 14, memory_order_relaxed);
  pi("atomic_bits", atomic_load_explicit(ap, memory_order_relaxed));
  int expected = 10;
  bool ok1 = atomic_compare_exchange_weak_explicit(ap, &expected, 99, memory_order_relaxed, memory_order_relaxed);
  int seen = expected;
  bool ok2 = atomic_compare_exchange_weak_explicit(ap, &expected, 99, memory_order_relaxed, memory_order_relaxed);
  pi("atomic_cas", ok1 * 1000 + seen * 10 + ok2);
  pi("atomic_exchange", atomic_exchange_explicit(ap, 4, memory_order_relaxed) * 10 + atomic_load_explicit(ap, memory_order_relaxed));
  float fbuf[1] = {1.5f};
  device atomic<float>* af = (device atomic<float>*)fbuf;
  for (int k = 0; k < 10; ++k) atomic_fetch_add_explicit(af, 0.25f, memory_order_relaxed);
  pf("atomic_float", fbuf[0]);
  atomic_uint au;
  atomic_store_explicit(&au, 0u, memory_order_relaxed);
  atomic_fetch_sub_explicit(&au, 1u, memory_order_relaxed);
  pi("atomic_uint_wrap", atomic_load_explicit(&au, memory_order_relaxed));
  volatile device atomic_int* vap = &ai[0];
  pi("atomic_volatile", atomic_fetch_add_explicit(vap, 1, memory_order_relaxed));
  pi("sizeof_atomic", sizeof(atomic_int) * 10 + sizeof(atomic<float>));
  atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);
  pi("mem_flags", (int)(metal::mem_flags::mem_threadgroup | mem_flags::mem_device));
  pi("memory_order", (int)metal::memory_order::memory_order_relaxed);

  // ---------------- MLX utils ----------------
  pf("limits_float_max", Limits<float>::max);
  pf("limits_float_min", Limits<float>::min);
  pf("limits_float_finite_max", Limits<float>::finite_max);
  pf("limits_float_finite_min", Limits<float>::finite_min);
  pf("limits_half_finite_max", (float)Limits<half>::finite_max);
  pf("limits_half_max", (float)Limits<float16_t>::max);
  pi("limits_int_min", Limits<int>::min);
  pi("limits_int_max", Limits<int32_t>::max);
  pi("limits_uint8_max", Limits<uint8_t>::max);
  pi("limits_int64_min", Limits<int64_t>::min);
  pf("limits_bf16_finite_max", (float)Limits<bfloat16_t>::finite_max);
  pf("numeric_limits_eps", metal::numeric_limits<float>::epsilon());
  pf("numeric_limits_half_eps", (float)numeric_limits<half>::epsilon());
  pf("constants", M_PI_F + M_E_F * 10 + (MAXFLOAT == FLT_MAX) * 100 + (HUGE_VALF == INFINITY) * 1000);
  pf("flt", FLT_MIN * 1e38f + FLT_EPSILON * 1e7f);
  @@E2L@@
  for (int i = 0; i < 24; ++i) P("elem_to_loc %lld %lld\n", (long long)elem_to_loc(i, shape, strides, 3),
                                 (long long)elem_to_loc<int>(i, shape, strides, 3));
  for (uint z = 0; z < 2; ++z) for (uint y = 0; y < 3; ++y) for (uint x = 0; x < 4; ++x)
    P("elem_to_loc3 %lld\n", (long long)elem_to_loc(uint3(x, y, z), shape, strides, 3));
  pi("elem_to_loc_2", elem_to_loc_2(uint2(1, 2), strides + 1));
  complex64_t z1(1.0f, 2.0f), z2(3.0f, -1.0f);
  complex64_t zp = z1 * z2 + complex64_t(1.0f) - z2;
  P("complex %.17g %.17g\n", zp.real, zp.imag);
  pi("sizeof_complex", sizeof(complex64_t));
  return 0;
}
"""


def _program() -> str:
    math_lines = []
    for name in UNARY:
        dom = UNARY_DOMAIN.get(name, "XS")
        math_lines.append(
            f'for (int i = 0; i < 8; ++i) P("u_{name} %.17g\\n", {name}(U_{dom}[i]));'
        )
    math = (
        _carr("U_XS", "float", XS, _flit)
        + _carr("U_POS", "float", POS, _flit)
        + _carr("U_UNIT", "float", UNIT, _flit)
        + "\n".join(math_lines)
    )
    math = math.replace("static const", "const")
    half = _carr("HA", "ushort", HALF_A.view(np.uint16), lambda v: str(int(v))) + _carr(
        "HB", "ushort", HALF_B.view(np.uint16), lambda v: str(int(v))
    )
    ints = _carr("IS", "long long", INTS, lambda v: f"{int(v)}LL")
    e2l = "int shape[3] = {2, 3, 4}; int64_t strides[3] = {1, 8, 2};\n"
    return (
        PROGRAM.replace("@@MATH@@", math)
        .replace("@@XS@@", ", ".join(_flit(v) for v in XS))
        .replace("@@HALF@@", half)
        .replace("@@NHALF@@", str(len(HALF_A)))
        .replace("@@INTS@@", ints)
        .replace("@@E2L@@", e2l)
    )


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Rewrite, compile and run the program once; {key: [rows of floats]}."""
    tmp = tmp_path_factory.mktemp("prelude")
    text = _program()
    rewritten = rewrite_metal(text)
    assert rewritten.count("\n") == text.count("\n")
    exe = tmp / "prog"
    r = _compile(rewritten, exe)
    assert r.returncode == 0, r.stderr[-6000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    out: dict[str, list[list[float]]] = {}
    for line in run.stdout.splitlines():
        key, *vals = line.split()
        out.setdefault(key, []).append([float(v) for v in vals])
    return out


def one(results, key):
    rows = results[key]
    assert len(rows) == 1, key
    return rows[0]


def col(results, key):
    return np.array(results[key], dtype=np.float64)


# ---------------------------------------------------------------------------
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_constructors_and_swizzles(results):
    assert one(results, "ctor_mix") == [2, 1, 3, 4]
    assert one(results, "ctor_splat") == [1.5, 1.5, 1.5]
    assert one(results, "ctor_conv") == [1, -2, 3, -4]
    assert one(results, "ccast_conv") == [1, -2, 3, -4]
    assert one(results, "scast_conv") == [2, -4, 6, -8]
    assert one(results, "swz_read") == [3, 1, 2]
    assert one(results, "swz_write") == [9, 8, 18, 16]
    assert one(results, "swz_rgba") == [16, 18, 8, 9]
    assert one(results, "ctor_f2u") == [3, 0]
    assert one(results, "ctor_zero") == [0, 0, 0, 0]
    assert one(results, "direct_init") == [2, 3, 4, 7]
    assert one(results, "list_init") == [2, 1, 5, 6]
    assert one(results, "vec_tpl") == [1, 2, 3]
    assert one(results, "ctor_u2i") == [4, 5, 6]
    np.testing.assert_array_equal(
        one(results, "ctor_half"), np.float16([0.1, 0.2, 0.3, 65504]).astype(np.float64)
    )
    assert one(results, "ctor_nested") == [1, 2, 3, 4]
    assert one(results, "ctor_multiline") == [1, 2, 3, 4]
    assert one(results, "helper") == [0.5, 1, 1.5, 2]
    assert one(results, "template_helper") == [2.5, 5]
    assert one(results, "constant_array") == [9]
    assert one(results, "ctor_bool") == [1, 0, 1, 0]
    assert one(results, "ctor_v3s") == [1, 2, 3, 4]
    assert one(results, "vec_scalar") == [2.5, 4.5, 6.5, 8.5]
    assert one(results, "ivec_scalar") == [4, 7, 10, 13]


def test_packed_vectors(results):
    assert one(results, "sizeof_packed_float3") == [12]
    assert one(results, "alignof_packed_float3") == [4]
    assert one(results, "sizeof_float3") == [16]
    assert one(results, "sizeof_half3") == [8]
    assert one(results, "sizeof_packed_half3") == [6]
    assert one(results, "sizeof_packed_float4") == [16]
    assert one(results, "sizeof_Particle") == [32]
    assert one(results, "packed") == [2, 10, 7]
    assert one(results, "packed_buffer") == [4, 5, 6]
    assert one(results, "packed_store") == [5, 6, 7]
    assert one(results, "packed_arith") == [1 + 4, 5 + 5, 3.5 + 6]


def test_bool_vectors_and_relational(results):
    assert one(results, "all_any") == [1]
    assert one(results, "all_cmp") == [1]
    assert one(results, "select_v") == [0, 0, 3, 4]
    assert one(results, "select_cmp") == [-2, -1, 3, 4]
    assert one(results, "select_s") == [2]
    assert one(results, "ternary_v") == [-1, -1, 3, 4]
    assert one(results, "bool3_members") == [44101]
    assert one(results, "bool_ops") == [1, 1, 0, 1]
    assert one(results, "bool_splat") == [1]
    assert one(results, "bool_eq") == [1, 0, 1, 0]
    assert one(results, "bool_swz") == [1000 + 0 + 10 + 0]
    assert one(results, "bool_swz_write") == [1, 1, 1, 1]
    assert one(results, "bool_swz_ops") == [0, 0, 1, 1]
    assert one(results, "bool_select_swz") == [1, 4]
    assert one(results, "isnan") == [0, 0, 1, 0]
    assert one(results, "isinf") == [1, 1, 0, 0]
    assert one(results, "isfinite") == [0, 0, 0, 1]
    assert one(results, "signbit") == [1, 0, 1, 0]


@pytest.mark.parametrize("name", UNARY)
def test_unary_math_matches_numpy(results, name):
    x = {"XS": XS, "POS": POS, "UNIT": UNIT}[UNARY_DOMAIN.get(name, "XS")]
    got = col(results, "u_" + name)[:, 0]
    want = _np_unary(name, x)
    if name == "rint":
        want = np.rint(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6, err_msg=name)


def test_binary_and_ternary_math(results):
    x = XS.astype(np.float64)
    checks = {
        "atan2": np.arctan2(x, np.float32(1.3)),
        "pow": np.abs(x) ** np.float32(1.7),
        "powr": (np.abs(x) + 0.5) ** np.float32(0.3),
        "fmod": np.fmod(x, np.float32(1.1)),
        "hypot": np.hypot(x, 2),
        "copysign": np.copysign(2, x),
        "fmin": np.minimum(x, 0.5),
        "fmax": np.maximum(x, 0.5),
        "clamp": np.clip(x, -1, 2),
        "mix": x + (3 - x) * 0.25,
        "step": (x >= 0.5).astype(float),
        "fma": x * 1.5 + 0.25,
        "mad": x * 1.5 + 0.25,
        "fast_exp": np.exp(x),
        "precise_sin": np.sin(x),
        "metal_fast_tanh": np.tanh(x),
        "min3": np.minimum(np.minimum(x, 0.5), -1),
        "max3": np.maximum(np.maximum(x, 0.5), -1),
        "median3": np.median(np.stack([x, np.full_like(x, 0.5), np.full_like(x, -1)]), axis=0),
        "mixed_max": np.maximum(x, 0),
        "mixed_min": np.minimum(x, 1),
    }
    t = np.clip((x + 1) / 3, 0, 1)
    checks["smoothstep"] = t * t * (3 - 2 * t)
    for key, want in checks.items():
        np.testing.assert_allclose(col(results, key)[:, 0], want, rtol=3e-6, atol=1e-6, err_msg=key)
    assert np.isfinite(one(results, "overloads")[0])
    sc = col(results, "sincos")
    np.testing.assert_allclose(sc[:, 0], np.sin(x), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(sc[:, 1], np.cos(x), rtol=2e-6, atol=1e-7)
    assert one(results, "vec_math") == [1 + 1 + 0, 2 + 1 + 2, 3 + 1 + 0, 4 + 1 + 4]
    assert one(results, "vec_clamp") == [0, 0.5, 1, 1]
    assert one(results, "vec_half_math") == [1, 2, 3, 4]
    assert one(results, "half_exp")[0] == float(np.float16(np.exp(1.0)))
    assert abs(one(results, "bf16_exp")[0] - np.e) < 0.02
    np.testing.assert_allclose(one(results, "log1p_small"), [1e-7], rtol=1e-6)


def test_geometric(results):
    a, b = np.array([1, 2, 3.0]), np.array([-2, 0.5, 4.0])
    np.testing.assert_allclose(one(results, "dot"), [a @ b], rtol=1e-6)
    np.testing.assert_allclose(one(results, "cross"), np.cross(a, b), rtol=1e-6)
    np.testing.assert_allclose(one(results, "length"), [np.linalg.norm(a)], rtol=1e-6)
    np.testing.assert_allclose(one(results, "length_squared"), [a @ a], rtol=1e-6)
    np.testing.assert_allclose(one(results, "distance"), [np.linalg.norm(a - b)], rtol=1e-6)
    np.testing.assert_allclose(one(results, "normalize"), a / np.linalg.norm(a), rtol=1e-6)
    n = b / np.linalg.norm(b)
    np.testing.assert_allclose(one(results, "reflect"), a - 2 * (n @ a) * n, rtol=1e-5)


def test_matrices(results):
    M = np.array([[1, 2, 3], [0, 1, 4], [5, 6, 0]], dtype=np.float64).T  # columns given
    v = np.array([1, -1, 2.0])
    np.testing.assert_allclose(one(results, "mat_mv"), M @ v)
    np.testing.assert_allclose(one(results, "mat_vm"), v @ M)
    np.testing.assert_allclose(one(results, "mat_mm_col1"), (M @ M.T + 2 * np.eye(3))[:, 1])
    np.testing.assert_allclose(one(results, "mat_det"), [np.linalg.det(M) + 1000 * -2.0], rtol=1e-6)
    M4 = 2 * np.eye(4)
    M4[:, 3] = [1, 2, 3, 1]
    np.testing.assert_allclose(one(results, "mat4_affine"), M4 @ np.ones(4))
    np.testing.assert_allclose(one(results, "mat4_det"), [np.linalg.det(M4)], rtol=1e-6)
    np.testing.assert_allclose(one(results, "mat23_mv"), [41, 52, 63])
    assert one(results, "sizeof_float3x3") == [48]


def test_half_arithmetic_rounds_like_numpy(results):
    rows = np.array(results["half_ops"], dtype=np.uint16)
    a, b = HALF_A, HALF_B
    with np.errstate(all="ignore"):
        want = np.stack(
            [
                a * b + a,
                (a - b) / b,
                a * a * a - b,
                a * b + np.float16(0.1),
                b * a + np.float16(0.1),
            ],
            axis=1,
        )
    np.testing.assert_array_equal(rows, want.view(np.uint16))
    assert one(results, "half_overflow") == [np.inf]
    assert one(results, "half_literal") == [float(np.float16(0.1))]
    assert one(results, "bfloat_round") == [1.0]  # 1 + 2^-8 rounds to even in bfloat
    assert one(results, "bfloat_arith") == [3.3125]
    assert one(results, "float16_t") == [5.0]


def test_as_type(results):
    assert one(results, "as_type_f2u") == [0x3F800000]
    np.testing.assert_allclose(one(results, "as_type_u2f"), [np.pi], rtol=1e-7)
    assert one(results, "as_type_h2us") == [0x3C00]
    assert one(results, "as_type_half2") == [0xC0003C00]
    assert one(results, "as_type_vec") == [(0x3F800000 << 32) | 0x80000000]
    assert one(results, "as_type_int_neg") == [0xFFFFFFFF]


def _bitrev32(u):
    return int(f"{u:032b}"[::-1], 2)


def test_integer_functions(results):
    rows = results["int_fns"]
    for v, row in zip(INTS, rows):
        v = int(v)
        u = v & 0xFFFFFFFF
        s32 = lambda t: ((t + 2**31) % 2**32) - 2**31  # noqa: E731
        want = [
            s32(abs(v)),
            bin(u).count("1"),
            32 - u.bit_length(),
            32 if u == 0 else (u & -u).bit_length() - 1,
            _bitrev32(u),
            (v * 1234567) >> 32,
            ((u << 5) | (u >> 27)) & 0xFFFFFFFF,
            s32(((u >> 4) & 0xFF) << 24) >> 24,
            max(min(v + 1000000000, 2**31 - 1), -(2**31)),
            max(min(v - 1000000000, 2**31 - 1), -(2**31)),
        ]
        assert row == want, (v, row, want)
    assert one(results, "int_minmax") == [-400 + 70 + 9]
    assert one(results, "int_vec") == [2, 7, 5, 9]
    assert one(results, "ushort_clz") == [15]
    assert one(results, "uchar_popcount") == [8]
    assert one(results, "long_mulhi") == [1]
    assert one(results, "insert_bits") == [0xF0]
    assert one(results, "absdiff") == [8]
    assert one(results, "ceildiv") == [403]


def test_atomics(results):
    assert one(results, "atomic_add") == [200 * 1000 + 1]
    # max(0,7)=7, min(7,3)=3, 3|8=11, 11^1=10, 10&14=10
    assert one(results, "atomic_bits") == [10]
    assert one(results, "atomic_cas") == [1000 + 100 + 0]
    assert one(results, "atomic_exchange") == [99 * 10 + 4]
    assert one(results, "atomic_float") == [4.0]
    assert one(results, "atomic_uint_wrap") == [2**32 - 1]
    assert one(results, "atomic_volatile") == [200]
    assert one(results, "sizeof_atomic") == [44]
    assert one(results, "mem_flags") == [3]
    assert one(results, "memory_order") == [0]


def test_mlx_utils(results):
    f32 = np.finfo(np.float32)
    assert one(results, "limits_float_max") == [np.inf]
    assert one(results, "limits_float_min") == [-np.inf]
    assert one(results, "limits_float_finite_max") == [float(f32.max)]
    assert one(results, "limits_float_finite_min") == [float(f32.min)]
    assert one(results, "limits_half_finite_max") == [65504]
    assert one(results, "limits_half_max") == [np.inf]
    assert one(results, "limits_int_min") == [-(2**31)]
    assert one(results, "limits_int_max") == [2**31 - 1]
    assert one(results, "limits_uint8_max") == [255]
    assert one(results, "limits_int64_min") == [-(2**63)]
    assert one(results, "limits_bf16_finite_max") == [3.3895313892515355e38]
    assert one(results, "numeric_limits_eps") == [float(f32.eps)]
    assert one(results, "numeric_limits_half_eps") == [float(np.finfo(np.float16).eps)]
    np.testing.assert_allclose(one(results, "constants"), [np.pi + np.e * 10 + 1100], rtol=1e-6)
    np.testing.assert_allclose(
        one(results, "flt"), [float(f32.tiny) * 1e38 + float(f32.eps) * 1e7], rtol=1e-6
    )
    shape, strides = (2, 3, 4), (1, 8, 2)
    want = [int(np.dot(np.unravel_index(i, shape), strides)) for i in range(24)]
    got = col(results, "elem_to_loc")
    assert got[:, 0].tolist() == want and got[:, 1].tolist() == want
    want3 = [z * 1 + y * 8 + x * 2 for z in range(2) for y in range(3) for x in range(4)]
    assert col(results, "elem_to_loc3")[:, 0].tolist() == want3
    assert one(results, "elem_to_loc_2") == [1 * 2 + 2 * 8]
    zp = (1 + 2j) * (3 - 1j) + 1 - (3 - 1j)
    assert one(results, "complex") == [zp.real, zp.imag]
    assert one(results, "sizeof_complex") == [8]


# ---------------------------------------------------------------------------
# Things MSL rejects are rejected here too (each is its own small program).
# ---------------------------------------------------------------------------
REJECTED = {
    "mixed_vector_types": "float4 a = float4(1.0f); int4 b = int4(1); float4 c = a * b;",
    "component_count": "float4 a = float4(float2(1.0f), 2.0f);",
    "as_type_size": "float a = as_type<float>(half(1.0h));",
}


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_rejected_constructs(tmp_path):
    srcs = {k: rewrite_metal(f"int f_{k}() {{ {v} return 0; }}\n") for k, v in REJECTED.items()}
    for k, src in srcs.items():
        r = _compile(src, tmp_path / f"{k}.o", obj=True)
        assert r.returncode != 0, k


@pytest.mark.parametrize("target", ["aarch64-linux-gnu", "aarch64-macos"])
def test_prelude_compiles_for_other_targets(tmp_path, target):
    code = rewrite_metal(
        "float4 f(float4 a, half h, bfloat b) { return float4(a.xy, float(h * h), float(b * b)) + sin(a); }\n"
    )
    r = _compile(code, tmp_path / "x.o", target=target, obj=True)
    assert r.returncode == 0, r.stderr[-4000:]


# ---------------------------------------------------------------------------
# rewrite_metal properties
# ---------------------------------------------------------------------------
SNIPPETS = [
    "float4 a = float4(v.xy, 1.0f, b);",
    "half2 h = half2(1.0h, .5h) + 2h;",
    "uint3 g = uint3(gid);",
    "int2 q = int2{1, 2};",
    "x = (float4)i4.zyxw + (float4)(a + b);",
    "float4 d(1.0f);",
    "float4 e{a.xy, b.zw};",
    "threadgroup float tile[18][18];",
    "threadgroup float* p = tile;",
    "threadgroup_barrier(mem_flags::mem_threadgroup);",
    "// float4(1, 2) in a comment",
    "/* threadgroup float t[4]; */",
    '"float4(1)"',
    "vec<float, 4> w = vec<float, 4>(1.0f);",
    "static_cast<float4>(x)",
    "float(x) + uint(y)",
    "float4 helper(float4 a, float b) { return a; }",
    "{",
    "}",
    "(",
    ")",
    "float4(",
    "/*",
    "*/",
    "'",
    '"',
    "\\",
    "threadgroup",
    "float4{",
    "(float4)",
    "return (float4)-x;",
    "#define X float4(1)",
]


def test_rewrite_preserves_line_count_random():
    rnd = random.Random(7)
    for _ in range(400):
        parts = [
            rnd.choice(SNIPPETS) + rnd.choice(["\n", " ", "\n\n", ""])
            for _ in range(rnd.randint(1, 12))
        ]
        text = "".join(parts)
        out = rewrite_metal(text)
        assert out.count("\n") == text.count("\n"), text


def test_rewrite_keeps_lines_in_place():
    text = (
        "float4 a = float4(\n  1, 2,\n  3, 4);\nthreadgroup float t[4]; // float4(1)\nx = 1.5h;\n"
    )
    out = rewrite_metal(text).split("\n")
    assert out[0].startswith("float4 a = __mlxsci_make<float,4>(")
    assert out[1].strip() == "1, 2,"
    assert out[3] == 'typedef float __sim_tgt_t[4]; __SIM_TG_BIND(t, "float[4]"); // float4(1)'
    assert out[4] == "x = 1.5f16;"


def test_rewrite_leaves_comments_and_strings_alone():
    text = (
        "// float4(1, 2, 3, 4) threadgroup float x[2];\n"
        '/* half2(1.0h, 2h)\n threadgroup int y; */ const char* s = "float2(1, 2) 1.0h";\n'
        "char c = 'h'; int n = 1'000;\n"
    )
    out = rewrite_metal(text)
    assert out == text
    assert mask_comments_and_strings(text).count("\n") == text.count("\n")


def test_rewrite_examples():
    cases = {
        "float4 a = float4(b.xy, 1, 2);": "float4 a = __mlxsci_make<float,4>(b.xy, 1, 2);",
        "metal::float3 m = metal::float3(1.0f);": "metal::float3 m = __mlxsci_make<float,3>(1.0f);",
        "return (float4)-x;": "return __mlxsci_make<float,4>(-x);",
        "y = (half4)v.zyxw * 2;": "y = __mlxsci_make<half,4>(v.zyxw) * 2;",
        "y = (float2)(a + b);": "y = __mlxsci_make<float,2>((a + b));",
        "n = sizeof(float4) + f(float4);": "n = sizeof(float4) + f(float4);",
        "float4 d(1.0f);": "float4 d = __mlxsci_make<float,4>(1.0f);",
        "float4 e{a, b};": "float4 e = __mlxsci_make<float,4>(a, b);",
        "float4 f(float4 a);": "float4 f(float4 a);",
        "float4 f(Ray r) {": "float4 f(Ray r) {",
        "float4 g(const device float* p);": "float4 g(const device float* p);",
        "operator float4() const { return v; }": "operator float4() const { return v; }",
        "x = static_cast<uint2>(f);": "x = __mlxsci_make<uint,2>(f);",
        "x = vec<T, N>(0);": "x = __mlxsci_make<T,N>(0);",
        "uint i = uint(x) + float2x2(1);": "uint i = uint(x) + float2x2(1);",
        # guarded arrays: a reference bound to memory between guard pages
        "threadgroup atomic<int> c; threadgroup float2 s[TG];": 'typedef atomic<int> __sim_tgt_c; __SIM_TG_BIND(c, "atomic<int>"); '
        'typedef float2 __sim_tgt_s[TG]; __SIM_TG_BIND(s, "float2[TG]");',
        "threadgroup vec<float, 4> v[8];": 'typedef vec<float, 4> __sim_tgt_v[8]; __SIM_TG_BIND(v, "vec<float, 4>[8]");',
        # an initialiser: a plain (unguarded) static
        "threadgroup float z = 0;": "__SIM_THREADGROUP float z = 0;",
        "void f(threadgroup float* t, threadgroup float& r);": "void f(threadgroup float* t, threadgroup float& r);",
        "x = 2h + 1e3h + 0.5H;": "x = 2.0f16 + 1e3f16 + 0.5f16;",
        "y = a1h + 0x1h;": "y = a1h + 0x1h;",
        "float4 b = {v.xy, 0, 1};": "float4 b = __mlxsci_make<float,4>(v.xy, 0, 1);",
        "float4 d = {1.0f}; float4 e = {};": "float4 d = {1.0f}; float4 e = {};",
        "float4 arr[2] = {float4(1), float4(2)};": "float4 arr[2] = {__mlxsci_make<float,4>(1), __mlxsci_make<float,4>(2)};",
    }
    for src, want in cases.items():
        assert rewrite_metal(src) == want, src
