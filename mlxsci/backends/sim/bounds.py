"""The bounds-checked variant of a kernel: indices into arrays of known bound.

A guard page sees an access only where memory of its own lies past an array:
device buffers and threadgroup/__shared__ arrays have them, a thread's private
arrays (`float f[9];`) and constant tables (`__constant__ int CX[9]`) live on
its stack or in the library's data with nothing around them. Indexing one of
those past its end is undefined behaviour that clang -O2 exploits: in a loop
`for (k = 0; k <= 9; ++k)` over `float f[9]` it takes the tenth iteration for
unreachable and drops it, so the plain build computes the right answer from a
wrong kernel, which a GPU compiler need not do.

This build compiles the same translation unit with the compiler's check of
such indices (`-fsanitize=array-bounds`, recoverable: no trap), whose calls
go to the runtime's handler (runtime/sim_bounds.inc). The handler leaves
threadgroup and __shared__ arrays to their guard pages (they are named there,
as in every build) and ends the launch at any other array's bad index with
its type, the index, the candidate's line and column and the thread:
KernelFault("out_of_bounds"), faults.py. The worker runs it once per size,
after the verification runs (mlxsci.worker.serve.bounds_run): nothing timed
or verified runs this build, so its checks cost the score nothing.

A candidate cannot take the handler's place: kernel_symbols refuses an object
defining `__ubsan_*` (any linkage) and lets a call to the handler through in
this build alone; the source policy refuses the names in its text.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from mlxsci.backends.sim import kernel_symbols
from mlxsci.backends.sim.toolchain import (
    LINK_FLAGS,
    STATS,
    build_lock,
    cache_dir,
    kernel_compile_args,
    library_key,
    run_compiler,
    runtime_object,
)
from mlxsci.kernel.spec import CompileError
from mlxsci.storage.cache import install_verified, verify_file

BOUNDS_FLAGS = (
    "-fsanitize=array-bounds",
    "-fsanitize-recover=array-bounds",
    "-fno-sanitize-trap=array-bounds",
)


def bounded_library(
    tu: str, source_file: str = "<candidate>", extra_defines: tuple[str, ...] = ()
) -> Path:
    """The cached bounds-checked library of `tu`, built if needed (without the
    precompiled header, which was built without the check). The candidate's
    compile errors were found by its plain build first."""
    with build_lock:
        key = library_key(tu, extra_defines + BOUNDS_FLAGS, "bounded")
        d = cache_dir()
        so = d / f"b-{key}.so"
        if verify_file(so):
            STATS["cache_hits"] += 1
            return so
        rt = runtime_object(extra_defines)
        with tempfile.TemporaryDirectory(prefix=f"b-{key}.", dir=d) as tmp:
            cpp = Path(tmp, "k.cpp")
            cpp.write_text(tu)
            obj = Path(tmp, "k.o")
            res = run_compiler(kernel_compile_args(cpp, obj, extra_defines, flags=BOUNDS_FLAGS))
            _check(res, "compiling the bounds-checked variant", source_file)
            why = kernel_symbols.object_violation(obj, rt, bounded=True)
            if why:
                raise CompileError(why, None, why)
            tmp_so = Path(tmp, "b.so")
            res = run_compiler(["c++", *LINK_FLAGS, str(obj), str(rt), "-o", str(tmp_so)])
            _check(res, "linking the bounds-checked variant", source_file)
            why = kernel_symbols.library_violation(tmp_so)
            if why:
                raise CompileError(why, None, why)
            STATS["compiles"] += 1
            install_verified(tmp_so, so)
        return so


def _check(res, what: str, source_file: str) -> None:
    if res.returncode != 0:
        log = ((res.stderr or "") + (res.stdout or "")).replace(
            "<candidate-file>:", f"{source_file}:"
        )
        first = next((line for line in log.splitlines() if "error" in line), log.strip()[:300])
        raise CompileError(f"{what} failed: {first}", None, log)
