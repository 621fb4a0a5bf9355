"""pytest plugin: a project's tests run their MLX kernels on the simulator.

    pytest -p mlxsci.fast.pytest_plugin

(or `pytest_plugins = ["mlxsci.fast.pytest_plugin"]` in the project's root
conftest.py, or `addopts = -p mlxsci.fast.pytest_plugin` in its pytest
configuration). From the moment the plugin loads (before any conftest.py) to
the end of the session mx.fast.metal_kernel and mx.fast.cuda_kernel are
mlxsci.fast's (mlxsci.fast.patching: what is and is not replaced), and
mx.compile is disabled. The options apply to kernels made once pytest has
read its command line (kernels a conftest.py makes on import get the
defaults: $MLXSCI_FAST_BACKEND, $MLXSCI_FAST_CHECKS). Options:

    --mlxsci-fast-backend=sim|auto|mlx   where kernels run (default sim;
                                         auto: MLX's own where it has the GPU)
    --mlxsci-fast-no-checks              skip the extra runs that expose races,
                                         unwritten outputs and uninitialised
                                         threadgroup reads (faster)

Tests gated on `mx.metal.is_available()` still skip on a machine without
Metal: gate them on `mlxsci.fast.can_run("metal")` instead (true where MLX has
Metal, or while the plugin or simulate() is active).
"""

from __future__ import annotations

from mlxsci.fast import kernels, patching

# Routed from the moment pytest loads the plugin: before any conftest.py,
# which may import the project and make its kernels at module level (pytest
# loads the first conftests before pytest_configure). pytest_configure then
# applies the command line's options to kernels made from there on.
patching.start()


def pytest_addoption(parser):
    group = parser.getgroup("mlxsci.fast", "MLX custom kernels on the simulator")
    group.addoption(
        "--mlxsci-fast-backend",
        default=None,
        choices=kernels.BACKENDS,
        help="where mx.fast kernels run: sim (default), auto (MLX's own where it has the GPU) or mlx",
    )
    group.addoption(
        "--mlxsci-fast-no-checks",
        action="store_true",
        default=False,
        help="skip the extra runs that expose races, unwritten outputs and uninitialised reads",
    )


def pytest_configure(config):
    checks = False if config.getoption("--mlxsci-fast-no-checks") else None
    patching.stop()  # the import's defaults give way to the options
    patching.start(config.getoption("--mlxsci-fast-backend"), checks)
    config.addinivalue_line(
        "markers", "mlxsci_fast: the test runs MLX custom kernels (simulated by mlxsci.fast)"
    )


def pytest_unconfigure(config):
    patching.stop()


def pytest_report_header(config):
    backend = kernels.chosen_backend(config.getoption("--mlxsci-fast-backend"))
    return f"mlxsci.fast: mx.fast.metal_kernel / cuda_kernel routed to mlxsci ({backend})"
