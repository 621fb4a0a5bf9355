"""The simulator's fast launch path (issue 11, outcome 4) keeps every check.

Guarded buffers are kept between launches (mlxsci.backends.sim.buffers.BufferPool)
and the generated text is cached per call signature. These tests pin what
must not change because of it, in both dialects:
- a reused buffer still catches an overflow and an underflow, under both
  placements (end-aligned: overflow hits the guard page, underflow the slack;
  start-aligned: the other way round), and a correct twin passes;
- a scalar, a template argument or a dtype changed between launches is seen;
- an output never shows an earlier launch's values: unwritten elements hold
  the garbage pattern, or init_value when the caller asks for it;
- the pool gives back buffers only in the state of a fresh one, and stays
  within its bounds.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.sim import SimBackend, buffers
from mlxsci.kernel.spec import KernelFault, KernelSpec

pytestmark = pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available")

N = 37  # not a multiple of the group or the page: slack on both sides
GARBAGE_F32 = np.frombuffer(bytes([buffers.GARBAGE_BYTE]) * 4, dtype=np.float32)[0]

# out[i + shift] = x[i]: shift 0 is correct, +1 writes one past the end,
# -1 one before the start.
SHIFTED = {
    "metal": """
        int i = int(thread_position_in_grid.x);
        out[i + shift] = x[i];
    """,
    "cuda": """
        int i = int(blockIdx.x * blockDim.x + threadIdx.x);
        if (i < int(n[0])) out[i + shift[0]] = x[i];
    """,
}
# out[i] = x[i] * a, written only where flag is set.
SCALED = {
    "metal": """
        uint i = thread_position_in_grid.x;
        if (flag != 0) out[i] = x[i] * a;
    """,
    "cuda": """
        uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n[0] && flag[0] != 0) out[i] = x[i] * a[0];
    """,
}


@pytest.fixture(scope="module", params=["metal", "cuda"])
def backend(request):
    return SimBackend(dialect=request.param, launch_timeout_s=30.0)


def shifted_kernel(backend):
    spec = KernelSpec(
        "shifted", ("x", "shift", "n"), ("out",), SHIFTED[backend.dialect], dialect=backend.dialect
    )
    return backend.kernel(spec)


def run_shifted(k, shift: int):
    x = mx.arange(N, dtype=mx.float32)
    (o,) = k(
        inputs=[x, mx.array(shift, dtype=mx.int32), mx.array(N, dtype=mx.uint32)],
        output_shapes=[(N,)],
        output_dtypes=[mx.float32],
        grid=(N, 1, 1),
        threadgroup=(8, 1, 1),
    )
    return np.asarray(o)


def scaled_kernel(backend):
    spec = KernelSpec(
        "scaled",
        ("x", "a", "flag", "n"),
        ("out",),
        SCALED[backend.dialect],
        dialect=backend.dialect,
    )
    return backend.kernel(spec)


def run_scaled(k, a: float, flag: int, init_value=None):
    x = mx.arange(N, dtype=mx.float32)
    (o,) = k(
        inputs=[
            x,
            mx.array(a, dtype=mx.float32),
            mx.array(flag, dtype=mx.uint32),
            mx.array(N, dtype=mx.uint32),
        ],
        output_shapes=[(N,)],
        output_dtypes=[mx.float32],
        grid=(N, 1, 1),
        threadgroup=(8, 1, 1),
        init_value=init_value,
    )
    return np.asarray(o)


@pytest.fixture
def taken(monkeypatch):
    """The ids of the buffers each launch takes from the pool, in order."""
    ids: list[set] = []
    real_take = buffers.POOL.take

    def take(nbytes, end_aligned):
        gb = real_take(nbytes, end_aligned)
        ids[-1].add(id(gb))
        return gb

    monkeypatch.setattr(buffers.POOL, "take", take)
    return ids


@pytest.mark.parametrize("shift, side", [(1, "past the end"), (-1, "before the start")])
def test_reused_buffer_catches_out_of_bounds_writes_under_both_placements(
    backend, taken, shift, side
):
    k = shifted_kernel(backend)
    for _ in range(2):  # the correct twin, once per placement: fills the pool
        taken.append(set())
        np.testing.assert_array_equal(run_shifted(k, 0), np.arange(N))
    used = set().union(*taken)
    for _ in range(2):  # the same buffers again, one launch per placement
        taken.append(set())
        with pytest.raises(KernelFault) as err:
            run_shifted(k, shift)
        assert taken[-1] & used, "the faulting launch did not reuse a pooled buffer"
        assert err.value.kind == "out_of_bounds"
        assert err.value.details["buffer"] == "out"
        assert err.value.details["element"] == (N if shift > 0 else -1)
        assert err.value.details["access"] == "write"
    # Buffers of a faulting launch are unmapped, never pooled: the twin passes again.
    taken.append(set())
    np.testing.assert_array_equal(run_shifted(k, 0), np.arange(N))


def test_scalar_changed_between_launches_is_seen(backend):
    k = scaled_kernel(backend)
    for a in (2.0, 3.0, 2.0, -0.5):
        np.testing.assert_array_equal(run_scaled(k, a, 1), np.arange(N, dtype=np.float32) * a)


def test_unwritten_output_never_shows_an_earlier_launch(backend, taken):
    k = scaled_kernel(backend)
    for _ in range(2):
        taken.append(set())
        run_scaled(k, 2.0, 1)  # writes every element, both placements
    used = set().union(*taken)
    for _ in range(2):
        taken.append(set())
        o = run_scaled(k, 2.0, 0)  # writes nothing
        assert taken[-1] & used
        assert np.all(o.view(np.uint32) == GARBAGE_F32.view(np.uint32)), o
    for init in (-7.0, float("nan"), 0.0):
        o = run_scaled(k, 2.0, 0, init_value=init)
        np.testing.assert_array_equal(o, np.full(N, init, dtype=np.float32))


@pytest.mark.slow
def test_template_and_dtype_changes_make_new_variants(backend):
    body = {
        "metal": "uint i = thread_position_in_grid.x; out[i] = x[i] * K;",
        "cuda": "uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; if (i < 4) out[i] = x[i] * K;",
    }[backend.dialect]
    k = backend.kernel(KernelSpec("times_k", ("x",), ("out",), body, dialect=backend.dialect))
    for dtype, K in ((mx.float32, 2), (mx.float32, 3), (mx.float16, 3), (mx.float32, 2)):
        x = mx.arange(4, dtype=dtype)
        (o,) = k(
            inputs=[x],
            output_shapes=[(4,)],
            output_dtypes=[dtype],
            grid=(4, 1, 1),
            threadgroup=(4, 1, 1),
            template=[("K", K)],
        )
        assert o.dtype == dtype
        np.testing.assert_array_equal(np.asarray(o), np.arange(4) * K)
    # One variant per (dtype, K), however often each was launched.
    assert len(k._variants) == 3


def test_pool_returns_only_clean_buffers_and_stays_bounded(monkeypatch):
    pool = buffers.BufferPool()
    monkeypatch.setattr(pool, "MAX_BUFFERS", 3)
    a = pool.take(40, True)
    a.bytes[:] = 1  # data bytes: the next user overwrites them
    pool.give(a)
    others = [pool.take(40, True), pool.take(40, True), pool.take(40, False)]
    assert others[0] is a and others[1] is not a
    assert others[2].base % buffers.PAGE == 0  # placement is part of the key: start-aligned
    kept = [pool.take(n, True) for n in (8, 16, 24, 32, 48)]
    for gb in kept:
        pool.give(gb)
    assert pool._count == 3
    assert [gb.lo for gb in kept[:2]] == [0, 0]  # least recently given: unmapped
    assert all(gb.slack_violation() is None for gb in kept[2:])
    pool.clear()
    assert pool._count == 0 and all(gb.lo == 0 for gb in kept)
    for gb in others:
        gb.free()
