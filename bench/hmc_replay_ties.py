"""hmc's replay checks against correct samplers with other rounding and two
half-precision mutants, over many input seeds: the margins of the tie check.

    python bench/hmc_replay_ties.py [--sizes d6_K999_T50,d32_K1024_T200]
        [--seeds 300] [--out bench/results/sim/hmc_replay_ties.md]

For each size and input seed (TASK.make_inputs(params, seed)) the reference
replays the spec's chains (`sample(..., ties=True)`, the fp32 mirror `solve`
runs; the replay's chains, all of up to 2048, else the first 2048) and each
variant below runs the same chains from the same start and PRNG draws:

  fp64        every operation in float64 (other rounding everywhere)
  fma         fp32 in the kernel's order with every a*b+c fused (what a GPU
              compiler's contraction does: mat-vec sums, energies, kicks, drifts)
  noise1e-5   the fp32 mirror with dH + N(0, 1) 1e-5 |H_new| at every step (the
              perturbation the gap entry measured: ~10x fp32 rounding of dH)
  half_K      mutant: K_old summed in a half accumulator (`half K_old = 0.0f;
              K_old += 0.5f * p[i] * p[i];`, every partial sum rounded to half)
  half_u      mutant: the Metropolis uniform u rounded to half (an "equivalent
              (tolerance)" entry; listed to show what the tie check does to it)

and `reference.hmc.replay_check` judges them as the checker does: the chains
away from the mirror's (q beyond 1e-3 (1 + |q_ref|) or a count beyond 2) must
be at most max(3, 3 %) of the replayed chains ("miss" fails above), and at
most REPLAY_UNTIED_CHAINS of them may have no Metropolis test within
REPLAY_TIE_RTOL |H| of its threshold in the mirror ("untied" fails above).
The table gives per variant and size: seeds, seeds failing, the away chains
(max over seeds), the largest tie distance of an away chain (max over seeds:
for a correct sampler it must stay below REPLAY_TIE_RTOL), and the untied
chains (max over seeds for a correct sampler, min for a mutant). Runs on the
CPU in NumPy (no kernel): smoke's 300 seeds take ~3 min on one core, d32's
~15 min.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from tabulate import tabulate

from mlxsci.reference import hmc as ref
from mlxsci.reference.prng import uniform
from mlxsci.task import load_task

ROOT = Path(__file__).resolve().parents[1]
TASK = load_task("hmc")
CORRECT = ("fp64", "fma", "noise1e-5")
MUTANTS = ("half_K", "half_u")


def fused(a, b, c):
    """fp32 a*b + c rounded once (the product of two fp32 is exact in fp64)."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + c).astype(np.float32)


def matvec(q, A, variant):
    """f = A q per chain; `fma` accumulates over k in the kernel's order."""
    if variant != "fma":
        return q @ A.T
    f = np.zeros_like(q)
    for k in range(q.shape[1]):
        f = fused(A[None, :, k], q[:, k : k + 1], f)
    return f


def energy(x, y, variant):
    """sum_i 0.5 x_i y_i per chain, sequentially fused for `fma`."""
    if variant != "fma":
        return x.dtype.type(0.5) * np.sum(x * y, axis=1)
    e = np.zeros(len(x), np.float32)
    for i in range(x.shape[1]):
        e = fused(np.float32(0.5) * x[:, i], y[:, i], e)
    return e


def run_variant(inp, params, chains, variant, noise_seed):
    """(final q, accept_cnt) of `chains` under `variant` (module docstring)."""
    dt = np.float64 if variant == "fp64" else np.float32
    q = np.array(inp["q_in"][chains], dtype=dt)
    A = np.asarray(inp["A"], dtype=dt)
    K, d = q.shape
    L, eps, seed = int(inp["L"]), dt(float(inp["eps"])), int(inp["seed"])
    half = dt(0.5) * eps
    acc = np.zeros(K, dtype=np.uint32)
    rng = np.random.default_rng(noise_seed)
    for t in range(params["T"]):
        counters = t * (d + 1) + np.arange(d + 1)
        u = uniform(ref.hmc_bits(seed, chains[:, None], counters[None, :])).astype(dt)
        r = np.sqrt(dt(-2.0) * np.log(np.maximum(u[:, 0:d:2], dt(1e-7))))
        theta = dt(2.0 * np.pi) * u[:, 1:d:2]
        p = np.empty_like(q)
        p[:, 0::2], p[:, 1::2] = r * np.cos(theta), r * np.sin(theta)
        f = matvec(q, A, variant)
        if variant == "half_K":
            k_old = np.zeros(K, np.float16)
            for i in range(d):  # half += float: the float sum, stored to half
                k_old = (k_old.astype(np.float32) + np.float32(0.5) * p[:, i] * p[:, i]).astype(
                    np.float16
                )
            h_old = energy(q, f, variant) + k_old.astype(np.float32)
        else:
            h_old = energy(q, f, variant) + energy(p, p, variant)
        qn = q.copy()
        p = fused(-half, f, p) if variant == "fma" else p - half * f
        for step in range(L):
            qn = fused(eps, p, qn) if variant == "fma" else qn + eps * p
            f = matvec(qn, A, variant)
            s = half if step == L - 1 else eps
            p = fused(-s, f, p) if variant == "fma" else p - s * f
        h_new = energy(qn, f, variant) + energy(p, p, variant)
        dh = h_new - h_old
        if variant == "noise1e-5":
            dh = dh + (rng.standard_normal(K) * 1e-5 * np.abs(h_new)).astype(np.float32)
        u_acc = u[:, d]
        if variant == "half_u":
            u_acc = u_acc.astype(np.float16).astype(np.float32)
        accept = np.isfinite(dh) & (np.log(np.maximum(u_acc, dt(1e-30))) < -dh)
        q = np.where(accept[:, None], qn, q)
        acc += accept.astype(np.uint32)
    return q.astype(np.float32), acc


def study(label: str, seeds: int) -> dict:
    size = next(s for s in TASK.size_set("all") if s.label == label)
    params = size.params
    chains = np.arange(min(params["K"], ref.REPLAY_CHAINS))
    rows: dict[str, dict] = {
        v: {"fail": 0, "miss": 0, "untied_fail": 0, "away": [], "tie": [], "untied": []}
        for v in CORRECT + MUTANTS
    }
    for seed in range(seeds):
        inp = TASK.make_inputs(params, seed)
        q_ref, acc_ref, tie = ref.sample(
            inp["q_in"],
            inp["A"],
            params["T"],
            L=int(inp["L"]),
            eps=float(inp["eps"]),
            seed=int(inp["seed"]),
            chains=chains,
            ties=True,
        )
        mirror = {"q": q_ref, "accept_cnt": acc_ref, "replay_tie": tie}
        for v, row in rows.items():
            q, acc = run_variant(inp, params, chains, v, noise_seed=seed)
            away = ref.replay_away(q, acc, q_ref, acc_ref)
            missed, _, why = ref.replay_check(q, acc, mirror)
            row["fail"] += why is not None
            row["miss"] += missed > 1.0
            row["untied_fail"] += why is not None and missed <= 1.0
            row["away"].append(int(away.sum()))
            row["tie"].append(float(tie[away].max()) if away.any() else 0.0)
            row["untied"].append(ref.replay_untied(away, tie))
        if seed % 25 == 24:
            print(f"{label}: {seed + 1} seeds", file=sys.stderr, flush=True)
    return rows


def table(results: dict, seeds: dict) -> str:
    out = []
    for label, rows in results.items():
        for v, r in rows.items():
            mutant = v in MUTANTS
            out.append(
                [
                    label,
                    v,
                    "mutant" if mutant else "correct",
                    seeds[label],
                    r["fail"],
                    r["miss"],
                    r["untied_fail"],
                    max(r["away"]),
                    f"{max(r['tie']):.2e}",
                    f"{min(r['untied']) if mutant else max(r['untied'])} ({'min' if mutant else 'max'})",
                ]
            )
    head = [
        "size",
        "variant",
        "kind",
        "seeds",
        "seeds failing",
        "by miss",
        "by untied",
        "away chains (max)",
        "largest tie of an away chain",
        "untied chains",
    ]
    return tabulate(out, headers=head, tablefmt="github")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="d6_K999_T50,d32_K1024_T200")
    ap.add_argument("--seeds", default="300", help="one count, or one per size (300,50)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    labels = a.sizes.split(",")
    counts = [int(x) for x in a.seeds.split(",")]
    seeds = dict(zip(labels, counts if len(counts) == len(labels) else counts * len(labels)))
    t0 = time.time()
    results = {label: study(label, seeds[label]) for label in labels}
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    text = "\n".join(
        [
            "# hmc replay: tie margins over input seeds",
            "",
            f"`python bench/hmc_replay_ties.py --sizes {a.sizes} --seeds {a.seeds}` at "
            f"{commit}, {datetime.date.today()}, {time.time() - t0:.0f} s. "
            f"REPLAY_TIE_RTOL = {ref.REPLAY_TIE_RTOL:g}, REPLAY_UNTIED_CHAINS = "
            f"{ref.REPLAY_UNTIED_CHAINS}; the variants and columns are in the script's docstring.",
            "",
            table(results, seeds),
            "",
        ]
    )
    print(text)
    if a.out:
        a.out.write_text(text)


if __name__ == "__main__":
    main()
