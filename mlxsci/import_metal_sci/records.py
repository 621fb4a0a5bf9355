"""The files an import writes and the verdict vocabulary, shared by the
importer, the re-scorer and the report (mlxsci/report reads them as data).

An imported run directory `OUT/<source folder name>/` holds:

    run.json                 {"task", "model", "imported": true, "source_format": "metal-sci",
                              "source": the Metal-Sci folder, "chip": the recorded chip}
    import.json              one record per iteration (IMPORT_FILE, below)
    summary.json             the run as the report reads it: "task", "model",
                             "iterations" (LLM iterations), "imported" (counts),
                             "recorded" (the recorded chip's figures), "history"
                             (the recorded history, each record marked
                             "recorded": true), and "seed_score" / "best_score"
                             null: mlxsci has measured nothing yet
    NN_original.metal        the Metal-Sci source as recorded (00 = the seed)
    NN_candidate.metal       the converted candidate in mlxsci's format (00_seed.metal
                             for the seed), absent when it could not be converted
    NN_prompt.md, NN_response.md, NN_reasoning.md   copied as recorded
    NN_recorded_result.json  Metal-Sci's NN_result.json as recorded
    recorded_history.json, recorded_summary.json    Metal-Sci's, as recorded
    manifest.json            the files' digests (mlxsci.search.manifest), written last

`OUT/rescore.json` (written by --rescore) is a JSON list of RescoreRecord
dicts, one per imported candidate and backend/size set, in import order.
"""

from __future__ import annotations

import json
import math

from mlxsci.storage.cache import existing_key, integrity_key, key_id, sign, signature_matches

# One word for how a candidate fared, recorded (Metal-Sci's result) or
# measured here (mlxsci's evaluation). Pipeline errors count as runtime_error.
CORRECT = "correct"
INCORRECT = "incorrect"
COMPILE_ERROR = "compile_error"
RUNTIME_ERROR = "runtime_error"
VERDICTS = (CORRECT, INCORRECT, COMPILE_ERROR, RUNTIME_ERROR)
# mlxsci's word for an evaluation a limit of the machine stopped (its time
# limit, a memory limit): nothing was judged, so it is none of the verdicts
# above, never "incorrect" (Evaluation.not_judged says why).
NOT_JUDGED = "not_judged"
MLXSCI_VERDICTS = (*VERDICTS, NOT_JUDGED)

IMPORT_FILE = "import.json"
RESCORE_FILE = "rescore.json"
MAX_RESCORE_BYTES = 64 << 20  # a larger rescore.json is not read (a record is a few hundred bytes)
SOURCE_FORMAT = "metal-sci"
IMPORT_VERSION = 1

# import.json:
# {"version": 1, "source_format": "metal-sci", "source": str, "task": str, "model": str,
#  "chip": str | None, "recorded_best_iteration": int | None,
#  "iterations": [
#    {"iteration": int (0 = seed), "role": "seed" | "candidate" | "skipped",
#     "original": "NN_original.metal" | None, "candidate": "NN_candidate.metal" | None,
#     "reason": str | None      (why there is no converted candidate: not converted, missing file,
#                                skipped iteration),
#     "notes": [str, ...]       (what the conversion changed: launch shapes, in-place buffers, ...),
#     "problems": [str, ...]    (files of this iteration present but not read: a link, too large),
#     "recorded": {"verdict": one of VERDICTS | None, "score": float | None,
#                  "fail_reason": str | None, "is_new_best": bool,
#                  "sizes": [{"label", "correct", "gpu_seconds", "fraction_of_ceiling"}, ...],
#                  "signature_error": str | None (recorded_errors.signature_error)}}]}
#
# rescore.json: [RescoreRecord, ...], each:
# {"run": str (the imported run's folder name), "iteration": int,
#  "recorded": one of VERDICTS | None, "mlxsci": one of MLXSCI_VERDICTS | None (None: not
#  evaluated, the reason says why; "not_judged": a limit of the machine stopped it), "reason": str (why they differ, or what mlxsci found),
#  "recorded_score": float | None, "mlxsci_score": float | None,
#  "backend": str, "sizes": str (the size set evaluated: smoke, in-dist, ...),
#  "sim_gpu": str | None (the GPU the simulator modelled; None on a GPU, and in
#             records from before the simulator modelled one),
#  "recorded_best": bool (this is the run's recorded best, the seed when nothing beat it),
#  "in_dist": None | {"mlxsci": one of MLXSCI_VERDICTS, "score": float | None,
#                     "seed_score": float | None, "speedup": float | None, "reason": str | None}
#             (the recorded best and its run's seed at the task's in-distribution sizes,
#             where Metal-Sci recorded its speedup; recorded bests only),
#  "held_out": None | {"label": str, "mode": str, "mlxsci": one of MLXSCI_VERDICTS,
#                      "phi": float | None, "seed_phi": float | None, "speedup": float | None,
#                      "reason": str | None},
#  "transfer": None | {"grade": str, "reason": str},
#  "recorded_signature_error": str | None (Metal's first error, where every error of the
#             recorded compile failure lies in the kernel's signature, which MLX writes:
#             mlxsci/import_metal_sci/recorded_errors.py),
#  "candidate_sha256": str | None (the converted candidate the verdict is of),
#  "signature": {"key_id": str, "mac": str}}
#
# Each record is signed (sign_record) with the cache key of the machine that
# made it, over all its other fields: a rescore.json that came with a
# download, or an edited record, claims mlxsci verdicts mlxsci never gave,
# and record_trust tells them apart (the re-score makes them again, the
# report leaves them out).
SIGNATURE_LABEL = "rescore-record"
SIGNED = "signed"  # this machine's key signed it, as it is
SIGNED_ELSEWHERE = "signed elsewhere"  # another machine's key: cannot be checked here
FORGED = "forged"  # no signature, or one this machine's key does not match


def _signed_bytes(rec: dict) -> bytes:
    fields = {k: v for k, v in rec.items() if k != "signature"}
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def sign_record(rec: dict) -> dict:
    """The record with its signature (this machine's cache key)."""
    key = integrity_key()
    mac = sign(SIGNATURE_LABEL, _signed_bytes(rec), key)
    return {**rec, "signature": {"key_id": key_id(key), "mac": mac}}


def record_trust(rec: dict) -> str:
    """SIGNED, SIGNED_ELSEWHERE or FORGED (never raises on a hostile record)."""
    sig = rec.get("signature")
    if not (
        isinstance(sig, dict)
        and isinstance(sig.get("key_id"), str)
        and isinstance(sig.get("mac"), str)
    ):
        return FORGED
    key = existing_key()
    if key is None or sig["key_id"] != key_id(key):
        return SIGNED_ELSEWHERE
    try:
        data = _signed_bytes(rec)
    except (TypeError, ValueError, RecursionError):
        return FORGED
    return SIGNED if signature_matches(SIGNATURE_LABEL, data, sig["mac"], key) else FORGED


def finite_number(value) -> int | float | None:
    """A recorded number, or None: NaN and infinities (json reads `NaN`,
    `Infinity` and `1e999`) would be written into summary.json as no JSON
    at all, and an integer past a float (json reads 4000 digits) breaks
    whatever formats it (math.isfinite raises OverflowError on it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return value if math.isfinite(value) and abs(value) < 1e300 else None
    except OverflowError:
        return None


def recorded_verdict(result: dict | None) -> str | None:
    """The verdict a Metal-Sci NN_result.json (or history record) records:
    None when there is no result to read."""
    if not isinstance(result, dict):
        return None
    reason = result.get("fail_reason")
    reason = reason if isinstance(reason, str) else ""
    if result.get("correct") is True:
        return CORRECT
    if reason.startswith("pipeline error") or reason.startswith("runtime error"):
        return RUNTIME_ERROR
    if result.get("compile_ok") is False or reason.startswith("compile error"):
        return COMPILE_ERROR
    return INCORRECT


def mlxsci_verdict(
    compile_ok: bool, correct: bool, fail_reason: str | None, not_judged: str | None = None
) -> str:
    """The verdict of an mlxsci evaluation (its candidate's compile_ok, correct,
    fail_reason, not_judged): NOT_JUDGED where a limit of the machine stopped it."""
    if not_judged:
        return NOT_JUDGED
    reason = fail_reason or ""
    if reason.startswith("pipeline error") or reason.startswith("runtime error"):
        return RUNTIME_ERROR
    if not compile_ok:
        return COMPILE_ERROR
    if correct:
        return CORRECT
    return INCORRECT
