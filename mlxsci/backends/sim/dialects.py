"""The simulator's dialects: for one call signature, the exact text MLX would
compile, where each of its lines comes from, and the C++ glue that calls the
kernel once per simulated thread; plus each dialect's launch semantics.

This is the simulator's half of each dialect; the half every backend shares
(text generator, prelude headers, file extension) is mlxsci.kernel.dialects.
_Dialect holds what both share (fiber detection, the runtime header, launch
and memory checks, region and glue skeletons); _MetalDialect and _CudaDialect
hold what differs. DIALECTS maps a dialect name to its class.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mlxsci.backends.sim import build, toolchain
from mlxsci.backends.sim.rewrite import rewrite_cuda, rewrite_metal, uses_dynamic_shared
from mlxsci.kernel import dialects, launch_limits
from mlxsci.kernel.signature import CUDA_MAX_NDIM, template_value
from mlxsci.kernel.spec import KernelSpec

SIGNATURE_FILE = "<mlx-signature>"  # the file name of generated lines in diagnostics


@dataclass
class _Generated:
    """What a dialect produces for one call signature."""

    text: str  # the exact source the framework would compile
    params: tuple  # (name, role) in signature order
    kernel_name: str
    regions: list  # build.Region list covering `text`
    glue: str  # C++ calling the kernel once per simulated thread
    line1: str = ""  # replaces the (empty) first line of the rewritten text
    launch_error: str = ""  # a KernelFault("launch") every call of this variant raises


class _Dialect:
    """What both dialects share. A subclass sets the words below and defines
    generate(), rewrite() and _run_dims()."""

    table: dialects.Dialect  # the dialect's description: its text generator, prelude headers
    name = ""
    fiber_words: re.Pattern  # source words that need one fiber per thread
    tag = ""  # how MLX's own errors about this kernel kind begin
    group_word = ""  # a group of threads, in messages
    barrier_word = ""  # the group barrier, in messages
    array_word = ""  # the qualifier of a group-shared array, in messages

    def generate(self, spec: KernelSpec, infos, out_dtypes, template) -> _Generated:
        """The text MLX would compile for this call signature, its regions and glue."""
        raise NotImplementedError

    def rewrite(self, text: str) -> str:
        """The generated text as C++ the simulator's compiler takes, line for line."""
        raise NotImplementedError

    @staticmethod
    def _run_dims(grid, tg):
        raise NotImplementedError

    def needs_fibers(self, spec: KernelSpec) -> bool:
        return bool(self.fiber_words.search(spec.source) or self.fiber_words.search(spec.header))

    def includes(self) -> list:
        rt = toolchain.RUNTIME_DIR
        return [rt / "sim_runtime.h", *(rt / name for name in self.table.sim_preludes)]

    def launch_dims(self, kernel, grid, tg):
        """(grid, group, groups) the runtime runs, once the GPU's launch
        limits accept the launch."""
        launch_limits.check_launch(self.name, kernel, grid, tg)
        return self._run_dims(grid, tg)

    def dynamic_shared(self, spec) -> int:
        """Bytes of dynamic group memory the kernel was built with (none here)."""
        return 0

    def check_tgmem(self, spec, nbytes: int) -> None:
        # nbytes counts static and dynamic bytes; the dynamic request decides
        # whether MLX opted in to more than 48 KiB (CUDA).
        launch_limits.check_shared_memory(self.name, spec.name, nbytes, self.dynamic_shared(spec))

    @staticmethod
    def _source_regions(spec: KernelSpec, text: str, header_first: int, body_first: int) -> list:
        """Regions from the header's first line to the end of `text`: the
        header, generated lines, the body, generated lines."""
        n_text = text.count("\n") + 1
        header = spec.header
        # A header without a final newline fuses with the next generated line
        # (as in MLX); that line counts as the header's last line.
        h = header.count("\n") + (1 if header and not header.endswith("\n") else 0)
        body_last = body_first + spec.source.count("\n")
        regions = []
        if h:
            regions.append(
                build.Region(header_first, header_first + h - 1, spec.source_file, spec.header_line)
            )
        if body_first - 1 >= header_first + h:
            regions.append(
                build.Region(header_first + h, body_first - 1, SIGNATURE_FILE, header_first + h)
            )
        regions.append(build.Region(body_first, body_last, spec.source_file, spec.body_line))
        if n_text > body_last:
            regions.append(build.Region(body_last + 1, n_text, SIGNATURE_FILE, body_last + 1))
        return regions

    @staticmethod
    def _entry_glue(call: str, args: list, prologue: tuple = ()) -> str:
        """The per-thread entry: bind each buffer to its parameter, call `call`."""
        return "\n".join(
            [
                "static void __sim_thread(void* const* __b, const __SimThread* __t) {",
                *prologue,
                f"  typedef decltype(&{call}) __F;",
                f"  {call}(" + ",\n    ".join(args) + ");",
                "}",
                "__SIM_DEFINE_ENTRY(__sim_thread)",
            ]
        )


class _MetalDialect(_Dialect):
    """mx.fast.metal_kernel: MLX's generated Metal text, the Metal prelude."""

    table = dialects.METAL
    name = table.name
    fiber_words = re.compile(r"simd_|simdgroup_|quad_|barrier")
    tag = "[metal_kernel]"
    group_word = "threadgroup"
    barrier_word = "threadgroup_barrier"
    array_word = "threadgroup"

    @staticmethod
    def _run_dims(grid, tg):
        """Exactly `grid` threads, threadgroups clamped to the grid, partial
        edge groups."""
        tgc = tuple(min(t, g) for t, g in zip(tg, grid))
        ngroups = tuple(-(-g // t) for g, t in zip(grid, tgc))
        return grid, tgc, ngroups

    def rewrite(self, text: str) -> str:
        return rewrite_metal(text)

    def generate(self, spec: KernelSpec, infos, out_dtypes, template) -> _Generated:
        ms = self.table.source(spec, infos, out_dtypes, template)
        lines = ms.text.split("\n")
        # The explicit instantiation with [[host_name]] is not C++; the glue
        # instantiates the template by calling it. Blank it, keeping lines.
        for i, ln in enumerate(lines):
            if ln.startswith("template [[host_name("):
                lines[i] = ""
        text = "\n".join(lines)
        return _Generated(
            text,
            ms.params,
            ms.kernel_name,
            self._source_regions(spec, text, 1, ms.body_first_line),
            self._glue(ms, template),
        )

    def _glue(self, ms, template) -> str:
        call = ms.kernel_name
        if template:
            call += "<" + ", ".join(template_value(v) for _, v in template) + ">"
        args = []
        b = 0
        for i, (name, role) in enumerate(ms.params):
            if role.startswith("attr:"):
                args.append(f"__SIM_A_{name}(__t)")
            else:
                args.append(f"__sim_bind<__sim_fn<__F>::arg<{i}>>::get(__b[{b}])")
                b += 1
        return self._entry_glue(call, args)


class _CudaDialect(_Dialect):
    """mx.fast.cuda_kernel: MLX's generated CUDA text, the CUDA prelude, whole
    blocks launched (threads beyond the grid run too)."""

    table = dialects.CUDA
    name = table.name
    fiber_words = re.compile(
        r"__syncthreads|__shfl|__ballot|__any_sync|__all_sync|__syncwarp|"
        r"__activemask|__reduce_\w+_sync|__match_any_sync|\.sync\s*\(|"
        r"tiled_partition|\bshfl|\breduce\s*\("
    )
    tag = "[custom_kernel]"
    group_word = "block"
    barrier_word = "__syncthreads"
    array_word = "__shared__"

    @staticmethod
    def _run_dims(grid, tg):
        """MLX's CUDA launch: block = min(t, g), blocks = ceil(g / t) per
        dimension, every block full (the runtime gets the rounded-up grid)."""
        block, blocks = launch_limits.cuda_launch(grid, tg)
        return tuple(b * n for b, n in zip(block, blocks)), block, blocks

    def rewrite(self, text: str) -> str:
        return rewrite_cuda(text)

    def dynamic_shared(self, spec) -> int:
        """`spec.shared_memory`, where the KernelSpec has such a field."""
        return int(getattr(spec, "shared_memory", 0) or 0)

    def generate(self, spec: KernelSpec, infos, out_dtypes, template) -> _Generated:
        cs = self.table.source(spec, infos, out_dtypes, template)
        launch_error = ""
        if cs.unmatched_args:
            launch_error = (
                f"MLX passes {', '.join(cs.unmatched_args)} for a 0-d input although the generated "
                f"signature has no such parameter (the name occurs in the source, e.g. in a comment "
                f"or a longer name): on a GPU every later kernel argument is misaligned. Rename "
                f"the input or avoid the substring."
            )
        by_name = dict(zip(spec.input_names, infos))
        for name, role in cs.params:
            if (
                role in ("shape", "strides")
                and by_name[name[: -len("_" + role)]].ndim > CUDA_MAX_NDIM
            ):
                launch_error = "ndim can not be larger than 10."
        line1 = ""
        if uses_dynamic_shared(cs.text):
            dyn = self.dynamic_shared(spec)
            if dyn <= 0:
                launch_error = launch_error or (
                    "the kernel declares `extern __shared__` memory but was built with "
                    "shared_memory=0: on a GPU every access to it is out of bounds"
                )
            n = max(16, -(-dyn // 16) * 16)
            line1 = (
                f"typedef unsigned char __sim_tgt___sim_dyn_smem[{n}]; "  # guarded, as __shared__ arrays
                f'__SIM_TG_BIND(__sim_dyn_smem, "unsigned char[{n}]");'
            )
        return _Generated(
            cs.text,
            cs.params,
            cs.kernel_name,
            self._regions(spec, cs),
            self._glue(cs),
            line1,
            launch_error,
        )

    def _regions(self, spec: KernelSpec, cs) -> list:
        # The includes and `namespace mlx::core::cu {` come before the header.
        h0 = cs.header_first_line
        return [build.Region(1, h0 - 1, SIGNATURE_FILE, 1)] + self._source_regions(
            spec, cs.text, h0, cs.body_first_line
        )

    def _glue(self, cs) -> str:
        args = [
            f"__sim_bind<__sim_fn<__F>::arg<{i}>>::get(__b[{i}])" for i in range(len(cs.params))
        ]
        prologue = ("  __sim_cu_t = __t;", "  __SIM_THREAD_SLOT(&__sim_cu_t);")
        return self._entry_glue("mlx::core::cu::" + cs.kernel_name, args, prologue)


DIALECTS = {"metal": _MetalDialect, "cuda": _CudaDialect}
