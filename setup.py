"""Package mapping: tasks/, reference/ and search/ ship as mlxsci.tasks,
mlxsci.reference and mlxsci.search. Task folders are discovered so that adding
a task is copying a folder, with no list to edit here."""

import os

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))


def subpackages(root, prefix):
    found = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(HERE, root)):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "__"))]
        if "__init__.py" in filenames:
            rel = os.path.relpath(dirpath, os.path.join(HERE, root))
            found.append(prefix if rel == "." else prefix + "." + rel.replace(os.sep, "."))
    return found


MAPPED = {
    "mlxsci": "mlxsci",
    "mlxsci.tasks": "tasks",
    "mlxsci.reference": "reference",
    "mlxsci.search": "search",
}
packages = [p for prefix, root in MAPPED.items() for p in subpackages(root, prefix)]

setup(
    packages=packages,
    package_dir=MAPPED,
    package_data={
        "": ["*.metal", "*.cu", "*.h", "*.cpp"],
        "mlxsci.roofline": ["kernels/*.metal", "kernels/*.cu"],
        "mlxsci.backends.sim": [
            "runtime/*",
            "runtime/include/*",
            "runtime/include/cooperative_groups/*",
            "runtime/include/mlx/backend/cuda/device/*",
        ],
        # The modelled GPUs (--sim-gpu): one file each.
        "mlxsci.backends.sim.gpus": ["*.json"],
    },
    include_package_data=True,
)
