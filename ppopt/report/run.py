"""Text and JSON of `ppopt run` and `ppopt profile` (pure)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ppopt.config import LinkConfig
from ppopt.costs import Costs
from ppopt.report.text import percent, render_table, seconds
from ppopt.run.compare import Comparison
from ppopt.run.execute import JobResult
from ppopt.run.spec import RunSpec


def _setting_line(results: Sequence[JobResult], settings: RunSpec) -> str:
    m = settings.model
    return (f"{results[0].devices} ranks on 127.0.0.1 (gloo), {settings.threads} thread(s) each; tiny GPT: {m.layers} layers, "
            f"hidden {m.hidden}, {m.heads} heads, sequence {m.sequence}, microbatch {m.microbatch_size}, vocab {m.vocab}, "
            f"{settings.dtype}; median of {settings.steps} step(s) after {settings.warmup} warm-up")


def _check_text(check: dict | None) -> str:
    if check is None:
        return "not checked"
    if not check["ok"]:
        return "DIFFER: " + "; ".join(check["mismatches"][:2])
    # torch.allclose's test, |g - g_ref| <= atol + rtol·|g_ref|: a relative error above rtol can pass on a tiny g_ref
    return f"equal (max abs {check['max_abs_error']:.1e}, rtol {check['rtol']:g}, atol {check['atol']:g})"


def run_text(results: Sequence[JobResult], settings: RunSpec, comparisons: Sequence[Comparison] | None = None) -> str:
    """`run`'s table: median step and op times (seconds), predictions beside them when compared."""
    kinds = [k for k in "FBIW" if any(k in r.kind_s() for r in results)]
    headers = ["schedule", "stages", "m", "step (median)", *(f"{k} (median)" for k in kinds)]
    if comparisons is not None:
        headers += ["predicted", "error", "replayed", "error"]
    headers.append("loss and gradients vs no pipelining")
    rows = []
    for i, r in enumerate(results):
        by_kind = r.kind_s()
        row = [r.name, r.stages, r.microbatches, seconds(r.median_step_s), *(seconds(by_kind[k]) if k in by_kind else "-" for k in kinds)]
        if comparisons is not None:
            c = comparisons[i]
            row += [seconds(c.predicted_s), percent(c.relative_error, "text", signed=True), seconds(c.replayed_s),
                    percent(c.replay_error, "text", signed=True)]
        row.append(_check_text(r.check))
        rows.append(row)
    text = _setting_line(results, settings) + "\n" + render_table(headers, rows)
    if comparisons is not None:
        text += ("\npredicted: simulated with the profile's op durations and message time; replayed: with this "
                 "run's own op medians (the error left is what the runtime adds beyond ops and messages)")
    return text


def run_json(results: Sequence[JobResult], settings: RunSpec, comparisons: Sequence[Comparison] | None = None) -> dict:
    """`run --json`: the settings and every run's steps and op times (seconds)."""
    runs = []
    for i, r in enumerate(results):
        entry = {
            "schedule": r.name, "devices": r.devices, "stages": r.stages, "microbatches": r.microbatches,
            "median_step_s": r.median_step_s, "step_s": list(r.step_s), "op_median_s": r.kind_s(),
            "ops": [{"stage": s, "kind": k, "median_s": v} for (s, k), v in sorted(r.op_s.items())],
            "check": r.check,
        }
        if comparisons is not None:
            c = comparisons[i]
            entry.update(predicted_step_s=c.predicted_s, relative_error=c.relative_error,
                         replayed_step_s=c.replayed_s, replay_error=c.replay_error)
        runs.append(entry)
    return {"settings": {"threads": settings.threads, "dtype": settings.dtype, "steps": settings.steps,
                         "warmup": settings.warmup, "seed": settings.seed, "model": dataclasses.asdict(settings.model)},
            "runs": runs}


def profile_text(costs: Costs, link: LinkConfig | None, devices: int | None = None) -> str:
    """`profile`'s table: each stage's measured F, B, I and W (seconds) and the link it measured;
    then the unit-model flags at p = ``devices``, the ranks profiled [default: one per stage] (a
    slot is a 1/p share's forward, so with 2 stages per rank the message is half as many slots)."""
    rows = [[s, c.layers, seconds(c.forward_s), seconds(c.backward_s), seconds(c.input_grad_s), seconds(c.weight_grad_s)]
            for s, c in enumerate(costs.stages)]
    text = render_table(["stage", "layers", "F", "B", "I", "W"], rows)
    from ppopt.run.profile import NO_SIZE_COST, unit_flags

    devices = devices or len(costs.stages)
    flags = " ".join(f"--{k} {v:g}" for k, v in unit_flags(costs, link, devices).items())
    if link is not None:
        bandwidth = (f"bandwidth {link.bandwidth_bytes_per_s / 1e6:.4g} MB/s" if link.bandwidth_bytes_per_s < NO_SIZE_COST
                     else "no measurable cost per byte (the larger message was not slower by a bandwidth of at least 1 MB/s)")
        text += f"\nmessage ({costs.stages[0].send_bytes:.0f} bytes): latency {seconds(link.latency_s)}, {bandwidth}"
    at = f"at p = {devices}, " if link is not None else ""
    per = len(costs.stages) / devices
    slot = "one slot = mean F" if per == 1 else f"one slot = {per:g} mean stage F"
    return text + f"\nas unit-model flags (search, table; {at}{slot}): {flags}"
