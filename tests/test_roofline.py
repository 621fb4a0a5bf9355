"""The roofline probe kernels compute what they claim, in both dialects."""
import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.sim import SimBackend
from mlxsci.roofline import _probe_kernels


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_probe_kernels_are_correct(dialect):
    be = SimBackend(dialect=dialect)
    k = _probe_kernels(be)
    n = 4 * 300
    a = np.arange(n, dtype=np.float32)
    b = np.full(n, 2.0, dtype=np.float32)
    n4 = np.array(n // 4, dtype=np.uint32)
    launch = dict(output_shapes=[(n,)], output_dtypes=[mx.float32], grid=(n // 4, 1, 1),
                  threadgroup=(256, 1, 1))
    (copy,) = k["stream_copy"](inputs=[a, n4], **launch)
    np.testing.assert_array_equal(np.array(copy), a)
    (triad,) = k["stream_triad"](inputs=[a, b, n4], **launch)
    np.testing.assert_array_equal(np.array(triad), a * 0.5 + 2.0)
    threads = 300
    (out,) = k["fma_peak"](inputs=[np.array(0.9999, np.float32), np.array(16, np.uint32),
                                   np.array(threads, np.uint32)],
                           output_shapes=[(threads,)], output_dtypes=[mx.float32],
                           grid=(threads, 1, 1), threadgroup=(256, 1, 1))
    out = np.array(out)
    assert np.all(np.isfinite(out)) and len(set(out.tolist())) > 1
