"""The row softmax kernel against its NumPy reference: plain pytest.

On a Mac these run on the GPU. Anywhere else, run them on mlxsci's simulator
of MLX kernels, which also turns an out-of-bounds access, a race or an
unwritten output into an exception:

    pytest -p mlxsci.fast.pytest_plugin tests
"""

import mlx.core as mx
import numpy as np
import pytest
from mlx_project import softmax
from mlx_project.reference import random_logits, softmax_reference

try:  # true where MLX has Metal, or while mlxsci's plugin simulates mx.fast kernels
    from mlxsci.fast import can_run
except ImportError:  # no mlxsci: MLX's own GPU only

    def can_run(dialect: str) -> bool:
        return mx.metal.is_available()


pytestmark = pytest.mark.skipif(
    not can_run("metal"), reason="needs Metal, or pytest -p mlxsci.fast.pytest_plugin"
)


@pytest.mark.parametrize(
    "rows, cols",
    [(1, 1), (5, 31), (7, 333), (2, 256), (3, 1000), (2, 4097)],
)
def test_matches_the_reference(rows, cols):
    x = random_logits(rows, cols, seed=rows * cols)
    y = np.array(softmax(mx.array(x)))
    np.testing.assert_allclose(y, softmax_reference(x), rtol=1e-5, atol=1e-7)


def test_rows_sum_to_one_even_far_from_zero():
    x = random_logits(6, 500) + np.float32(1000.0)  # exp(x) alone would overflow
    y = np.array(softmax(mx.array(x)))
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y.sum(axis=1), np.ones(6), rtol=1e-5)


def test_refuses_what_it_was_not_written_for():
    with pytest.raises(ValueError, match="2-D float32"):
        softmax(mx.zeros((4,)))
    with pytest.raises(ValueError, match="2-D float32"):
        softmax(mx.zeros((2, 4), dtype=mx.float16))
