"""simdgroup_matrix<T, 8, 8>::thread_elements() on the CPU simulator (issue 27).

Apple's compiler accepts the member; the Metal Shading Language Specification
(3.2, section 2.4) does not list it and leaves the element-to-thread mapping
unspecified. The simulator emulates the mapping MLX's Metal kernels rely on
(mlx/backend/metal/kernels/steel/gemm/mma.h: BlockMMA, BaseMMAFrag::get_coord):
with q = lane / 4, lane `lane` holds row (q & 4) + (lane / 2) % 4 and columns
c, c + 1 where c = (q & 2) * 2 + (lane % 2) * 2. Each feature has a kernel that
must match NumPy and, where a kernel is wrong, a twin whose wrong result the
simulator must show (a transposed layout, lanes that are not there).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import replace_once, smoke_eval

mx = pytest.importorskip("mlx.core")
sim = pytest.importorskip("mlxsci.backends.sim")

from mlxsci.import_metal_sci.convert import convert_source  # noqa: E402
from mlxsci.kernel.spec import KernelSpec  # noqa: E402

TESTS = Path(__file__).resolve().parents[2]
CANDIDATES = TESTS / "import_metal_sci" / "metal_sci_candidates"


@pytest.fixture(scope="module")
def backend():
    return sim.SimBackend()


def run(backend, body, inputs, outputs, *, threads=32, header="", name="te", dtype=mx.float32):
    """One SIMD-group's kernel: inputs X0, X1, ..., outputs O0, O1, ... of
    `outputs` elements each (`dtype`), one threadgroup of `threads`; the
    outputs as float32 NumPy arrays."""
    spec = KernelSpec(
        name=name,
        input_names=tuple(f"X{i}" for i in range(len(inputs))),
        output_names=tuple(f"O{i}" for i in range(len(outputs))),
        source=body,
        header=header,
    )
    outs = backend.kernel(spec)(
        inputs=[mx.array(x).astype(dtype) for x in inputs],
        output_shapes=[(n,) for n in outputs],
        output_dtypes=[dtype] * len(outputs),
        grid=(threads, 1, 1),
        threadgroup=(threads, 1, 1),
    )
    return [np.array(o.astype(mx.float32)) for o in outs]


def layout() -> dict[int, tuple[int, int]]:
    """(row, column) of thread_elements()[0] of each lane, written as the
    blocks the prelude's comment describes rather than its formula: lanes 0-7
    rows 0-3 x columns 0-3, 8-15 rows 0-3 x 4-7, 16-23 rows 4-7 x 0-3, 24-31
    rows 4-7 x 4-7; inside a block two lanes per row, columns 0 and 2."""
    out = {}
    for lane in range(32):
        block_row, block_col = 4 * (lane // 16), 4 * (lane // 8 % 2)
        out[lane] = (block_row + lane % 8 // 2, block_col + 2 * (lane % 2))
    return out


# The lane's first element in the kernels, MLX's formula; TE_POS_T assumes the
# transposed layout (element [0] at (c, r), [1] at (c + 1, r)): a kernel written
# for it is wrong on the GPU.
TE_POS = """
inline uint te_at(uint l, uint j) {
    uint q = l / 4, r = (q & 4) + (l / 2) % 4, c = (q & 2) * 2 + (l % 2) * 2;
    return r * 8 + c + j;
}
"""
TE_POS_T = """
inline uint te_at(uint l, uint j) {
    uint q = l / 4, r = (q & 4) + (l / 2) % 4, c = (q & 2) * 2 + (l % 2) * 2;
    return (c + j) * 8 + r;
}
"""

GEMM = """
uint l = thread_index_in_simdgroup;
simdgroup_matrix<{t}, 8, 8> a;
simdgroup_matrix<{t}, 8, 8> b;
a.thread_elements() = vec<{t}, 2>(X0[te_at(l, 0)], X0[te_at(l, 1)]);  // the whole view
b.thread_elements()[0] = X1[te_at(l, 0)];                                // one element
b.thread_elements()[1] = X1[te_at(l, 1)];
simdgroup_matrix<{t}, 8, 8> c = make_filled_simdgroup_matrix<{t}, 8, 8>({t}(0.5f));
simdgroup_multiply_accumulate(c, a, b, c);
thread const simdgroup_matrix<{t}, 8, 8>& cr = c;                        // read only
O0[te_at(l, 0)] = cr.thread_elements()[0];
O0[te_at(l, 1)] = cr.thread_elements()[1];
simdgroup_store(a * b, O1, 8);                                           // operator*
simdgroup_store(a, O2, 8);
"""


def operands(seed=27):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((8, 8)) / 2).astype(np.float32), (
        rng.standard_normal((8, 8)) / 2
    ).astype(np.float32)


@pytest.mark.parametrize(
    "t, dtype, tol",
    [("float", mx.float32, 1e-5), ("half", mx.float16, 1e-2), ("bfloat", mx.bfloat16, 5e-2)],
)
def test_fill_multiply_and_read_through_thread_elements(backend, t, dtype, tol):
    a, b = operands()
    # the inputs as the kernel sees them (rounded to the element type)
    a = np.array(mx.array(a).astype(dtype).astype(mx.float32)).astype(np.float64)
    b = np.array(mx.array(b).astype(dtype).astype(mx.float32)).astype(np.float64)
    prod, prod2, stored = run(
        backend,
        GEMM.replace("{t}", t),
        [a, b],
        [64, 64, 64],
        header=TE_POS,
        name=f"te_gemm_{t}",
        dtype=dtype,
    )
    np.testing.assert_allclose(prod.reshape(8, 8), a @ b + 0.5, rtol=tol, atol=tol)
    np.testing.assert_allclose(prod2.reshape(8, 8), a @ b, rtol=tol, atol=tol)
    np.testing.assert_array_equal(stored.reshape(8, 8), a)


def test_transposed_layout_is_wrong(backend):
    # The failing twin: a kernel that assumes element [j] is (c + j, r) fills
    # A^T and B^T and writes the product A^T B^T transposed: B A, not A B.
    a, b = operands()
    prod, _, _ = run(
        backend, GEMM.replace("{t}", "float"), [a, b], [64, 64, 64], header=TE_POS_T, name="te_t"
    )
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert not np.allclose(prod.reshape(8, 8), a64 @ b64 + 0.5, atol=1e-3)
    np.testing.assert_allclose(prod.reshape(8, 8), b64 @ a64 + 0.5, rtol=1e-5, atol=1e-5)


# MLX's newer steel code moves whole fragments: a vec<T, 2> loaded by a helper
# struct is cast onto the view, with a simdgroup_barrier before the multiply.
FRAG_HEADER = """
typedef vec<float, 2> frag_type;
struct Frag {
    static void load(thread frag_type& dst, const device float* src, uint l) {
        uint q = l / 4, r = (q & 4) + (l / 2) % 4, c = (q & 2) * 2 + (l % 2) * 2;
        dst[0] = src[r * 8 + c];
        dst[1] = src[r * 8 + c + 1];
    }
};
"""
FRAG = """
uint l = thread_index_in_simdgroup;
frag_type fa, fb;
Frag::load(fa, X0, l);
Frag::load(fb, X1, l);
simdgroup_float8x8 a, b, c(0.0f);
reinterpret_cast<thread frag_type&>(a.thread_elements()) = fa;
reinterpret_cast<thread frag_type&>(b.thread_elements()) = fb;
simdgroup_barrier(mem_flags::mem_none);
simdgroup_multiply_accumulate(c, a, b, c);
simdgroup_store(c, O0, 8);
"""


def test_fragments_cast_onto_the_view(backend):
    a, b = operands(5)
    (prod,) = run(backend, FRAG, [a, b], [64], header=FRAG_HEADER, name="te_frag")
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(prod.reshape(8, 8), want, rtol=1e-5, atol=1e-5)


LAYOUT = """
uint l = thread_index_in_simdgroup;
simdgroup_float8x8 m;
simdgroup_load(m, X0, 8);
O0[2 * l] = m.thread_elements()[0];
O0[2 * l + 1] = m.thread_elements()[1];
"""


def test_every_lane_holds_the_documented_elements(backend):
    x = np.arange(64, dtype=np.float32)  # element (r, c) is 8 r + c
    (got,) = run(backend, LAYOUT, [x], [64], name="te_layout")
    seen = []
    for lane, (r, c) in layout().items():
        assert got[2 * lane] == 8 * r + c, (lane, got[2 * lane], (r, c))
        assert got[2 * lane + 1] == 8 * r + c + 1, (lane, got[2 * lane + 1], (r, c + 1))
        seen += [8 * r + c, 8 * r + c + 1]
    assert sorted(seen) == list(range(64))  # each element held by exactly one lane


KEPT = """
uint l = thread_index_in_simdgroup;
simdgroup_float8x8 m;
simdgroup_load(m, X0, 8);
thread float2& v = m.thread_elements();
if (l == 5) v[0] = -1.0f;      // one lane's register: its element alone changes
simdgroup_store(m, O0, 8);
simdgroup_load(m, X0, 8);      // the reference sees the reloaded matrix ...
v += 100.0f;                   // ... and writes it
simdgroup_store(m, O1, 8);
"""


def test_a_kept_reference_and_one_lane_write_reach_the_matrix(backend):
    x = np.arange(64, dtype=np.float32)
    one, every = run(backend, KEPT, [x], [64, 64], name="te_kept")
    want = x.reshape(8, 8).copy()
    want[layout()[5]] = -1.0  # lane 5 holds (2, 2)
    np.testing.assert_array_equal(one.reshape(8, 8), want)
    np.testing.assert_array_equal(every, x + 100)


def test_lanes_that_are_not_there_give_poison(backend):
    a, b = operands()
    body = GEMM.replace("{t}", "float")
    # 16 threads: lanes 16-31 hold rows 4-7 of A and B and do not exist, so
    # every product element (which sums over k = 0..7) is poison; A's rows
    # 0-3 come from lanes that do
    backend.take_undefined_reads()
    prod, prod2, stored = run(
        backend, body, [a, b], [64, 64, 64], threads=16, header=TE_POS, name="te_partial"
    )
    # the poison is accounted for: the verdict of a failed size names the read
    seen = backend.take_undefined_reads()
    assert seen is not None and seen["count"] > 0, seen
    assert "thread_elements" in str(seen), seen
    assert np.isnan(prod[:32]).all() and np.isnan(prod2).all()  # lanes 0-15 wrote rows 0-3
    stored = stored.reshape(8, 8)
    np.testing.assert_array_equal(stored[:4], a[:4])
    assert np.isnan(stored[4:]).all()
    # its twin with every lane there reads nothing undefined
    run(backend, body, [a, b], [64, 64, 64], header=TE_POS, name="te_full")
    assert backend.take_undefined_reads() is None
    # lanes 24-31 return before the matrices are used: rows 4-7 x columns 4-7
    gone = body.replace(
        "simdgroup_matrix<float, 8, 8> c =",
        "if (l >= 24) return;\n" + "simdgroup_matrix<float, 8, 8> c =",
    )
    _, _, stored = run(backend, gone, [a, b], [64, 64, 64], header=TE_POS, name="te_gone")
    stored = stored.reshape(8, 8)
    assert np.isnan(stored[4:, 4:]).all()
    stored[4:, 4:] = a[4:, 4:]
    np.testing.assert_array_equal(stored, a)


FLAG = """
simdgroup_float8x8 m(1.0f);
{use}
O0[thread_index_in_simdgroup] = metal::__sgm::te_in_use() ? 1.0f : 0.0f;
"""


def test_only_a_kernel_using_thread_elements_meets_at_multiplies(backend):
    # The cost guard: a kernel that never names thread_elements() keeps the
    # multiplies' old, meeting-free path.
    x = np.zeros(4, np.float32)
    (without,) = run(backend, FLAG.replace("{use}", "m = m * m;"), [x], [32], name="te_off")
    (with_,) = run(
        backend, FLAG.replace("{use}", "m.thread_elements()[0] = 2.0f;"), [x], [32], name="te_on"
    )
    assert (without == 0).all() and (with_ == 1).all()


# ---------------------------------------------------------------------------
# End to end: the hmc Metal-Sci candidate with its Q tiles loaded and its F
# tiles stored through thread_elements(), evaluated as a candidate is
# ---------------------------------------------------------------------------
def hmc_with_thread_elements(at: str) -> str:
    src = (CANDIDATES / "hmc_simdgroup_matrix.metal").read_text()
    src = replace_once(src, "static void gradient_tiles(", at + "static void gradient_tiles(")
    src = replace_once(
        src, "threadgroup float* F, uint dp) {", "threadgroup float* F, uint dp, ushort lane) {"
    )
    src = replace_once(
        src,
        "simdgroup_load(qa, Q + r * 8 * dp + kb, dp);",
        "qa.thread_elements() = float2(Q[r * 8 * dp + kb + te_at(lane, 0, dp)], "
        "Q[r * 8 * dp + kb + te_at(lane, 1, dp)]);",
    )
    src = replace_once(
        src,
        "for (uint r = 0; r < SIMD / 8; ++r) simdgroup_store(acc[r], F + r * 8 * dp + cb, dp);",
        "for (uint r = 0; r < SIMD / 8; ++r) {\n"
        "            thread const float2& e = acc[r].thread_elements();\n"
        "            F[r * 8 * dp + cb + te_at(lane, 0, dp)] = e[0];\n"
        "            F[r * 8 * dp + cb + te_at(lane, 1, dp)] = e[1];\n"
        "        }",
    )
    return replace_once(src, "gradient_tiles(As, Q, F, dp);", "gradient_tiles(As, Q, F, dp, lane);")


# The offset of the lane's element j in a tile of `ld` elements per row.
HMC_AT = """
static inline uint te_at(ushort l, uint j, uint ld) {
    uint q = l / 4, r = (q & 4) + (l / 2) % 4, c = (q & 2) * 2 + (l % 2) * 2;
    return r * ld + c + j;
}
"""
HMC_AT_T = HMC_AT.replace("return r * ld + c + j;", "return (c + j) * ld + r;")


@pytest.mark.slow
@pytest.mark.parametrize(
    "at, correct", [(HMC_AT, True), (HMC_AT_T, False)], ids=["mlx", "transposed"]
)
def test_hmc_candidate_using_thread_elements(at, correct):
    converted = convert_source("hmc", hmc_with_thread_elements(at))
    assert converted.text is not None, converted.reason
    assert "thread_elements()" in converted.text
    result = smoke_eval("hmc", converted.text, dialect="metal")
    assert result.correct is correct, (result.fail_reason, converted.text)
    if not correct:  # wrong samples, not a compile error or a fault
        assert result.fail_reason.startswith("correctness failed"), result.fail_reason
