"""Tables of a GPU record made by bench/gpu_record.sh, for bench/results/<device>/.

    python bench/gpu_record_table.py RECORD_DIR [MORE_BENCH_LOG ...] --out DIR

RECORD_DIR is what gpu_record.sh left under $OUT (device.txt, roofline.json,
seeds.jsonl, bench_gpu.log); each MORE_BENCH_LOG is the stdout of a further
bench/bench_gpu.py run (for tasks a cut-short record did not reach). Writes
gpu_record_<date>.md (the seeds' verdicts and fractions at every size, the
timers against each other, S over fresh processes, the probe curve) and
gpu_record_<date>.json (the same rows, the roofline, the device).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench_gpu import timer_table  # bench/bench_gpu.py, beside this script
from tabulate import tabulate


def bench_rows(log: Path) -> tuple[dict, list[dict]]:
    """bench_gpu.py prints its metadata, then one JSON row per task and size."""
    meta: dict = {}
    rows = []
    for line in log.read_text().splitlines():
        if not line.startswith("{"):
            continue
        data = json.loads(line)
        if "exact_ms" in data:
            rows.append(data)
        elif "device" in data and not meta:
            meta = data
    return meta, rows


def seed_rows(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        result = record.get("result")
        if not result:
            rows.append({"task": record["task"], "failed": record.get("raw", "")[-300:]})
            continue
        for size in result["sizes"]:
            rows.append(
                {
                    "task": record["task"],
                    "size": size["label"],
                    "held_out": size.get("held_out", False),
                    "correct": size["correct"],
                    "error": size.get("error"),
                    "tol": size.get("tol"),
                    "ms": (size.get("seconds") or 0.0) * 1e3,
                    "noise": size.get("noise"),
                    "fraction": size.get("fraction"),
                    "score": result["candidate"]["score"],
                }
            )
    return rows


def seeds_table(rows: list[dict]) -> str:
    body = []
    for r in rows:
        if "failed" in r:
            body.append([r["task"], "-", "-", "FAILED", "-", "-", "-", "-"])
            continue
        body.append(
            [
                r["task"],
                r["size"] + (" (held-out)" if r["held_out"] else ""),
                "yes" if r["correct"] else "NO",
                f"{r['error']:.3g} / {r['tol']:.3g}" if r["error"] is not None else "-",
                f"{r['ms']:.4g}",
                "-" if r["noise"] is None else f"{100 * r['noise']:.0f}",
                "-" if r["fraction"] is None else f"{r['fraction']:.4f}",
                f"{r['score']:.4f}" if r["score"] is not None else "-",
            ]
        )
    headers = ["task", "size", "correct", "error / tol", "ms", "noise %", "fraction", "S"]
    return tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)


def probe_table(roof: dict) -> str:
    body = [[f"{ws / 2**20:.3f}", f"{gbps:.0f}"] for ws, gbps in roof["bandwidth"]]
    return tabulate(body, headers=["working set MiB", "GB/s"], tablefmt="github")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("record", type=Path)
    ap.add_argument("more_logs", type=Path, nargs="*")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    meta, rows = bench_rows(args.record / "bench_gpu.log")
    for log in args.more_logs:
        more_meta, more = bench_rows(log)
        meta = meta or more_meta
        rows += more
    rows.sort(key=lambda r: r["task"])
    seeds = seed_rows(args.record / "seeds.jsonl")
    roof = json.loads((args.record / "roofline.json").read_text())
    device = (args.record / "device.txt").read_text().splitlines()[-3:]
    stamp = meta.get("date", "undated")
    text = "\n".join(
        [
            f"# GPU record: {meta.get('device')} ({meta.get('backend')}), MLX {meta.get('mlx')}, "
            f"driver {meta.get('driver')}, {stamp}",
            "",
            "```",
            *device,
            "```",
            "",
            "## Every seed at every size (`python -m mlxsci.eval TASK --backend cuda "
            "--sizes all --held-out metal-sci --json`, one process per task)",
            "",
            seeds_table(seeds),
            "",
            "## Timers and S (`bench/bench_gpu.py --backend cuda`)",
            "",
            timer_table(rows),
            "",
            f"## Roofline (`python -m mlxsci.roofline --backend cuda --refresh`): "
            f"FP32 {roof['peak_gflops']:.0f} GFLOPS",
            "",
            probe_table(roof),
            "",
        ]
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"gpu_record_{stamp}.md").write_text(text)
    (args.out / f"gpu_record_{stamp}.json").write_text(
        json.dumps(
            {"meta": meta, "device": device, "seeds": seeds, "bench": rows, "roofline": roof},
            indent=1,
        )
    )
    print(text)


if __name__ == "__main__":
    main()
