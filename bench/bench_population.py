"""Wall time of a search against proposals in flight (--population K).

A local OpenAI-compatible server (Chat Completions, on 127.0.0.1) answers
each request with the next of a fixed list of scripted candidates after a
model-like delay (DELAY s, uniformly +- JITTER, drawn per request from a
seeded generator). A search with the real SDK client asks it for the same
number of candidates at each K; each run's wall time, the share of the
generations' time in which no evaluation ran (the harness idle, waiting on
the model alone), and its bookkeeping (candidates recorded and evaluated,
the best S) are written as they come, to JSON and a markdown table.

    python bench/bench_population.py --populations 1,2,4,8 --candidates 40 \\
        --out bench/results/sim/search_population_2026-11-29

The candidates are the task seed's launch-shape variants (the autotuner's
axes), each with its own number in a comment so that no two are one text:
every one of them is evaluated, at any K. Which iteration gets which is the
order the server received the requests in, so with K > 1 the best's
iteration may differ between runs; the set of candidates does not.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from mlxsci.kernel.candidate import parse, render
from mlxsci.search import run
from mlxsci.search.proposers.offline import AutotuneProposer
from mlxsci.task import load_task


def scripted_candidates(task_name: str, count: int) -> list[str]:
    """`count` distinct candidate texts: the seed with each of its kernels'
    other threadgroup shapes in turn, numbered."""
    task = load_task(task_name)
    seed = parse(task.seed("metal"), "metal")
    tuner = AutotuneProposer()
    variants = []
    for (kind, _name), values in tuner.axes(seed, task.name):
        for value in values:
            variants.append(render_variant(tuner, seed, {(kind, _name): value}))
    if not variants:
        variants = [render(seed)]
    return [
        f"{variants[i % len(variants)].rstrip()}\n// scripted candidate {i}\n" for i in range(count)
    ]


def render_variant(tuner: AutotuneProposer, cand, changes: dict) -> str:
    return tuner._apply(cand, changes)


class ScriptedModel:
    """The server: request n (in arrival order) waits its delay, then gets
    candidate n in a fenced block."""

    def __init__(self, answers: list[str], delay: float, jitter: float, seed: int = 0):
        self.answers, self.delay, self.jitter, self.seed = answers, delay, jitter, seed
        self.count = 0
        self.lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                with model.lock:
                    n = model.count
                    model.count += 1
                wait = model.delay + random.Random(f"{model.seed}:{n}").uniform(
                    -model.jitter, model.jitter
                )
                time.sleep(max(0.0, wait))
                text = "A faster variant.\n```metal\n" + answers[n % len(answers)] + "```\n"
                body = json.dumps(
                    {
                        "id": f"bench-{n}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": "bench-model",
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": text},
                            }
                        ],
                        "usage": {
                            "prompt_tokens": 1000,
                            "completion_tokens": 500,
                            "total_tokens": 1500,
                        },
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def one_run(task: str, k: int, answers: list[str], args, where: Path) -> dict:
    if args.cold:  # texts no earlier run compiled: the simulator's kernel cache holds none
        answers = [f"{a.rstrip()} (run K={k}, {args.cold})\n" for a in answers]
    with ScriptedModel(answers, args.delay, args.jitter, args.seed) as model:
        t0 = time.perf_counter()
        summary = run(
            task,
            "bench-model",
            base_url=model.url,
            iterations=len(answers),
            population=k,
            backend="sim",
            sizes=args.sizes,
            out=where / f"K{k}",
            quiet=True,
            echo=lambda m: None,
        )
        wall = time.perf_counter() - t0
    history = summary["history"][1:]
    return {
        "population": k,
        "wall_s": wall,
        "generations": len(summary["generations"]),
        "generations_wall_s": summary["time"]["generations_wall_s"],
        "idle_s": summary["time"]["idle_s"],
        "idle_share": summary["time"]["idle_share"],
        "model_calls_s": summary["time"]["model_calls_s"],
        "evaluate_s": summary["time"]["evaluate_s"],
        "candidates": sum(1 for r in history if r["role"] == "candidate"),
        "evaluated": sum(
            1 for r in history if r["role"] == "candidate" and r.get("duplicate_of") is None
        ),
        "correct": sum(1 for r in history if r.get("correct")),
        "scores": sorted(r["score"] for r in history if r.get("score") is not None),
        "best_score": summary["best_score"],
        "requests_served": model.count,
    }


def markdown(rows: list[dict], meta: dict) -> str:
    """The table: the generations' wall seconds (proposing and evaluating the
    candidates, what K changes) and their ratio to K=1's, the whole run's
    (with the seed, the held-out gate and the transfer grade), the idle
    share, and the bookkeeping."""
    base = next((r for r in rows if r["population"] == 1), None)
    lines = [
        "| K | candidates' wall s | x fewer than K=1 | whole run s | generations | idle share "
        "| model calls s (sum) | evaluating s (sum) | candidates / evaluated / correct | best S |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = f"{base['generations_wall_s'] / r['generations_wall_s']:.2f}" if base else "-"
        lines.append(
            f"| {r['population']} | {r['generations_wall_s']:.0f} | {ratio} | {r['wall_s']:.0f} | "
            f"{r['generations']} | {r['idle_share']:.0%} | {r['model_calls_s']:.0f} | "
            f"{r['evaluate_s']:.0f} | {r['candidates']} / {r['evaluated']} / {r['correct']} | "
            f"{r['best_score']:.4f} |"
        )
    head = (
        f"Task {meta['task']} on the simulator ({meta['sim']}) at its {meta['sizes']} sizes, "
        f"{meta['candidates']} candidates, model delay {meta['delay']} s +- {meta['jitter']} s, "
        f"{meta['cpus']} CPUs, {meta['machine']}, Python {meta['python']}.\n\n"
    )
    return head + "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--task", default="heat2d")
    ap.add_argument("--candidates", type=int, default=40)
    ap.add_argument("--populations", default="1,2,4,8")
    ap.add_argument("--delay", type=float, default=20.0)
    ap.add_argument("--jitter", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sizes", default="smoke", choices=["smoke", "in-dist"])
    ap.add_argument(
        "--cold",
        default=None,
        metavar="TAG",
        help="mark every candidate with K and TAG, so that no run finds its kernels "
        "compiled by another run (the simulator caches compiled kernels by their text)",
    )
    ap.add_argument("--out", required=True, help="path prefix: writes PREFIX.json and PREFIX.md")
    ap.add_argument(
        "--runs", default=None, help="folder for the run directories (default PREFIX_runs)"
    )
    args = ap.parse_args()
    out = Path(args.out)
    where = Path(args.runs or f"{out}_runs")
    answers = scripted_candidates(args.task, args.candidates)
    meta = {
        "task": args.task,
        "candidates": args.candidates,
        "delay": args.delay,
        "jitter": args.jitter,
        "cpus": os.cpu_count(),
        "machine": platform.platform(),
        "python": platform.python_version(),
        "sim": "apple-m1-pro modelled",
        "sizes": args.sizes,
        "cold": args.cold,
    }
    rows = []
    for k in [int(x) for x in args.populations.split(",")]:
        print(f"K={k}: {args.candidates} candidates ...", flush=True)
        rows.append(one_run(args.task, k, answers, args, where))
        r = rows[-1]
        print(
            f"K={k}: {r['wall_s']:.0f} s, idle {r['idle_share']:.0%}, best S {r['best_score']:.4f}",
            flush=True,
        )
        out.with_suffix(".json").write_text(
            json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n"
        )
        out.with_suffix(".md").write_text(markdown(rows, meta))


if __name__ == "__main__":
    main()
