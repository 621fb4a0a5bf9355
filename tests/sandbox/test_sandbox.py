"""The simulator's OS sandbox (mlxsci.sandbox), attacked.

Two kinds of tests. The layer tests run a small Python probe that puts the
sandbox's layers in place and then tries what a hostile candidate would: each
asserts the attempt failed and its side effect is absent (the marker file, a
byte at a local listener). The end-to-end tests evaluate hostile candidates in
both dialects through the real worker; the text rules that refuse most of them
before any compiler sees them are switched off in this (the parent) process,
so what is tested is the sandbox alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest
from helpers import kernel_rules_off, size_job

from mlxsci import sandbox
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.sandbox import landlock
from mlxsci.storage.cache import cache_dir

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or landlock.abi_version() < 1, reason="Linux with Landlock"
)

PROBE = textwrap.dedent("""
    import json, os, sys
    from mlxsci import sandbox
    policy = sandbox.Policy.from_env(os.environ.pop(sandbox.POLICY_ENV))
    layers = sandbox.apply(policy)
    print(json.dumps(layers.__dict__), flush=True)
    exec(sys.argv[1])
    print("survived", flush=True)
""")


def probe(tmp_path: Path, attack: str, *, write: Path | None = None) -> subprocess.CompletedProcess:
    """Run `attack` (Python) in a fresh process inside the sandbox, allowed to
    write only beneath `write`."""
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    writable = write or tmp_path / "allowed"
    writable.mkdir(exist_ok=True)
    policy = sandbox.worker_policy([], [str(writable)])
    env = {"PATH": os.environ.get("PATH", ""), sandbox.POLICY_ENV: policy.to_env()}
    return subprocess.run(
        [sys.executable, str(script), attack], env=env, capture_output=True, text=True, timeout=60
    )


def layers_of(out: subprocess.CompletedProcess) -> dict:
    return json.loads(out.stdout.splitlines()[0])


def test_every_required_layer_is_in_place(tmp_path):
    out = probe(tmp_path, "pass")
    assert out.returncode == 0, out.stderr
    layers = layers_of(out)
    assert layers["landlock_abi"] >= 1 and layers["seccomp"] and layers["limits"]
    assert out.stdout.splitlines()[-1] == "survived"


def test_files_outside_the_job_folder_can_be_neither_written_nor_read(tmp_path):
    marker = tmp_path / "marker"
    attack = (
        f"import pathlib\n"
        f"for act in (lambda: pathlib.Path({str(marker)!r}).write_text('x'),\n"
        f"            lambda: open('/etc/hostname').read(),\n"
        f"            lambda: open(os.path.expanduser('~/.bashrc')).read()):\n"
        f"    try:\n        act(); print('ALLOWED')\n"
        f"    except PermissionError:\n        print('refused')\n"
        f"pathlib.Path({str(tmp_path / 'allowed' / 'ok')!r}).write_text('fine')"
    )
    out = probe(tmp_path, attack)
    assert out.returncode == 0, out.stderr
    assert "ALLOWED" not in out.stdout
    assert not marker.exists()
    assert (tmp_path / "allowed" / "ok").read_text() == "fine"


def test_the_parents_memory_cannot_be_opened(tmp_path):
    attack = (
        "try:\n    open(f'/proc/{os.getppid()}/mem', 'r+b'); print('ALLOWED')\n"
        "except PermissionError:\n    print('refused')"
    )
    out = probe(tmp_path, attack)
    assert "refused" in out.stdout and "ALLOWED" not in out.stdout, out.stderr


@pytest.mark.parametrize(
    "attack",
    [
        "import socket; socket.socket(socket.AF_INET, socket.SOCK_STREAM)",
        "import socket; socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)",
        "os.fork()",
        "os.execv('/bin/true', ['true'])",
        "import subprocess; subprocess.run(['touch', 'x'])",
    ],
)
def test_sockets_processes_and_exec_kill_the_process(tmp_path, attack):
    out = probe(tmp_path, attack)
    assert out.returncode == -31, (out.returncode, out.stderr)  # SIGSYS
    assert "survived" not in out.stdout


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_local_listener_hears_nothing(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    try:
        attack = (
            "import socket\ns = socket.create_connection(('127.0.0.1', "
            f"{port}))\ns.sendall(b'OPENAI_API_KEY')"
        )
        out = probe(tmp_path, attack)
        assert out.returncode == -31
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()


def test_no_thread_starts_once_sealed(tmp_path):
    attack = (
        "import threading\n"
        "t = threading.Thread(target=lambda: print('before', flush=True))\nt.start(); t.join()\n"
        "sandbox.ACTIVE = True\nsandbox.seal()\n"
        "threading.Thread(target=lambda: print('after', flush=True)).start()"
    )
    out = probe(tmp_path, attack)
    assert "before" in out.stdout and "after" not in out.stdout
    assert out.returncode == -31


def _python_for_nobody() -> str | None:
    """This interpreter's real path when user 65534 can run it and import mlxsci."""
    if os.getuid() != 0 or not shutil.which("setpriv"):
        return None
    exe = os.path.realpath(sys.executable)
    check = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            exe,
            "-c",
            "import mlxsci.sandbox, pyseccomp",
        ],
        capture_output=True,
        env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    return exe if check.returncode == 0 else None


def test_an_ordinary_user_gets_every_layer(tmp_path):
    exe = _python_for_nobody()
    if exe is None:
        pytest.skip("no interpreter user 65534 can run here (or not root, so already ordinary)")
    # pytest's folders are the owner's alone: the probe comes as -c text, and
    # may write only to a folder of its own that it can reach.
    allowed = Path(tempfile.mkdtemp(prefix="mlxsci-nobody-"))
    allowed.chmod(0o777)
    policy = sandbox.worker_policy([], [str(allowed)])
    env = {
        sandbox.POLICY_ENV: policy.to_env(),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    out = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", exe, "-c", PROBE,
         "import socket; socket.socket()"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    shutil.rmtree(allowed, ignore_errors=True)
    assert out.stdout, out.stderr
    assert layers_of(out)["landlock_abi"] >= 1 and layers_of(out)["seccomp"]
    assert out.returncode == -31


# ------------------------------------------------------- hostile candidates
SECRET = "sk-test-planted-0123456789abcdef"

SAXPY_BODY = {
    "metal": "uint i = thread_position_in_grid.x;\n{attack}\nif (i >= N) return;\n"
    "y_out[i] = a * x[i] + y[i];\n",
    "cuda": "uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;\n{attack}\n"
    "if (i >= N[0]) return;\ny_out[i] = a[0] * x[i] + y[i];\n",
}

LIBC = (
    'extern "C" int open(const char*, int, ...);\n'
    'extern "C" long write(int, const void*, unsigned long);\n'
    'extern "C" int socket(int, int, int);\n'
    'extern "C" int system(const char*);\n'
    'extern "C" int fork(void);\n'
    'extern "C" char* getenv(const char*);\n'
    'extern "C" int dprintf(int, const char*, ...);\n'
    'extern "C" int start_thread(void*, const void*, void* (*)(void*), void*) '
    '__asm__("pthread_create");\n'
    "static void* nothing(void* p) { return p; }\n"
)


def candidate(dialect: str, attack: str, header: str = "") -> str:
    # A comment of its own: the kernel cache keeps compile errors by text, and
    # the same text refused by the symbol check in another test must not be
    # answered from there.
    return (
        f"//! header\n// {uuid.uuid4().hex}\n{LIBC}{header}//! kernel saxpy\n"
        "//! grid = (ceil_div(N, 256) * 256, 1, 1)\n//! threadgroup = (256, 1, 1)\n"
        + SAXPY_BODY[dialect].format(attack=attack)
    )


def tree_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p).encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture
def sandbox_only(monkeypatch):
    """The text rules and the kernel's symbol check off in this (the parent)
    process, where kernels are built: the candidates below reach native code
    and the sandbox is all that stands in their way."""
    kernel_rules_off(monkeypatch)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)


def run_hostile(dialect: str, attack: str, header: str = ""):
    ev = evaluate(
        "saxpy",
        candidate(dialect, attack, header),
        backend="sim",
        dialect=dialect,
        size_set="smoke",
        n_warmup=1,
        n_measure=1,
    )
    record = json.dumps(ev.to_json(), default=str)
    assert SECRET not in record
    return ev


STOPPED = "the sandbox stopped the worker"

ATTACKS = {
    # name: (attack in the body, run by thread 0; extra header; expected verdict)
    "file write": ('if (i == 0) open("{marker}", 0101, 0644);', "", "ok"),
    "socket": ("if (i == 0) socket(2, 1, 0);", "", STOPPED),
    "process spawn": ('if (i == 0) system("touch {marker}");', "", STOPPED),
    "daemon": ("if (i == 0) fork();", "", STOPPED),
    "thread": (
        "unsigned long tid = 0; if (i == 0) start_thread(&tid, nullptr, nothing, nullptr);",
        "",
        STOPPED,
    ),
    "constructor": (
        "",
        '__attribute__((constructor)) static void at_load() {{ system("touch {marker}"); }}\n',
        STOPPED,
    ),
    "env in last words": (
        'if (i == 0) {{ const char* k = getenv("OPENAI_API_KEY"); '
        'dprintf(2, "mlxsci-sim: %s\\n", k ? k : "none"); }}',
        "",
        "ok",
    ),
    "cache poisoning": (
        'if (i == 0) {{ open("{cache}/sim/planted.so", 0101, 0644); '
        'open("{cache}/reference/planted.npz", 0101, 0644); }}',
        "",
        "ok",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.parametrize("name", list(ATTACKS))
def test_a_hostile_candidate_leaves_no_trace(sandbox_only, tmp_path, dialect, name):
    marker = tmp_path / "marker"
    cache = cache_dir()
    before = tree_digest(cache / "reference") if (cache / "reference").exists() else ""
    attack, header, verdict = ATTACKS[name]
    fill = {"marker": marker, "cache": cache}
    ev = run_hostile(dialect, attack.format(**fill), header.format(**fill))
    if verdict == "ok":
        assert ev.correct, ev.fail_reason  # it ran, and what it tried did nothing
    else:
        assert not ev.correct and verdict in (ev.fail_reason or ""), ev.fail_reason
    assert not marker.exists()
    assert not (cache / "sim" / "planted.so").exists()
    assert not (cache / "reference" / "planted.npz").exists()
    if before:
        assert tree_digest(cache / "reference") == before


# ------------------------------------------------------- the kernel cache
SEED_RUN = textwrap.dedent("""
    import numpy as np, mlxsci
    f = mlxsci.kernel_function("saxpy", SOURCE, backend="sim", dialect="metal")
    x = np.arange(1000, dtype=np.float32)
    out = f(x=x, y=np.ones(1000, np.float32), a=2.0, N=1000)
    print(float(np.array(out["y"]).sum()))
""")
ZEROS = "//! kernel saxpy\nuint i = thread_position_in_grid.x;\nif (i < N) y_out[i] = 0.0f;\n"


def _run_in_fresh_process(source: str, cache: Path) -> tuple[float, int]:
    """y_out's sum from the kernel `source` (None: the seed) built in a fresh
    process, and how many kernels that process compiled."""
    script = SEED_RUN.replace("SOURCE", repr(source) if source else "None") + (
        "from mlxsci.backends.sim.toolchain import STATS; print(STATS['compiles'])\n"
    )
    env = dict(os.environ, MLXSCI_CACHE_DIR=str(cache))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    total, compiles = out.stdout.split()
    return float(total), int(compiles)


@pytest.mark.slow
def test_a_library_planted_in_the_kernel_cache_is_rebuilt_not_run(tmp_path):
    cache = tmp_path / "cache"
    honest = sum(2.0 * i + 1.0 for i in range(1000))
    assert _run_in_fresh_process(None, cache)[0] == honest
    seed_libs = set((cache / "sim").glob("k-*.so"))
    assert _run_in_fresh_process(ZEROS, cache)[0] == 0.0
    zeros_lib = next(iter(set((cache / "sim").glob("k-*.so")) - seed_libs))
    for lib in seed_libs:  # the attack: the planted code under the seed's name
        shutil.copyfile(zeros_lib, lib)
    total, compiles = _run_in_fresh_process(None, cache)
    assert total == honest and compiles == 1  # rebuilt from the seed, not the planted code


def test_memory_files_and_cpu_are_limited(tmp_path):
    attack = (
        "import resource\n"
        "print('limits', resource.getrlimit(resource.RLIMIT_DATA)[0],"
        " resource.getrlimit(resource.RLIMIT_FSIZE)[0], resource.getrlimit(resource.RLIMIT_CPU)[0])\n"
        "try:\n    b = bytearray(int(sandbox.physical_memory() * 0.8)); print('ALLOCATED')\n"
        "except MemoryError:\n    print('refused')"
    )
    out = probe(tmp_path, attack)
    assert "refused" in out.stdout and "ALLOCATED" not in out.stdout, out.stdout + out.stderr
    data, fsize, cpu = map(int, out.stdout.split("limits ")[1].split()[:3])
    assert 0 < data < sandbox.physical_memory() and fsize == sandbox.FILE_BYTES and cpu > 0


# ------------------------------------------------------- no sandbox here
UNAVAILABLE = (
    sys.executable,
    "-c",
    "import sys; print('mlxsci-sandbox: Landlock: not available on this kernel', "
    f"file=sys.stderr); sys.exit({sandbox.UNAVAILABLE_EXIT})",
)


@pytest.fixture
def no_sandbox_here(monkeypatch):
    """A machine where the boot cannot set up a required layer (a stand-in boot
    that says so and exits as the real one does)."""
    from mlxsci.evaluation.runner import CandidateWorker

    monkeypatch.setattr(CandidateWorker, "sandboxed_command", UNAVAILABLE)
    monkeypatch.delenv("MLXSCI_UNSANDBOXED", raising=False)


def test_without_a_sandbox_eval_refuses_and_says_which_layer(no_sandbox_here):
    from click.testing import CliRunner

    from mlxsci.eval import main as eval_main

    out = CliRunner().invoke(eval_main, ["saxpy", "--backend", "sim"])
    assert out.exit_code == 2 and "Traceback" not in out.output, out.output
    assert "Landlock: not available" in out.output and "MLXSCI_UNSANDBOXED=1" in out.output


@pytest.mark.slow
def test_without_a_sandbox_the_search_refuses_and_unsandboxed_runs(
    no_sandbox_here, monkeypatch, tmp_path
):
    from click.testing import CliRunner

    from mlxsci.search.__main__ import main as search_main

    args = ["--task", "saxpy", "--backend", "sim", "--model", "autotune", "--iterations", "1"]
    out = CliRunner().invoke(search_main, [*args, "--out", str(tmp_path / "a")])
    assert out.exit_code == 2 and "sandbox could not be set up" in out.output, out.output
    monkeypatch.setenv("MLXSCI_UNSANDBOXED", "1")  # the user's explicit choice
    out = CliRunner().invoke(search_main, [*args, "--out", str(tmp_path / "b")])
    assert out.exit_code == 0, out.output


def test_the_current_folder_and_the_home_are_not_opened_by_sys_path(monkeypatch, tmp_path):
    home = tmp_path / "home"
    (home / "project").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
    monkeypatch.setattr(
        sys, "path", ["", str(home), str(tmp_path), str(home / "project"), *sys.path]
    )
    read = sandbox.worker_policy([], [str(tmp_path / "w")]).read
    assert str(home) not in read and str(tmp_path) not in read and "" not in read
    assert str(home / "project") in read  # a folder inside the home, named on its own, may be


# ------------------------------------------------------- after the seal
def test_after_the_seal_only_the_kernels_calls_remain(tmp_path):
    """The red team's ways past the text rules reach the system through any
    call they like; after the seal the filter answers most with EPERM, kills
    the worst, and takes the rest only for this process. The other process
    here stands for the parent (the red team set its CPU limit to 1 s)."""
    victim = tmp_path / "allowed" / "victim"
    other = subprocess.Popen(["sleep", "60"])
    try:
        attack = textwrap.dedent(f"""
            import ctypes, errno, resource
            libc = ctypes.CDLL(None, use_errno=True)
            sandbox.ACTIVE = True
            sandbox.seal()
            caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')]
            print('caps', caps[0], flush=True)
            r = (ctypes.c_long * 2)(1, 1)
            got = libc.prlimit({other.pid}, resource.RLIMIT_CPU, r, None)
            print('prlimit_other', got, ctypes.get_errno() == errno.EPERM, flush=True)
            print('setpriority_other', libc.setpriority(0, {other.pid}, 19), flush=True)
            print('own_prlimit', resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 0, flush=True)
            libc.symlink(b'/etc/hostname', {str(victim).encode()!r})
        """)
        out = probe(tmp_path, attack)
        limits = Path(f"/proc/{other.pid}/limits").read_text()
        priority = os.getpriority(os.PRIO_PROCESS, other.pid)
    finally:
        other.kill()
        other.wait()
    lines = dict(ln.split(" ", 1) for ln in out.stdout.splitlines()[1:] if " " in ln)
    assert lines["caps"] == "0000000000000000"
    assert lines["prlimit_other"] == "-1 True" and lines["setpriority_other"] == "-1"
    assert lines["own_prlimit"] == "True"
    cpu_line = next(ln for ln in limits.splitlines() if ln.startswith("Max cpu time"))
    assert "unlimited" in cpu_line and priority != 19  # the other process untouched
    assert out.returncode == -31 and not victim.is_symlink()  # symlink: killed


@pytest.mark.parametrize("call", ["libc.inotify_init()", "libc.fanotify_init(0, 0)"])
def test_watching_files_kills_after_the_seal(tmp_path, call):
    attack = (
        f"import ctypes\nlibc = ctypes.CDLL(None)\nsandbox.ACTIVE = True\nsandbox.seal()\n{call}"
    )
    assert probe(tmp_path, attack).returncode == -31


# ------------------------------------------------------- the build channel
def build_job():
    return size_job("saxpy")


def saxpy_request(**changes) -> bytes:
    import dataclasses

    from mlxsci.backends.sim import variants
    from mlxsci.kernel.candidate import parse, to_kernel_spec
    from mlxsci.kernel.signature import ArgInfo
    from mlxsci.task import load_task

    k = load_task("saxpy").kernel("saxpy")
    spec = to_kernel_spec(parse(load_task("saxpy").seed("metal"), dialect="metal"), "saxpy",
                          k.inputs, k.outputs, filename="seed.metal")  # fmt: skip
    spec = dataclasses.replace(spec, **changes)
    infos = [ArgInfo("float32", (8,)), ArgInfo("float32", (8,)), ArgInfo("float32", ()),
             ArgInfo("uint32", ())]  # fmt: skip
    return json.dumps(variants.request("metal", spec, infos, ["float32"], [], ())).encode()


def test_the_parent_builds_only_the_candidate_it_handed_over():
    from mlxsci.backends.sim import variants

    honest = variants.serve_request(saxpy_request(), build_job())
    assert Path(honest["library"]).is_file()
    forged = saxpy_request(header='#include "/etc/hostname"\n', source_file="<mlx-signature>")
    reply = variants.serve_request(forged, build_job())
    assert "names no kernel of the candidate" in reply["error"]["message"]
    hostname = Path("/etc/hostname").read_text().strip() if Path("/etc/hostname").exists() else ""
    assert len(hostname) < 6 or hostname not in json.dumps(reply)  # (a short one is any word)
    bomb = variants.serve_request(b"[" * 100_000, build_job())  # a JSON bomb: an answer
    assert bomb["error"]["kind"] == "compile"


def test_in_place_builds_are_only_those_of_an_in_place_candidate():
    """A `//! inplace` kernel's element type is a template slot the worker
    fills: only a dtype goes there, and the copy dispatch is built only for a
    candidate that has an in-place output. Each refusal builds nothing."""
    import dataclasses

    import mlx.core as mx

    from mlxsci.backends.sim import variants
    from mlxsci.kernel import in_place
    from mlxsci.kernel.candidate import parse, to_kernel_spec
    from mlxsci.kernel.signature import ArgInfo
    from mlxsci.task import load_task

    source = (
        load_task("saxpy")
        .seed("metal")
        .replace(
            "//! threadgroup = (256, 1, 1)\n",
            "//! threadgroup = (256, 1, 1)\n//! inplace y_out = y\n",
        )
    )
    job = size_job("saxpy", source, filename="in_place.metal")
    k = load_task("saxpy").kernel("saxpy")
    spec = to_kernel_spec(parse(source, dialect="metal"), "saxpy", k.inputs, k.outputs,
                          filename="in_place.metal")  # fmt: skip
    infos = [ArgInfo("float32", (8,)), ArgInfo("float32", (8,)), ArgInfo("float32", ()),
             ArgInfo("uint32", ()), ArgInfo("float32", (8,))]  # fmt: skip

    def ask(template, the_spec=spec, the_infos=infos) -> dict:
        body = variants.request("metal", the_spec, the_infos, ["uint32"], template, ())
        return variants.serve_request(json.dumps(body).encode(), job)

    slot = in_place.type_param("y_out")
    honest = ask([(slot, mx.float32)])
    assert Path(honest["library"]).is_file()
    for forged in ([(slot, 7)], [(slot, {"dtype": "not a type"})], [], [("other", mx.float32)]):
        assert "names no kernel of the candidate" in ask(forged)["error"]["message"]
    # the slot's text cannot carry code into the kernel either
    injected = [(slot, {"dtype": "float32; } int x; void f() {"})]
    assert "names no kernel of the candidate" in ask(injected)["error"]["message"]
    copy = in_place.copy_spec("metal")
    copy_infos = [ArgInfo("float32", (8,))]
    built = variants.serve_request(
        json.dumps(variants.request("metal", copy, copy_infos, ["float32"], [], ())).encode(), job
    )
    assert Path(built["library"]).is_file()
    no_copy = variants.serve_request(
        json.dumps(variants.request("metal", copy, copy_infos, ["float32"], [], ())).encode(),
        build_job(),  # the seed: no in-place output, so no copy to build
    )
    assert "names no kernel of the candidate" in no_copy["error"]["message"]
    tampered = dataclasses.replace(copy, source="dst[0] = src[1];\n")
    refused = ask([], the_spec=tampered, the_infos=copy_infos)
    assert "names no kernel of the candidate" in refused["error"]["message"]


def test_the_worker_cannot_make_folders_nor_set_its_process_attributes(tmp_path):
    attack = textwrap.dedent(f"""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            os.mkdir({str(tmp_path / "allowed" / "d")!r}); print('mkdir ALLOWED', flush=True)
        except PermissionError:
            print('mkdir refused', flush=True)
        sandbox.ACTIVE = True
        sandbox.seal()
        print('unset', libc.prctl(1, 0, 0, 0, 0), flush=True)  # PR_SET_PDEATHSIG
        print('rename', libc.prctl(15, b'sshd', 0, 0, 0), flush=True)  # PR_SET_NAME
    """)
    out = probe(tmp_path, attack)
    assert "mkdir refused" in out.stdout and not (tmp_path / "allowed" / "d").exists()
    assert "unset -1" in out.stdout and "rename -1" in out.stdout


def test_a_build_request_with_outputs_of_the_wrong_count_is_refused():
    from mlxsci.backends.sim import variants

    req = json.loads(saxpy_request())
    req["out_dtypes"] = ["float32", "float64"]
    reply = variants.serve_request(json.dumps(req).encode(), build_job())
    assert "one output dtype per output" in reply["error"]["message"]


@pytest.mark.slow
def test_a_compile_past_its_deadline_leaves_no_compiler_running(tmp_path):
    import time as clock

    from mlxsci.backends.sim import toolchain

    bomb = tmp_path / f"bomb-{uuid.uuid4().hex}.cpp"
    bomb.write_text(
        "template <int N, unsigned M> struct T { static constexpr unsigned v ="
        " T<N - 1, 2 * M>::v + T<N - 1, 2 * M + 1>::v; };\n"
        "template <unsigned M> struct T<0, M> { static constexpr unsigned v = M; };\n"
        "unsigned x = T<24, 1>::v;\n"
    )
    started = clock.monotonic()
    with toolchain.time_limit(started + 2):
        res = toolchain.run_compiler(["c++", "-c", str(bomb), "-o", str(tmp_path / "b.o")])
    # Ended at its deadline (with ten times the slack), not when the compiler
    # it had left behind ran into its CPU limit half a minute later.
    assert clock.monotonic() - started < 20
    assert res.returncode != 0 and "did not finish" in res.stderr
    clock.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", bomb.name], capture_output=True, text=True).stdout
    assert left.strip() == ""  # zig and the clang it started, both gone


def test_a_worker_holding_its_lifeline_open_still_ends_with_its_parent(tmp_path):
    """The second red team reopened the lifeline's write end through
    /proc/self/fd, so end-of-file never came and the worker outlived kill -9
    of its parent; the parent's pidfd, which the boot opens, ends it anyway."""
    leftover = tmp_path / "mlxsci-worker-left"
    leftover.mkdir()
    parent = subprocess.Popen(["sleep", "60"])
    worker_script = textwrap.dedent(f"""
        import os, time
        from mlxsci.sandbox.lifeline import Lifeline
        read_end, write_end = os.pipe()  # the write end held here: no end-of-file
        Lifeline(read_end, [{str(leftover)!r}], os.pidfd_open({parent.pid})).watcher.start()
        print("watching", flush=True)
        time.sleep(60)
    """)
    worker = subprocess.Popen([sys.executable, "-c", worker_script], start_new_session=True,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert worker.stdout.readline().strip() == "watching"
        parent.kill()
        parent.wait()
        worker.wait(timeout=20)
        assert worker.returncode == -signal.SIGKILL and not leftover.exists()
    finally:
        for proc in (parent, worker):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


PARAMS = """//! param VEC = 2 {1, 2, 4}
//! kernel saxpy
//! grid = (ceil_div(N, VEC), 1, 1)
//! threadgroup = (256, 1, 1)
uint base = thread_position_in_grid.x * VEC;
for (uint k = 0; k < VEC; ++k) {
    uint i = base + k;
    if (i < N) y_out[i] = a * x[i] + y[i];
}
"""


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [None, {"VEC": 4}])
def test_a_candidates_params_reach_the_parents_build(overrides):
    """The parent builds with the template it derives from the job (the
    candidate's params, with the job's overrides): the worker's request must
    name exactly that."""
    ev = evaluate("saxpy", PARAMS, backend="sim", size_set="smoke", n_warmup=1, n_measure=1,
                  param_overrides=overrides)  # fmt: skip
    assert ev.correct, ev.fail_reason
