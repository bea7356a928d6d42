"""Fit a system's efficiency and latency parameters to measured step times.

Eight system parameters, no per-row or per-model ones (:data:`PARAMETERS`, the default fit model
``host-overlap`` of :data:`MODELS`):

=============================  ==========================================================
compute_efficiency             peak fraction e reached by large GEMMs
gemm_half_saturation_flops     GEMM size k at which half of it is reached: a GEMM kernel of g
                               FLOPs runs at e·g/(g + k), i.e. takes (g + k)/(e·peak)
memory_efficiency              HBM fraction reached by memory-bound kernels (and optimizer)
compute_latency_s              fixed time per op (one stage's F or B of one microbatch)
kernel_host_s                  host time per kernel launch; an op lasts at least its launches
intra-node link latency        ``intra_node.latency_s``: per ring step or message
inter-node link efficiency     fraction of ``inter_node`` bandwidth collectives reach
partial_ring_efficiency        fraction of that a ring reaches whose group holds some but
                               not all of a node's GPUs (a data-parallel group of stride
                               t = 2 or 4 on 8-GPU nodes; :func:`ppopt.job.ring_allreduce_work`)
=============================  ==========================================================

The intra-node bandwidth is the base system's (the NVLink datasheet figure), not fitted: the fits
of commit 77b9966 on the shipped rows put its efficiency at 0.87 to 1, and the eighth parameter is worth more on
``partial_ring_efficiency``, which the multi-node rows pin (README, "How accurate is ppopt?":
``benchmarks/partial_ring.py`` prints the fitted value against fixed ones).

The fitted system counts work kernel by kernel (``op_accounting = "kernels"``: each GEMM kernel at
its own size, each elementwise kernel's own traffic, :func:`ppopt.costs.elementwise_traffic_bytes`)
and times an op as ``max(GPU time, kernels·kernel_host_s) + compute_latency_s``
(:func:`ppopt.costs.work_time_s`). Every GEMM's time is a fixed cost plus a rate, so it never
decreases as the GEMM grows; small models that are launch-bound (the host, not the GPU, sets their
pace) are covered by the host time, which vanishes under the GPU time of large models.

Bounds (:class:`Parameter`) keep the values physical. Two are assumptions: ``compute_efficiency``
is capped at 0.8 (roughly what large cuBLAS GEMMs reach on an A100: the small GEMMs of single-node
runs do not pin the large-size limit), and ``gemm_half_saturation_flops`` at 4 GFLOP, a fixed GPU
cost per GEMM kernel of at most 16 µs at 0.8 of the A100's peak (launch latency and the last wave's
tail; the host's launch time is ``kernel_host_s``'s). Without that cap the fits put the launch
overhead of the small models into the GEMMs (about 54 µs per kernel) and extrapolate to the
multi-node rows worse (README, "How accurate is ppopt?", where both are measured).

``saturating`` (:data:`SATURATING_PARAMETERS`), the model before, is kept as the baseline of
``benchmarks/accuracy_extrapolation.py``: the block's FLOPs sized as its reference GEMM
2·b·s·h²/t, efficiency ce / (1 + (k/g)^n) with n ∈ {1, 1.5, 2}, no host time, elementwise
traffic taken as the bytes a block stores. For n > 1 that curve charges a GEMM of g FLOPs
``g (1 + (k/g)^n) / (peak · ce)``, which grows again as g shrinks below ``k (n - 1)^(1/n)``: the
fit used that as an overhead per small GEMM.

The objective is the mean absolute percentage error (MAPE) over the given rows. Each row's
:class:`ppopt.job.JobWork` is built once; a candidate system turns it into seconds through
:func:`ppopt.costs.work_time_s` (vectorised over all rows) under the ``additive`` op-time rule, in
which every term is linear in the parameters (the fitted system is written with
``op_time_rule = "additive"``), and the 1F1B step is taken in closed form,
``Σ_s (F_s + B_s) + (m - 1)·max_s (F_s + B_s) + 2·Σ messages`` plus the gradient all-reduce,
optimizer step (Narayanan et al. 2021, Section 2.2.1, give 1F1B's bubble as (p-1) stage
times for equal stages; the max over unequal stages, the slowest setting the steady state, is
ppopt's extension, checked against the simulator by tests/test_measured.py). It equals the pipeline simulator's 1F1B only
when messages take no time: in the steady state each forward-backward pair also waits for a
message round trip, which the closed form leaves out. On the measured rows a message is a small
fraction of a stage, and the closed form stays within 4 % of the simulator (a test checks it);
the reported errors use the simulator (:mod:`ppopt.accuracy`).

For each exponent n of the fit model (the work depends on n, so it is rebuilt per n) and each
starting host time of :data:`HOST_TIMES`, the other parameters are fitted by a deterministic
Nelder-Mead (Nelder and Mead 1965, "A simplex method for function minimization"; standard
coefficients 1, 2, 0.5, 0.5) over the parameters' natural logarithms, each clamped to its bounds; it
starts from the base system's values (the geometric mean of the bounds where the base value is
outside them, e.g. 0) and restarts from the best point a few times with a smaller simplex; the
start with the lowest MAPE wins (the max of the op time makes the MAPE kinked in the host time, so
one start can stop in a poor local minimum). Link parameters no row exercises (e.g.
InfiniBand when calibrating on one node) keep the base system's values. Same rows, same base
system -> same result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from types import SimpleNamespace

import numpy as np

from ppopt.config import SystemConfig, load_system
from ppopt.errors import ConfigError
from ppopt.io.measured import Measured, Unmodelled
from ppopt.io.toml_text import toml_comment, toml_value
from ppopt.job import JobWork, Work, job_work, work_time_s

__all__ = ["MODELS", "PARAMETERS", "SATURATING_PARAMETERS", "Calibration", "FitModel", "Parameter", "calibrate", "closed_form_mape", "system_toml"]


@dataclass(frozen=True)
class Parameter:
    """One fitted system parameter: its name, unit, bounds and how it sets the system."""

    name: str
    unit: str
    low: float
    high: float
    description: str

    def get(self, system: SystemConfig, base: SystemConfig) -> float:
        if self.name == "intra_node_efficiency":
            return system.intra_node.bandwidth_bytes_per_s / base.intra_node.bandwidth_bytes_per_s
        if self.name == "inter_node_efficiency":
            return system.inter_node.bandwidth_bytes_per_s / base.inter_node.bandwidth_bytes_per_s
        if self.name == "intra_node_latency_s":
            return system.intra_node.latency_s
        return float(getattr(system, self.name))


_COMPUTE = Parameter("compute_efficiency", "", 0.05, 0.8, "fraction of peak FLOP/s reached by large GEMMs")
_HALF = Parameter("gemm_half_saturation_flops", "FLOP", 1e6, 1e13, "GEMM size reaching half of compute_efficiency")
_INTRA_LATENCY = Parameter("intra_node_latency_s", "s", 1e-7, 1e-3, "intra-node latency per ring step or message")
_INTRA_EFFICIENCY = Parameter("intra_node_efficiency", "", 0.02, 1.0, "fraction of the intra-node bandwidth collectives reach")
_INTER_EFFICIENCY = Parameter("inter_node_efficiency", "", 0.02, 1.0, "fraction of the inter-node bandwidth collectives reach")
_PARTIAL_RING = Parameter("partial_ring_efficiency", "", 0.02, 1.0,
                          "fraction of its inter-node bandwidth a ring with some but not all of a node's GPUs reaches")
_MEMORY = Parameter("memory_efficiency", "", 0.05, 1.0, "fraction of HBM bandwidth reached by memory-bound kernels")
_LATENCY = Parameter("compute_latency_s", "s", 1e-7, 1e-1, "fixed time per op (a stage's F or B of one microbatch)")

PARAMETERS: tuple[Parameter, ...] = (
    _COMPUTE,
    Parameter("gemm_half_saturation_flops", "FLOP", 1e6, 4e9,
              "GEMM size reaching half of compute_efficiency (a fixed cost per GEMM kernel of at most 16 µs)"),
    _MEMORY, _LATENCY,
    Parameter("kernel_host_s", "s", 1e-7, 1e-3, "host time to launch one kernel (an op lasts at least its launches)"),
    _INTRA_LATENCY, _INTER_EFFICIENCY, _PARTIAL_RING,
)
"""The fitted parameters of the default ``host-overlap`` model (:data:`MODELS`)."""

SATURATING_PARAMETERS: tuple[Parameter, ...] = (
    _COMPUTE, _HALF,
    Parameter("gemm_saturation_exponent", "", 1.0, 2.0, "sharpness of the GEMM efficiency curve (one of 1, 1.5, 2)"),
    _MEMORY, _LATENCY, _INTRA_LATENCY, _INTRA_EFFICIENCY, _INTER_EFFICIENCY,
)
"""The fitted parameters of the earlier ``saturating`` model, kept as the accuracy benchmark's baseline."""


@dataclass(frozen=True)
class FitModel:
    """Which system parameters a calibration fits, the GEMM-curve exponents and host times per
    kernel it tries (each a separate fit, the best kept), and the system fields it sets."""

    parameters: tuple[Parameter, ...]
    exponents: tuple[float, ...]
    host_times: tuple[float, ...]
    fields: tuple[tuple[str, str], ...]


HOST_TIMES = tuple(1e-6 * 2.0 ** k for k in range(2, 9))
"""Starting values of ``kernel_host_s``, 4 µs to 256 µs a factor 2 apart (module doc)."""

MODELS = {
    "host-overlap": FitModel(PARAMETERS, (1.0,), HOST_TIMES, (("op_accounting", "kernels"),)),
    "saturating": FitModel(SATURATING_PARAMETERS, (1.0, 1.5, 2.0), (0.0,), (("op_accounting", "block"),)),
}
"""``host-overlap`` (the default): GEMMs on the hyperbola (n = 1, monotone: a fixed cost plus a
rate per GEMM), an op at least as long as its kernels' host launch time, and the elementwise
kernels' traffic counted kernel by kernel. ``saturating`` (the model before it, the accuracy
benchmark's baseline): n ∈ {1, 1.5, 2}, no host time, elementwise traffic taken as the stored
bytes; for n > 1 its GEMM time grows again as a GEMM shrinks (module doc)."""


def apply(base: SystemConfig, values: dict[str, float]) -> SystemConfig:
    """``base`` with the fitted ``values`` (link efficiencies scale the base bandwidths)."""
    links = {"intra_node_efficiency", "inter_node_efficiency", "intra_node_latency_s"}
    update: dict[str, object] = {k: v for k, v in values.items() if k not in links}
    update["op_time_rule"] = "additive"  # the rule the closed form fits (module doc)
    for link in ("intra_node", "inter_node"):
        old = getattr(base, link)
        changes = {}
        if f"{link}_efficiency" in values:
            changes["bandwidth_bytes_per_s"] = old.bandwidth_bytes_per_s * values[f"{link}_efficiency"]
        if f"{link}_latency_s" in values:
            changes["latency_s"] = values[f"{link}_latency_s"]
        if changes:
            update[link] = old.model_copy(update=changes)
    return base.model_copy(update=update)


def _light(base: SystemConfig, values: dict[str, float]) -> SimpleNamespace:
    """What :func:`apply` gives, as a plain namespace with the fields :func:`work_time_s` reads
    (pydantic copies would dominate the search's time)."""
    fields_ = base.model_dump()
    fields_.update({k: v for k, v in values.items() if k in fields_})
    fields_["op_time_rule"] = "additive"
    for link in ("intra_node", "inter_node"):
        table = dict(fields_[link])
        table["bandwidth_bytes_per_s"] *= values.get(f"{link}_efficiency", 1.0)
        table["latency_s"] = values.get(f"{link}_latency_s", table["latency_s"])
        fields_[link] = SimpleNamespace(**table)
    return SimpleNamespace(**fields_)


# --------------------------------------------------------------------------------------------------
# Vectorised closed-form step time
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Stacked:
    """Work of many jobs as arrays (rows x stages); padded stages are zero work. F, I and W are
    timed separately (an op lasts at least its kernels' host launches, a max taken per op); only
    the messages of a step are summed before timing, their time being linear in the parameters."""

    forward: Work
    """F of one microbatch per stage."""
    input_grad: Work
    """I of one microbatch per stage."""
    weight_grad: Work
    """W of one microbatch per stage (each op is timed on its own: the host-launch max is per op)."""
    messages: Work
    """All stage-to-stage messages of one microbatch's forward and backward (rows x 1)."""
    sync: Work
    optimizer: Work
    microbatches: np.ndarray
    measured_s: np.ndarray


def _stack(works: list[tuple[Work, ...]], width: int) -> Work:
    names = [f.name for f in fields(Work)]
    table = np.zeros((len(names), len(works), max(1, width)))
    for i, row in enumerate(works):
        for j, w in enumerate(row):
            table[:, i, j] = [getattr(w, name) for name in names]
    return Work(*table)


def stack(rows: list[Measured]) -> _Stacked:
    """Build every row's :class:`JobWork` once, as arrays."""
    works: list[JobWork] = [job_work(r.job) for r in rows]
    width = max(r.job.pp for r in rows)
    return _Stacked(
        forward=_stack([w.forward for w in works], width),
        input_grad=_stack([w.input_grad for w in works], width),
        weight_grad=_stack([w.weight_grad for w in works], width),
        messages=_stack([(2 * sum(w.messages, Work()),) for w in works], 1),
        sync=_stack([w.step_sync for w in works], width),
        optimizer=_stack([w.optimizer for w in works], width),
        microbatches=np.array([r.job.microbatches for r in rows], dtype=float),
        measured_s=np.array([r.measured_s for r in rows]),
    )


def closed_form_step_s(stacked: _Stacked, system: SystemConfig) -> np.ndarray:
    """Closed-form 1F1B step time of every stacked job on ``system`` (module doc), seconds."""
    stage = (work_time_s(stacked.forward, system) + work_time_s(stacked.input_grad, system)
             + work_time_s(stacked.weight_grad, system))
    pipeline = stage.sum(axis=1) + (stacked.microbatches - 1) * stage.max(axis=1)
    pipeline = pipeline + work_time_s(stacked.messages, system)[:, 0]
    return (pipeline + work_time_s(stacked.sync, system).max(axis=1)
            + work_time_s(stacked.optimizer, system).max(axis=1))


def closed_form_mape(stacked: _Stacked, system: SystemConfig) -> float:
    """MAPE of the closed-form step times against the measured ones (a fraction)."""
    predicted = closed_form_step_s(stacked, system)
    return float(np.mean(np.abs(predicted - stacked.measured_s) / stacked.measured_s))


# --------------------------------------------------------------------------------------------------
# Search
# --------------------------------------------------------------------------------------------------


def _value(p: Parameter, z: float) -> float:
    """The parameter value at coordinate ``z`` (its natural logarithm, clamped to the bounds)."""
    return min(p.high, max(p.low, math.exp(max(-700.0, min(700.0, z)))))


def _start(p: Parameter, value: float) -> float:
    """Starting coordinate: the base system's value if inside the bounds, else their geometric mean."""
    if not p.low <= value <= p.high:
        value = math.sqrt(p.low * p.high)
    return math.log(value)


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 1.0,
                iterations: int = 600, tolerance: float = 1e-9) -> tuple[np.ndarray, float]:
    """Minimise ``f`` from ``x0`` with the Nelder-Mead simplex (deterministic)."""
    n = len(x0)
    simplex = [x0.astype(float)] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = np.argsort(values, kind="stable")
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if values[-1] - values[0] <= tolerance:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        fr = f(reflected)
        if fr < values[0]:
            expanded = centroid + 2 * (centroid - simplex[-1])
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:  # shrink towards the best point
                simplex = [simplex[0]] + [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    best = int(np.argmin(values))
    return simplex[best], values[best]


_TERMS = {
    "intra_node_latency_s": "intra_hops",
    "intra_node_efficiency": "intra_bytes",
    "inter_node_efficiency": "inter_bytes",
    "partial_ring_efficiency": "partial_ring_bytes",
}
"""Parameters that only matter when some row moves data over that kind of link."""


def _exercised(p: Parameter, stacked: _Stacked) -> bool:
    """Whether the rows constrain ``p`` at all: link parameters stay at the base value when no row
    uses that link (calibrating on one node says nothing about InfiniBand)."""
    term = _TERMS.get(p.name)
    if term is None:
        return True
    works = (stacked.forward, stacked.input_grad, stacked.messages, stacked.sync)
    return any(bool(np.any(getattr(w, term))) for w in works)


@dataclass(frozen=True)
class Calibration:
    """Fitted parameter values, the calibrated system and the fit's closed-form MAPE (a fraction,
    not a percentage)."""

    system: SystemConfig
    values: dict[str, float]
    mape: float
    rows: int
    parameters: tuple[Parameter, ...] = PARAMETERS
    """The fitted parameters (the fit model's)."""
    kept: tuple[str, ...] = ()
    """Those of them no row exercises (a link no row uses): not fitted, the base system's value."""


def fittable(rows: list[Measured]) -> tuple[list[Measured], list[Unmodelled]]:
    """The rows a calibration can fit, and the others with the reason: the fit times 1F1B in closed
    form (module doc), so a row run with another schedule (an optional ``schedule`` column) is
    validated, never fitted."""
    fit = [r for r in rows if r.job.schedule == "1f1b"]
    others = [Unmodelled(r.line, r.model_key, r.measured_s, f"schedule {r.job.schedule_label}: calibrate fits 1F1B steps in "
                         "closed form (validate predicts this row)", r.source, r.job.describe()) for r in rows if r.job.schedule != "1f1b"]
    return fit, others


def calibrate(rows: list[Measured], base: SystemConfig | str, restarts: int = 4, iterations: int = 600,
              model: str | FitModel = "host-overlap", progress: Callable[[int, int], None] | None = None) -> Calibration:
    """Fit the parameters of ``MODELS[model]`` (or of the :class:`FitModel` ``model``) to ``rows`` by
    minimising the MAPE (module doc); the rows' jobs are re-targeted to ``base`` (a system, a preset
    name or a file). ``progress(done, total)`` is called after each starting point's fit, if given."""
    base = load_system(base)
    if not rows:
        raise ConfigError("no rows to calibrate on", field="rows")
    if others := fittable(rows)[1]:  # the closed form is 1F1B's: another schedule's row would be fitted wrong
        raise ConfigError(f"{len(others)} rows run another schedule than 1F1B (line {others[0].line}): keep fittable(rows)[0]",
                          field="rows")
    if isinstance(model, str) and model not in MODELS:
        raise ConfigError(f"unknown fit model {model!r} (known: {', '.join(MODELS)})", field="model")
    fit_model = MODELS[model] if isinstance(model, str) else model
    best: Calibration | None = None
    total = len(fit_model.exponents) * len(fit_model.host_times)
    done = 0
    for exponent in fit_model.exponents:
        system = base.model_copy(update={"gemm_saturation_exponent": exponent, **dict(fit_model.fields)})
        stacked = stack([r.on(system) for r in rows])
        for host in fit_model.host_times:
            start = system.model_copy(update={"kernel_host_s": host})
            fitted = _fit(stacked, start, fit_model.parameters, restarts, iterations)
            if best is None or fitted.mape < best.mape:
                best = fitted
            done += 1
            if progress is not None:
                progress(done, total)
    assert best is not None
    return best


def _fit(stacked: _Stacked, base: SystemConfig, parameters: tuple[Parameter, ...], restarts: int,
         iterations: int) -> Calibration:
    """Nelder-Mead over ``parameters`` other than the exponent (fixed in ``base``)."""
    free = [p for p in parameters if p.name != "gemm_saturation_exponent" and _exercised(p, stacked)]
    fixed = {p.name: p.get(base, base) for p in parameters if p not in free}

    def values_of(z: np.ndarray) -> dict[str, float]:
        return {**fixed, **{p.name: _value(p, float(x)) for p, x in zip(free, z)}}

    def objective(z: np.ndarray) -> float:
        return closed_form_mape(stacked, _light(base, values_of(z)))  # type: ignore[arg-type]

    z = np.array([_start(p, p.get(base, base)) for p in free])
    best = objective(z)
    for attempt in range(restarts):
        z, best = nelder_mead(objective, z, step=1.0 / (attempt + 1), iterations=iterations)
    values = values_of(z)
    ordered = {p.name: values[p.name] for p in parameters}
    kept = tuple(p.name for p in parameters if p.name in _TERMS and p not in free)
    return Calibration(apply(base, values), ordered, best, len(stacked.measured_s), parameters, kept)


# --------------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------------




def not_fitted_reason(name: str) -> str:
    """Why a calibration left the parameter ``name`` at its base value: no row exercises it."""
    return ("no row has a ring with some but not all of a node's GPUs" if name == "partial_ring_efficiency"
            else "no row uses this link")


SET_BY_THE_FIT = {"op_time_rule": "the rule the fit's closed form uses",
                  "op_accounting": "how the fit model counts a block's work"}
"""Fields a calibration sets without fitting them (:func:`apply`, :data:`MODELS`), and why."""


def system_toml(calibration: Calibration, base: SystemConfig, sources: list[str], simulated_mape: float | None = None) -> str:
    """The calibrated system as a TOML file ``--system`` accepts: fitted fields commented, and so
    are those the fit sets (:data:`SET_BY_THE_FIT`) where they differ from ``base``. Every string is
    escaped (TOML basic strings) and every name in a comment has its control characters escaped, so
    the file reads back as the same system whatever the names. ``simulated_mape``: the calibrated
    system's simulated MAPE on the rows (what `ppopt calibrate` prints), beside the closed form's."""
    system = calibration.system
    fitted = {p.name: p for p in calibration.parameters}
    mape = f"closed-form MAPE of the fit {100 * calibration.mape:.2f} %"
    if simulated_mape is not None:
        mape = f"MAPE {100 * simulated_mape:.2f} % simulated, {100 * calibration.mape:.2f} % in the closed form the fit minimises"
    lines = [
        toml_comment(f"# {system.name}: '{base.name}' calibrated by `ppopt calibrate` on {calibration.rows} measured rows"),
        toml_comment(f"# ({', '.join(sources)}); {mape}."),
        "# Fitted fields are marked 'fitted', fields the fit sets 'set by the calibration'; the others are copied from the",
        "# base system.",
    ]
    tables = []
    for name, value in system.model_dump().items():
        if isinstance(value, dict):
            tables.append((name, value))
            continue
        note = f"  # fitted: {fitted[name].description}" if name in fitted else ""
        if name in calibration.kept:
            note = f"  # not fitted: {not_fitted_reason(name)} (the base system's value)"
        if name in SET_BY_THE_FIT and value != getattr(base, name):
            note = f"  # set by the calibration ({SET_BY_THE_FIT[name]}; the base has {toml_value(getattr(base, name))})"
        lines.append(f"{name} = {toml_value(value)}{note}")
    for name, table in tables:
        key = f"{name}_efficiency"
        note = f"  # fitted: {calibration.values[key]:.4g} x the base bandwidth" if key in calibration.values else ""
        if key in calibration.kept:
            note = "  # not fitted: no row uses this link (the base system's value)"
        lines.append("")
        lines.append(f"[{name}]")
        latency = "  # fitted: latency per ring step or message" if f"{name}_latency_s" in calibration.values else ""
        if f"{name}_latency_s" in calibration.kept:
            latency = "  # not fitted: no row uses this link (the base system's value)"
        for field_name, value in table.items():
            comment = {"bandwidth_bytes_per_s": note, "latency_s": latency}.get(field_name, "")
            lines.append(f"{field_name} = {toml_value(value)}{comment}")
    return "\n".join(lines) + "\n"
