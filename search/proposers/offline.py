"""The offline proposers: the autotuner, which varies the incumbent's launch
shapes and `//! param` choices, and replay of a recorded run's candidates.

Neither calls a network service nor needs a key or an SDK, which is why they
are apart from the LLM proposers (search/proposers/llm.py). Both answer with a
fenced candidate, as an LLM would, so the loop treats every proposer alike.
"""

from __future__ import annotations

import ast
import itertools
import random
import re
from pathlib import Path

from mlxsci.kernel.candidate import CandidateError, parse, render
from mlxsci.search.proposers.base import PromptContext, Proposal, Proposer, ProposerError
from mlxsci.task import load_task

__all__ = ["AutotuneProposer", "ReplayProposer"]


def _fence(source: str, dialect: str) -> str:
    """`source` in a fenced block whose fence is longer than any backtick run inside."""
    longest = max((len(m) for m in re.findall(r"`+", source)), default=0)
    fence = "`" * max(3, longest + 1)
    if not source.endswith("\n"):
        source += "\n"
    return f"{fence}{dialect}\n{source}{fence}"


# --- offline autotuner -------------------------------------------------------

_SHAPES_1D = [(x, 1, 1) for x in (32, 64, 128, 256, 512, 1024)]
# Shapes below one SIMD group (32 threads) are left out: they waste lanes.
_SHAPES_2D = [
    (x, y, 1) for x in (8, 16, 32, 64) for y in (1, 2, 4, 8, 16, 32) if 32 <= x * y <= 1024
]
_SHAPES_3D = [
    (x, y, z)
    for x in (8, 16, 32)
    for y in (2, 4, 8)
    for z in (1, 2, 4, 8)
    if 32 <= x * y * z <= 1024 and z <= y
]
_SHAPES = {1: _SHAPES_1D, 2: _SHAPES_2D, 3: _SHAPES_3D}
_MAX_ENUMERATED = 4096  # combined variants enumerated in full; beyond, sampled
_MAX_DRAWS = 2000


def _literal_tuple(expr: str | None) -> tuple | None:
    """The launch expression as a tuple of components: ints where a component is
    an integer literal, None where it is not. None when not a tuple."""
    if expr is None:
        return None
    try:
        node = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Tuple):
        return None
    return tuple(
        e.value if isinstance(e, ast.Constant) and type(e.value) is int else None for e in node.elts
    )


def _dims(expr: str | None) -> int:
    """How many leading axes of a launch tuple are not the literal 1."""
    comps = _literal_tuple(expr)
    if not comps:
        return 0
    used = [i for i, c in enumerate(comps) if c != 1]
    return max(used) + 1 if used else 1


def _canonical(source: str, dialect: str) -> str:
    try:
        return render(parse(source, dialect)).strip()
    except (CandidateError, ValueError):
        return source.strip()


class AutotuneProposer(Proposer):
    """Explores the incumbent's `//! param` choices and each kernel's threadgroup
    shape, one change at a time first (coordinate descent around the current
    incumbent), then combinations; never proposes a text already tried.

    Grid expressions are kept: MLX grids count threads and kernels guard their
    edges. A threadgroup that is not all integer literals (e.g. `(N, 1, 1)`),
    or that is the whole grid (a single cooperating threadgroup), is taken to
    be tied to the algorithm and left alone.
    """

    name = "autotune"

    def __init__(self, seed: int = 0):
        self.seed = int(seed)

    def worst_case_cost(self, ctx: PromptContext) -> float:
        return 0.0  # offline: no call costs anything

    def _default_launch(self, task: str, kernel: str) -> tuple[str | None, str | None]:
        try:
            contract = load_task(task).kernel(kernel)
            return contract.grid, contract.threadgroup
        except Exception:  # unknown task or kernel: fall back to what the candidate says
            return None, None

    def axes(self, cand, task: str) -> list[tuple[tuple, list]]:
        """The search axes: ((kind, name), [alternative values]) for each param
        with choices and each kernel with a literal threadgroup."""
        axes = []
        for p in cand.params:
            if p.choices:
                others = [v for v in p.choices if v != p.default]
                if others:
                    axes.append((("param", p.name), others))
        for k in cand.kernels:
            grid, tg = k.grid, k.threadgroup
            if grid is None or tg is None:
                d_grid, d_tg = self._default_launch(task, k.name)
                grid = grid if grid is not None else d_grid
                tg = tg if tg is not None else d_tg
            comps = _literal_tuple(tg) if tg is not None else None
            if tg is not None and (comps is None or None in comps or len(comps) != 3):
                continue
            if comps is not None and _literal_tuple(grid) == comps:
                continue  # one threadgroup covers the grid: a cooperative kernel
            dims = max(_dims(grid), _dims(tg), 1)
            current = tuple(comps) if comps else None
            shapes = [s for s in _SHAPES[min(dims, 3)] if s != current]
            if shapes:
                axes.append((("threadgroup", k.name), shapes))
        return axes

    def _apply(self, cand, changes: dict) -> str:
        params = [
            type(p)(p.name, changes.get(("param", p.name), p.default), p.choices)
            for p in cand.params
        ]
        kernels = []
        for k in cand.kernels:
            shape = changes.get(("threadgroup", k.name))
            tg = k.threadgroup if shape is None else "({}, {}, {})".format(*shape)
            kernels.append(type(k)(name=k.name, body=k.body, grid=k.grid, threadgroup=tg))
        return render(
            type(cand)(dialect=cand.dialect, params=params, header=cand.header, kernels=kernels)
        )

    def propose(self, ctx: PromptContext) -> Proposal:
        try:
            cand = parse(ctx.incumbent_source, ctx.dialect)
        except (CandidateError, ValueError) as exc:
            return Proposal(
                text=None, error=f"autotune: the incumbent does not parse: {exc}", model="autotune"
            )
        seen = {_canonical(s, ctx.dialect) for s in ctx.tried_sources}
        seen.add(_canonical(ctx.incumbent_source, ctx.dialect))
        # The slots of one generation see the same tried sources: each takes
        # the slot-th fresh text of the generation's one order.
        rng = random.Random(self.seed + ctx.iteration - ctx.slot)
        axes = self.axes(cand, ctx.task)
        passed = [0]

        def fresh(changes: dict) -> str | None:
            text = self._apply(cand, changes)
            if text.strip() in seen:
                return None
            seen.add(text.strip())
            passed[0] += 1
            return text if passed[0] > ctx.slot else None

        # Single changes first, in a seeded order.
        singles = [{key: v} for key, values in axes for v in values]
        rng.shuffle(singles)
        for changes in singles:
            text = fresh(changes)
            if text is not None:
                return self._proposal(text, ctx)
        # Then combinations of two or more changes, fewest changes first.
        options = [[None] + values for _, values in axes]
        total = 1
        for o in options:
            total *= len(o)
        if total <= _MAX_ENUMERATED:
            combos = [c for c in itertools.product(*options) if sum(v is not None for v in c) >= 2]
            rng.shuffle(combos)
            combos.sort(key=lambda c: sum(v is not None for v in c))
        else:
            combos = []
            for _ in range(_MAX_DRAWS):
                c = tuple(rng.choice(o) for o in options)
                if sum(v is not None for v in c) >= 2:
                    combos.append(c)
        for combo in combos:
            changes = {key: v for (key, _), v in zip(axes, combo) if v is not None}
            text = fresh(changes)
            if text is not None:
                return self._proposal(text, ctx)
        return Proposal(
            text=None, error="autotune: search space exhausted", model="autotune", exhausted=True
        )

    @staticmethod
    def _proposal(text: str, ctx: PromptContext) -> Proposal:
        return Proposal(text=_fence(text, ctx.dialect), model="autotune")


# --- replay ------------------------------------------------------------------

_CANDIDATE_FILE = re.compile(r"(\d+)_candidate\.(metal|cu)\Z")


class ReplayProposer(Proposer):
    """Proposes the candidates of a recorded run (`NN_candidate.metal` / `.cu`),
    in iteration order: the n-th recorded candidate for iteration n; the
    recorded reasoning comes along."""

    name = "replay"

    def __init__(self, run_dir):
        self.run_dir = Path(run_dir)
        if not self.run_dir.is_dir():
            raise ProposerError(f"replay: {self.run_dir} is not a directory")
        found = []
        for path in self.run_dir.iterdir():
            m = _CANDIDATE_FILE.match(path.name)
            if m and path.is_file():
                found.append((int(m.group(1)), path.name, path))
        if not found:
            raise ProposerError(
                f"replay: {self.run_dir} holds no NN_candidate.metal or NN_candidate.cu files"
            )
        self.files = [path for _, _, path in sorted(found)]

    def worst_case_cost(self, ctx: PromptContext) -> float:
        return 0.0  # offline: no call costs anything

    def propose(self, ctx: PromptContext) -> Proposal:
        # Iteration n replays the n-th recorded candidate: the same whichever
        # order concurrent calls come in, and after a resume.
        index = ctx.iteration - 1
        if not 0 <= index < len(self.files):
            return Proposal(
                text=None, error="replay: no more candidates", model="replay", exhausted=True
            )
        path = self.files[index]
        try:
            source = path.read_text()
        except OSError as exc:
            return Proposal(text=None, error=f"replay: cannot read {path}: {exc}", model="replay")
        number = path.name.split("_", 1)[0]
        reasoning_file = path.with_name(f"{number}_reasoning.md")
        reasoning = None
        if reasoning_file.is_file():
            try:
                reasoning = reasoning_file.read_text() or None
            except OSError:
                reasoning = None
        return Proposal(text=_fence(source, ctx.dialect), reasoning=reasoning, model="replay")
