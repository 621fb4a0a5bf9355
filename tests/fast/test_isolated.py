"""mlxsci.fast kernels with isolated=True: every launch in the sandboxed worker.

In process, a kernel is the caller's own code; isolated, the same call gives
the same outputs, runs the same checks and raises the same exceptions, while
the kernel's code runs inside the sandbox. The attack tests show the
difference: a kernel that passes the source policy and the link's symbol
check, then finds `creat` (or `socket`) in the C library through an address
it computes, makes a file in process, and is refused (or stopped) isolated.
The worker is also played by stand-ins that die, hang and answer garbage.
"""

from __future__ import annotations

import platform
import sys
import textwrap
import time
import uuid

import mlx.core as mx
import numpy as np
import pytest

from mlxsci import fast, sandbox
from mlxsci.backends.sim import variants
from mlxsci.evaluation.runner import CandidateWorker
from mlxsci.fast import isolated
from mlxsci.sandbox import landlock

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or landlock.abi_version() < 1,
    reason="the sandbox needs Linux with Landlock",
)


@pytest.fixture(autouse=True)
def fresh_workers():
    """No worker outlives its test (a monkeypatched command or limit is the test's own)."""
    isolated.close_all()
    yield
    isolated.close_all()


def call_both(kernel, **args) -> tuple:
    """(in-process outputs, isolated outputs) as NumPy bits."""
    here = kernel(**args)
    there = kernel(**args, isolated=True)
    return [bits(a) for a in here], [bits(a) for a in there]


def bits(a: mx.array) -> np.ndarray:
    return np.array(a.view(mx.uint16) if a.dtype == mx.bfloat16 else a)


def raised(kernel, isolate: bool, **args) -> Exception:
    with pytest.raises(fast.KernelError) as info:
        kernel(**args, isolated=isolate)
    return info.value


def same_error(kernel, **args) -> Exception:
    """The exception in process, checked equal (class, message, details) to the isolated one."""
    here, there = raised(kernel, False, **args), raised(kernel, True, **args)
    assert type(there) is type(here)
    assert str(there) == str(here)
    assert there.details == here.details
    return there


# ------------------------------------------------------------ same results
TILED = {
    "metal": """
        uint i = thread_position_in_grid.x;
        uint l = thread_position_in_threadgroup.x;
        threadgroup float tile[32];
        tile[l] = float(x[i]) * SCALE;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        y[i] = T(tile[(l + 1) % threads_per_threadgroup.x]);
        z[i] = bfloat16_t(tile[l] + float(w[0]));
    """,
    "cuda": """
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        int l = threadIdx.x;
        __shared__ float tile[32];
        tile[l] = float(x[i]) * SCALE;
        __syncthreads();
        y[i] = T(tile[(l + 1) % blockDim.x]);
        z[i] = __float2bfloat16(tile[l] + float(w[0]));
    """,
}


def make(dialect: str, name: str, source: str, inputs=("x",), outputs=("y",), **kw):
    make_kernel = fast.metal_kernel if dialect == "metal" else fast.cuda_kernel
    return make_kernel(
        name=name, input_names=list(inputs), output_names=list(outputs), source=source, **kw
    )


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_isolated_results_equal_in_process_results(dialect):
    k = make(dialect, "tiled", textwrap.dedent(TILED[dialect]), ("x", "w"), ("y", "z"))
    x = mx.array(np.linspace(-3, 3, 64, dtype=np.float32)).astype(mx.float16)
    args = dict(
        inputs=[x, mx.array([0.5], dtype=mx.bfloat16)],
        grid=(64, 1, 1),
        threadgroup=(32, 1, 1),
        output_shapes=[(64,), (8, 8)],
        output_dtypes=[mx.float32, mx.bfloat16],
        template=[("T", mx.float32), ("SCALE", 3)],
    )
    here, there = call_both(k, **args)
    assert [a.dtype for a in there] == [np.float32, np.uint16]
    assert [a.shape for a in there] == [(64,), (8, 8)]
    for a, b in zip(here, there):
        assert a.tobytes() == b.tobytes()


def test_wide_dtypes_stay_wide():
    """float64 and int64 inputs and outputs keep their dtypes both ways (a
    bare mx.array of float64 data would make it float32)."""
    k = make(
        "cuda",
        "wide",
        "int i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = x[i] / 3.0; z[i] = n[0] * i;",
        ("x", "n"),
        ("y", "z"),
    )
    args = dict(
        inputs=[mx.array(np.arange(8) + 0.1, dtype=mx.float64), mx.array([1 << 40], dtype=mx.int64)],
        grid=(8, 1, 1), threadgroup=(8, 1, 1), output_shapes=[(8,), (8,)],
        output_dtypes=[mx.float64, mx.int64],
    )  # fmt: skip
    here, there = call_both(k, **args)
    assert [a.dtype for a in there] == [np.float64, np.int64]
    assert [a.tobytes() for a in there] == [a.tobytes() for a in here]
    assert there[1][3] == 3 << 40


STORAGE_ORDER = {
    "metal": "uint i = thread_position_in_grid.x; y[i] = x[i] + 100 * x_strides[0];",
    "cuda": "int i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = x[i] + 100 * x_strides[0];",
}


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_inputs_bound_as_laid_out_keep_their_storage_order(dialect):
    """ensure_row_contiguous=False: a kernel that reads x[i] reads storage
    order from element 0, with the view's own strides, isolated as in
    process (transposed, sliced, broadcast and reversed views); with the
    row-contiguous copy (the default) it reads otherwise."""
    as_laid_out = make(dialect, "stored", STORAGE_ORDER[dialect], ensure_row_contiguous=False)
    copied = make(dialect, "stored", STORAGE_ORDER[dialect])
    base = mx.arange(24, dtype=mx.float32).reshape(4, 6)
    views = {  # the view, and how many elements lie from element 0 on in its storage
        "transposed": (base.T, 24),
        "sliced": (base[:, 1:4], 12),
        "broadcast": (mx.broadcast_to(mx.arange(3.0), (4, 3)), 3),
        "reversed": (base[::-2, ::-1], 1),
    }
    for name, (view, n) in views.items():
        args = dict(
            inputs=[view], grid=(n, 1, 1), threadgroup=(n, 1, 1), output_shapes=[(n,)],
            output_dtypes=[mx.float32],
        )  # fmt: skip
        here, there = call_both(as_laid_out, **args)
        assert here[0].tobytes() == there[0].tobytes(), name
        row_here, row_there = call_both(copied, **args)
        assert row_here[0].tobytes() == row_there[0].tobytes(), name
        assert row_here[0].tobytes() != here[0].tobytes(), name


def test_a_kernel_that_writes_its_input_fares_as_in_process():
    """Whatever the simulator does with a write to an input in process (copy
    it back to the caller's array, or refuse it), isolated does the same."""
    k = make(
        "metal",
        "writes_input",
        "uint i = thread_position_in_grid.x; y[i] = x[i]; ((device float*)x)[i] = 7.0f;",
    )
    args = dict(
        grid=(8, 1, 1), threadgroup=(8, 1, 1), output_shapes=[(8,)], output_dtypes=[mx.float32],
        checks=False,
    )  # fmt: skip
    outcomes = []
    for isolate in (False, True):
        x = mx.arange(8, dtype=mx.float32)
        try:
            (y,) = k(inputs=[x], **args, isolated=isolate)
            outcomes.append((y.tolist(), x.tolist()))
        except fast.KernelError as exc:
            outcomes.append((type(exc), str(exc), exc.details, x.tolist()))
    assert outcomes[0] == outcomes[1]


def test_verbose_prints_the_same_source(capsys):
    k = make("metal", "shown", "uint i = thread_position_in_grid.x; y[i] = x[i];")
    args = dict(
        inputs=[mx.zeros(4)], grid=(4, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(4,)],
        output_dtypes=[mx.float32], verbose=True,
    )  # fmt: skip
    k(**args)
    here = capsys.readouterr().out
    k(**args, isolated=True)
    assert capsys.readouterr().out == here
    assert "Generated source code for `shown`" in here


# ------------------------------------------------------------ same exceptions
OUT_OF_BOUNDS = {
    "metal": "uint i = thread_position_in_grid.x; y[i] = x[i + 3];",
    "cuda": "int i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = x[i + 3];",
}
ONE_ARG = dict(
    inputs=[mx.arange(8, dtype=mx.float32)], grid=(8, 1, 1), threadgroup=(4, 1, 1),
    output_shapes=[(8,)], output_dtypes=[mx.float32],
)  # fmt: skip


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_an_out_of_bounds_read_raises_the_same_error_with_the_same_details(dialect):
    err = same_error(make(dialect, "oob", OUT_OF_BOUNDS[dialect]), **ONE_ARG)
    assert isinstance(err, fast.OutOfBoundsError)
    assert err.buffer == "x" and err.element == 8
    assert isinstance(err.thread, tuple) and isinstance(err.details["thread"], tuple)


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_compile_error_is_the_same_compile_error(dialect):
    # A fresh name: compile errors are cached by text, and this one must be built.
    src = f"y[0] = x[0] + not_declared_{uuid.uuid4().hex[:8]};"
    err = same_error(make(dialect, "broken", src), **ONE_ARG)
    assert isinstance(err, fast.CompileError)
    assert err.details["where"] == "source line 1" and "not_declared" in err.details["log"]


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_the_checks_raise_the_same_errors():
    unwritten = make(
        "metal", "unwritten", "uint i = thread_position_in_grid.x; if (i < 5) y[i] = x[i];"
    )
    err = same_error(unwritten, **ONE_ARG)
    assert isinstance(err, fast.UnwrittenOutputError) and err.details["index"] == (5,)
    stale = make(
        "metal",
        "stale",
        "uint l = thread_position_in_threadgroup.x; threadgroup float t[4];"
        " if (l > 0) t[l] = x[l]; threadgroup_barrier(mem_flags::mem_threadgroup);"
        " y[thread_position_in_grid.x] = t[(l + 1) % 4];",
    )
    assert isinstance(same_error(stale, **ONE_ARG), fast.UninitializedReadError)
    race = make("metal", "race", "uint i = thread_position_in_grid.x; y[i] = x[i]; y[0] = x[i];")
    assert isinstance(same_error(race, **ONE_ARG), fast.RaceError)


# ------------------------------------------------------------ the attack
# The header finds a function of the C library by its name: from the address
# of memcpy (which a kernel may name) back to the library's ELF header, then
# through its dynamic symbol table. No rule on the text or the link sees the
# call: its address is computed at run time (docs/threat-model.md names this
# gap: the sandbox is what stands behind it).
FIND = """
unsigned long find_in_libc(unsigned long inside, {cs} char* wanted) {{
    unsigned long base = inside & ~4095UL;
    while (!(*({cd} unsigned*)base == 0x464c457fu)) base -= 4096;
    {cd} unsigned char* elf = ({cd} unsigned char*)base;
    unsigned long dynamic = 0, symtab = 0, strtab = 0;
    for (unsigned k = 0; k < *({cd} unsigned short*)(elf + 56); ++k) {{
        {cd} unsigned char* ph = elf + *({cd} unsigned long*)(elf + 32) + 56 * k;
        if (*({cd} unsigned*)ph == 2) dynamic = base + *({cd} unsigned long*)(ph + 16);
    }}
    for ({cd} long* d = ({cd} long*)dynamic; d[0] != 0; d += 2) {{
        unsigned long p = (unsigned long)d[1] < base ? base + d[1] : d[1];
        if (d[0] == 5) strtab = p;
        if (d[0] == 6) symtab = p;
    }}
    for (unsigned long s = symtab; s < strtab; s += 24) {{
        {cd} char* name = ({cd} char*)(strtab + *({cd} unsigned*)s);
        int k = 0;
        while (wanted[k] && name[k] == wanted[k]) ++k;
        unsigned long value = *({cd} unsigned long*)(s + 8);
        if (!wanted[k] && !name[k] && value) return base + value;
    }}
    return 0;
}}
// Stand-ins whose types the calls through the found addresses borrow.
int two_args({cs} char* path, unsigned mode) {{ return -2; }}
int three_ints(int a, int b, int c) {{ return -2; }}
int one_int(int fd) {{ return -2; }}
"""
ATTACK_BODY = """
if ({index} == 0) {{
    auto libc = (unsigned long)({cd} void*)memcpy;
    {attack}
}}
"""
CREAT = """
    auto create = two_args;
    create = (decltype(create))find_in_libc(libc, "creat");
    out[0] = create("{marker}", 0644);
"""
SOCKET = """
    auto open_socket = three_ints;
    auto close_fd = one_int;
    open_socket = (decltype(open_socket))find_in_libc(libc, "socket");
    close_fd = (decltype(close_fd))find_in_libc(libc, "close");
    int fd = open_socket(2, 1, 0);
    out[0] = fd;
    if (fd >= 0) close_fd(fd);
"""
WORDS = {  # (pointer to device memory, to a string literal, thread 0's index)
    "metal": ("const device", "constant", "thread_position_in_grid.x"),
    "cuda": ("const", "const", "blockIdx.x * blockDim.x + threadIdx.x"),
}
ATTACKABLE = sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")


def attacker(dialect: str, attack: str, **fill):
    cd, cs, index = WORDS[dialect]
    header = FIND.format(cd=cd, cs=cs)
    if dialect == "cuda":
        header = header.replace("\nunsigned long find", "\n__device__ unsigned long find")
        header = header.replace("\nint ", "\n__device__ int ")
    body = ATTACK_BODY.format(index=index, cd=cd, attack=attack.format(**fill))
    return make(dialect, "attack", body, ("x",), ("out",), header=header)


ATTACK_CALL = dict(
    inputs=[mx.zeros(1)], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)],
    output_dtypes=[mx.int32], checks=False,
)  # fmt: skip


def in_process(k) -> list:
    """The attack run in process; skipped where this C library's layout
    defeats the search (a page it cannot read between header and code)."""
    try:
        return k(**ATTACK_CALL)
    except fast.KernelCrashError as exc:
        pytest.skip(f"the attack does not find the C library here: {exc}")


@pytest.mark.skipif(not ATTACKABLE, reason="the attack reads x86-64 ELF structures")
@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_kernel_that_writes_a_file_does_so_in_process_and_is_refused_isolated(dialect, tmp_path):
    marker = tmp_path / "marker"
    k = attacker(dialect, CREAT, marker=marker)
    (fd,) = in_process(k)  # in process: the caller's own code, with the caller's rights
    assert fd.item() >= 0 and marker.exists()
    marker.unlink()
    (fd,) = k(**ATTACK_CALL, isolated=True)  # isolated: Landlock refuses the file
    assert fd.item() == -1
    assert not marker.exists()


@pytest.mark.skipif(not ATTACKABLE, reason="the attack reads x86-64 ELF structures")
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_kernel_that_opens_a_socket_is_stopped_isolated_and_the_next_call_runs():
    k = attacker("cuda", SOCKET)
    (fd,) = in_process(k)
    assert fd.item() >= 0  # in process it got a socket
    err = raised(k, True, **ATTACK_CALL)
    assert isinstance(err, fast.KernelCrashError)
    assert "the sandbox stopped the worker" in str(err)
    benign = make("cuda", "benign", "out[0] = 1;", ("x",), ("out",))
    assert benign(**ATTACK_CALL, isolated=True)[0].item() == 1  # a fresh worker


def test_a_host_function_by_name_is_refused_in_both_places(tmp_path):
    # The text rule's part: named, `creat` does not even compile, in either mode.
    header = f"// {uuid.uuid4().hex}\n"
    k = make(
        "cuda", "named", f'out[0] = creat("{tmp_path}/m", 0644);', ("x",), ("out",), header=header
    )
    err = same_error(k, **ATTACK_CALL)
    assert isinstance(err, fast.CompileError) and "creat" in str(err)


# ------------------------------------------------------------ a hanging, dying, lying worker
def stand_in_call(monkeypatch, tmp_path, mode: str) -> Exception:
    """The exception of an isolated call whose worker is STAND_IN in `mode`."""
    script = tmp_path / "worker.py"
    script.write_text(STAND_IN.format(mode=mode))
    monkeypatch.setattr(CandidateWorker, "sandboxed_command", (sys.executable, str(script)))
    monkeypatch.setattr(isolated, "TIMEOUT_S", 20.0)
    k = make("metal", "lied_to", "uint i = thread_position_in_grid.x; y[i] = x[i];")
    return raised(k, True, **ONE_ARG, checks=False)


HANGS = (
    "uint i = thread_position_in_grid.x;"
    " if (x[0] > 0) { while (true) { y[i] += 1.0f; } } y[i] = x[i];"
)


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_worker_that_hangs_is_stopped_with_a_timeout_error(monkeypatch):
    k = make("metal", "hangs", HANGS)
    args = dict(
        grid=(4, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(4,)], output_dtypes=[mx.float32],
        checks=False, isolated=True,
    )  # fmt: skip
    k(inputs=[mx.zeros(4)], **args)  # compiled and warm
    monkeypatch.setattr(isolated, "TIMEOUT_S", 2.0)
    started = time.monotonic()
    with pytest.raises(fast.KernelTimeoutError) as info:
        k(inputs=[mx.ones(4)], **args)
    assert time.monotonic() - started < 20
    assert "no answer within 2 s" in str(info.value)
    assert k(inputs=[mx.zeros(4)], **args)[0].tolist() == [0.0] * 4  # a fresh worker


STAND_IN = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    status = os.fdopen(int(sys.argv[sys.argv.index("--serve") + 1]), "w", buffering=1)
    status.write("ready\\n")
    MODE = {mode!r}
    for line in sys.stdin:
        outdir = json.loads(line)["dir"]
        if MODE == "dies":
            os._exit(3)
        if MODE == "babbles":
            status.write("hello there\\n")
            continue
        result = {{"seconds": [0.0], "group_memory_bytes": 0, "inputs_written": []}}
        if MODE == "wrong dtype":
            np.savez(os.path.join(outdir, "verified.npz"), out_0=np.zeros(8, np.float64))
        if MODE == "wrong shape":
            np.savez(os.path.join(outdir, "verified.npz"), out_0=np.zeros(9, np.float32))
        if MODE == "no outputs":
            pass
        if MODE == "bad details":
            result = {{"seconds": [0.0], "error": {{"kind": "fault", "fault": "crash",
                      "message": "x", "details": [["dict", 1]] * 3}}}}
        if MODE in ("asks for another kernel", "asks for a counted variant"):
            launch = json.loads(line)["job"]["launch"]
            request = {{"dialect": "metal", "spec": launch["spec"], "inputs": [["float32", [8]]],
                       "out_dtypes": ["float32"], "template": [], "extra_defines": [],
                       "counted": False, "profiled": False}}
            if MODE == "asks for another kernel":
                request["spec"] = dict(request["spec"], source="y[0] = 42;")
            else:
                request["counted"] = True
            with open(os.path.join(outdir, "build-1.json"), "w") as f:
                json.dump(request, f)
            status.write("build build-1.json\\n")
            reply = json.loads(sys.stdin.readline())
            result = {{"seconds": [0.0], "error": dict(reply["error"], line=None, log="")}}
        if MODE == "writes an input it cannot":
            result["inputs_written"] = [0, 0]
            np.savez(os.path.join(outdir, "verified.npz"), out_0=np.zeros(8, np.float32))
        with open(os.path.join(outdir, "result.json"), "w") as f:
            json.dump(result, f)
        status.write("done\\n")
""")


@pytest.mark.parametrize(
    "mode, says",
    [
        ("dies", "ended without an answer: the worker exited with exit code 3"),
        ("babbles", "broke its protocol"),
        ("wrong dtype", "out_0 came back as float64 (8,) where the call asked for float32 (8,)"),
        ("wrong shape", "out_0 came back as float32 (9,)"),
        ("no outputs", "answer is unusable"),
        ("bad details", "answer is unusable"),
        ("writes an input it cannot", "an input written twice"),
    ],
)
def test_a_worker_that_dies_or_answers_garbage_is_a_crash_error(monkeypatch, tmp_path, mode, says):
    err = stand_in_call(monkeypatch, tmp_path, mode)
    assert isinstance(err, fast.KernelCrashError)
    assert says in str(err)
    assert err.kernel == "lied_to"


@pytest.mark.parametrize("mode", ["asks for another kernel", "asks for a counted variant"])
def test_the_parent_builds_only_the_variant_of_the_call_in_flight(monkeypatch, tmp_path, mode):
    built = []
    monkeypatch.setattr(variants, "variant_library", lambda *a, **k: built.append(a))
    err = stand_in_call(monkeypatch, tmp_path, mode)
    assert isinstance(err, fast.CompileError)
    assert "build request refused: the build request names no variant of this call" in str(err)
    assert built == []


def test_without_a_sandbox_an_isolated_call_refuses_and_says_which_layer(monkeypatch):
    unavailable = (
        sys.executable,
        "-c",
        "import sys; print('mlxsci-sandbox: Landlock: not available on this kernel', "
        f"file=sys.stderr); sys.exit({sandbox.UNAVAILABLE_EXIT})",
    )
    monkeypatch.setattr(CandidateWorker, "sandboxed_command", unavailable)
    monkeypatch.delenv("MLXSCI_UNSANDBOXED", raising=False)
    k = make("metal", "nowhere", "uint i = thread_position_in_grid.x; y[i] = x[i];")
    with pytest.raises(sandbox.SandboxUnavailable, match="Landlock: not available"):
        k(**ONE_ARG, isolated=True)
    assert k(**ONE_ARG)[0].tolist() == list(range(8))  # in process it runs
