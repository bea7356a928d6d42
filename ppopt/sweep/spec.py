"""Sweep specs: a TOML file naming a grid of points, validated strictly, expanded into work items.

A spec (``configs/studies/paper.toml`` is the full example)::

    description = "what this sweep is for"
    schedules = ["gpipe", "1f1b", "chimera"]   # or "all", the default
    devices = [4, 8]
    microbatches = [8, 16, 32]
    models = ["study"]                         # presets or .toml/.json files (relative to the spec)
    systems = ["mid-mid", "fast-slow"]
    global_batch = 256                         # optional: default is each model's global_batch_size
    backward = 2                               # slot length of a full backward B in the table layer (default 2)

    [options]                                  # schedule options; a list sweeps them
    chunks = 2                                 # interleaved-1f1b
    waves = 1                                  # hanayo
    split = "1:2"                              # chimera-asym

    [filters.hanayo]                           # per-schedule point filters (all given must hold)
    microbatches_equal_devices = true          # also: devices, microbatches, models, systems (lists),
                                               # microbatches_multiple_of_devices
    [job]                                      # optional: the 3D job of every evaluation point
    tp = 8                                     # JobSpec: --tp, --dp, --micro-batch, --recompute,
    sequence_parallel = true                   # --sequence-parallel, --distributed-optimizer
                                               # (micro_batch without global_batch: micro_batch x m x dp)
    [solver]                                   # optional: optimality gaps (unit mode, see below)
    devices = [4]
    microbatches = [8]
    memory_limits = ["none", 4]                # live activations of a 1/p share per device, or "none"
    time_limit_s = 10                          # seconds per search, at most a day
    deterministic_time = 5                     # CP-SAT deterministic time of each solver point: reruns reproduce
    max_ops = 400                              # not searched over this many ops (row: skipped, why)
    forward = 1.0                              # unit-mode durations, slots per 1/p model share
    backward = 2.0
    comm = 0.0

Points are the cartesian product of the lists, in this order: model, system, devices, microbatches,
schedule, schedule-option values; schedule options only multiply the schedules that take them. A
filter removes points from the grid altogether (they are not points). A point the generator refuses
(e.g. Chimera with odd p) *is* a point: its row has ``status = "skipped"`` and the reason, so a resumed
run does not retry it.

Solver points are unit mode only (no model, no system): one per (devices, microbatches, memory
limit, schedule), grouped by family space so schedules sharing a space (gpipe and 1f1b) share one
search. Filters apply to solver points too, except their ``models`` / ``systems`` conditions. The solver always runs with one worker and seed ``seed`` so a rerun reproduces it, provided the
deterministic limit (not the wall-clock one) is what ends each search.

A ``[job]`` table's fields join every evaluation point's inputs (rows.csv columns), and only when
set: a pipeline-only spec's points keep the hashes they had before the table existed.

Every point's inputs are a flat dict; its hash is the first 16 hex digits of the sha256 of their
canonical JSON (sorted keys, no spaces). The inputs name the model and system as written and also
carry a digest of their contents, so editing a preset gives new points instead of stale rows.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    StrictBool,
    ValidationError,
    field_validator,
)

from ppopt.config import MODEL_LIMITS, ModelConfig, SystemConfig, display_path, load_model, load_system, preset_kind, validation_message
from ppopt.errors import ConfigError, PpoptError, did_you_mean
from ppopt.generators import OPTIONS, REGISTRY, generate, get
from ppopt.io import CONFIG_BYTES, is_a_directory, not_utf8, parse_data, read_text_bounded, require_file_name, unreadable
from ppopt.ir import MAX_OPS
from ppopt.placement import split_text
from ppopt.units import UnitCosts

if TYPE_CHECKING:
    from ppopt.job import Parallelism

__all__ = ["EvalItem", "GapItem", "LoadedSpec", "SweepSpec", "expand", "load_spec", "point_hash", "spec_dirs", "resolve_spec"]

_REPO_ROOT = Path(__file__).resolve().parent.parent.parent
_PACKAGE_DIR = Path(__file__).resolve().parent.parent

NonEmptyStr = Annotated[str, Field(min_length=1)]
Counts = Annotated[list[PositiveInt], Field(min_length=1)]
"""A list of positive counts, at least one: an optional one left out means every value, so an
empty one is refused rather than read the same way."""
Names = Annotated[list[NonEmptyStr], Field(min_length=1)]


class _Strict(BaseModel):
    # inf and nan are no spec value: a spec is hashed as strict JSON (canonical_json)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _unique(values: list, key: str) -> list:
    seen = set()
    for value in values:
        marker = json.dumps(value, sort_keys=True)
        if marker in seen:
            raise ValueError(f"duplicate value {value!r}")
        seen.add(marker)
    return values


class Filter(_Strict):
    """Which points of one schedule to keep: every condition given must hold."""

    devices: Counts | None = None
    microbatches: Counts | None = None
    models: Names | None = None
    systems: Names | None = None
    microbatches_equal_devices: StrictBool = False
    microbatches_multiple_of_devices: StrictBool = False

    def keeps(self, devices: int, microbatches: int, model: str | None = None, system: str | None = None) -> bool:
        if self.devices is not None and devices not in self.devices:
            return False
        if self.microbatches is not None and microbatches not in self.microbatches:
            return False
        if self.models is not None and model is not None and model not in self.models:
            return False
        if self.systems is not None and system is not None and system not in self.systems:
            return False
        if self.microbatches_equal_devices and microbatches != devices:
            return False
        return not (self.microbatches_multiple_of_devices and microbatches % devices)

    def keeps_any(self, spec: SweepSpec) -> bool:
        """Whether some point of ``spec`` passes (the lists compared as sets; the (p, m) pairs walked
        only among the values kept, for the two conditions that relate them)."""
        def kept(mine: list | None, theirs: list) -> list:
            return list(theirs) if mine is None else [v for v in theirs if v in mine]

        devices, microbatches = kept(self.devices, spec.devices), kept(self.microbatches, spec.microbatches)
        if not (devices and microbatches and kept(self.models, spec.models) and kept(self.systems, spec.systems)):
            return False
        return any(self.keeps(p, m) for p, m in itertools.product(devices, microbatches))


class Options(_Strict):
    """Schedule options (see ``ppopt list``); a list sweeps the values. Unset: the generator's default."""

    chunks: PositiveInt | list[PositiveInt] | None = None
    waves: PositiveInt | list[PositiveInt] | None = None
    split: NonEmptyStr | list[NonEmptyStr] | None = None

    @field_validator("chunks", "waves", "split", mode="before")
    @classmethod
    def _not_empty(cls, value):
        if isinstance(value, list) and not value:  # it would leave the schedules taking it out silently
            raise ValueError("an empty list sweeps nothing: give at least one value, or leave the option unset")
        return value

    @field_validator("split")
    @classmethod
    def _check_split(cls, value):
        from ppopt.placement import parse_split

        for text in value if isinstance(value, list) else [value]:
            try:
                parse_split(text)
            except PpoptError as error:
                raise ValueError(str(error).replace("--split", "split")) from None
        return value

    def values(self, name: str) -> list:
        """The normalised values of option ``name`` (one default value when unset)."""
        raw = getattr(self, name)
        if raw is None:
            raw = OPTIONS[name][0]
        values = raw if isinstance(raw, list) else [raw]
        if name == "split":
            values = [split_text(v) for v in values]
            ratios: dict[float, str] = {}
            for text in values:  # 1:2 and 2:4 are one split: two points with the same rows
                a, b = (float(x) for x in text.split(":"))
                earlier = ratios.setdefault(round(a / b, 12), text)
                if earlier != text:
                    raise ValueError(f"duplicate value {text!r} (the same split as {earlier!r})")
        return _unique(values, f"options.{name}")


MAX_SWEEP_SEARCH_S = 86_400.0
"""Most solver time (searches x their time limit) one sweep spends: a day."""


class SolverSpec(_Strict):
    """Optimality gaps in unit mode (durations in slots per 1/p model share)."""

    schedules: list[NonEmptyStr] | Literal["all"] | None = None
    """Default: the sweep's schedules."""
    devices: Counts | None = None
    """Default: the sweep's devices."""
    microbatches: Counts | None = None
    """Default: the sweep's microbatches."""
    memory_limits: list[PositiveFloat | Literal["none"]] = Field(default=["none"], min_length=1)
    time_limit_s: Annotated[float, Field(gt=0, le=MAX_SWEEP_SEARCH_S)] = 10.0  # one search, at most the whole sweep's
    deterministic_time: PositiveFloat | None = None
    max_ops: PositiveInt = 1000
    forward: NonNegativeFloat = 1.0
    backward: NonNegativeFloat = 2.0
    weight: NonNegativeFloat | None = None
    comm: NonNegativeFloat = 0.0
    seed: Annotated[int, Field(ge=0, lt=2**31)] = 0  # CP-SAT's random_seed


class JobSpec(_Strict):
    """The 3D-parallel job every evaluation point simulates (:class:`ppopt.job.Parallelism`'s
    fields, as ``--tp``, ``--dp``, ``--micro-batch``, ``--recompute``, ``--sequence-parallel`` and
    ``--distributed-optimizer`` give them); the defaults are pure pipeline parallelism."""

    tp: PositiveInt = 1
    dp: PositiveInt = 1
    micro_batch: PositiveInt | None = None
    """Sequences per microbatch; without it a point's microbatch is the global batch over m·d."""
    recompute: Literal["none", "selective", "full"] = "none"
    sequence_parallel: StrictBool = False
    distributed_optimizer: StrictBool = False

    def parallelism(self) -> Parallelism:
        """The job fields as :class:`ppopt.job.Parallelism`."""
        from ppopt.job import Parallelism

        return Parallelism(**self.model_dump())


JOB_DEFAULT = JobSpec()


class SweepSpec(_Strict):
    """The validated contents of a spec file (see the module docstring)."""

    description: str = ""
    schedules: list[NonEmptyStr] | Literal["all"] = "all"
    devices: list[PositiveInt] = Field(min_length=1)
    microbatches: list[PositiveInt] = Field(min_length=1)
    models: list[NonEmptyStr] = Field(min_length=1)
    systems: list[NonEmptyStr] = Field(min_length=1)
    global_batch: Annotated[int, Field(ge=1, le=MODEL_LIMITS["global_batch_size"])] | None = None
    # F = 1, B = 2 as in every other command (the paper's study sets 1); an int stays an int, so the
    # points' hashes (and rows.jsonl's reuse) are those of specs written before fractions were allowed
    backward: PositiveInt | PositiveFloat = 2
    options: Options = Options()
    filters: dict[str, Filter] = {}
    solver: SolverSpec | None = None
    job: JobSpec = JOB_DEFAULT

    def schedule_names(self) -> list[str]:
        return list(REGISTRY) if self.schedules == "all" else list(self.schedules)

    def solver_schedule_names(self) -> list[str]:
        if self.solver is None:
            return []
        chosen = self.solver.schedules
        if chosen is None:
            return self.schedule_names()
        return list(REGISTRY) if chosen == "all" else list(chosen)


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------


def spec_dirs() -> tuple[Path, ...]:
    """Where named study specs live: the repo's ``configs/studies``, then ``ppopt/presets/configs/studies``."""
    return (_REPO_ROOT / "configs" / "studies", _PACKAGE_DIR / "presets" / "configs" / "studies")


SPEC_WANTED = "a study spec (a .toml file, or a name such as paper)"


def resolve_spec(name_or_path: str | os.PathLike) -> Path:
    """A spec file: an existing path, or the stem of a file in :func:`spec_dirs` (e.g. ``paper``)."""
    require_file_name(name_or_path, SPEC_WANTED, ConfigError)
    path = Path(name_or_path)
    try:
        if not path.is_dir():
            os.stat(path)  # a device or FIFO too: its reader says what is wrong with it
            return path
    except FileNotFoundError:
        pass  # a spec's name, or a missing file
    except OSError as error:  # a loop of links, a name too long
        raise ConfigError(unreadable(os.fspath(name_or_path), error, SPEC_WANTED)) from None
    for directory in spec_dirs():
        candidate = directory / f"{os.fspath(name_or_path)}.toml"
        with contextlib.suppress(OSError):  # a name that is too long with the suffix names no spec
            if candidate.is_file():
                return candidate
    if path.is_dir():  # after the presets: a folder named like one in the current directory does not hide it
        raise ConfigError(is_a_directory(os.fspath(name_or_path), SPEC_WANTED))
    hint = ""
    if path.name == os.fspath(name_or_path) and not path.suffix:  # a spec's name, not a path: the names there are
        named = sorted({f.stem for directory in spec_dirs() if directory.is_dir() for f in directory.glob("*.toml")})
        hint = did_you_mean(path.name, named) or (f" (named specs: {', '.join(named)})" if named else "")
    raise ConfigError(f"{os.fspath(name_or_path)}: no such spec file{hint}")


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec with its presets loaded (so a bad name fails before any work starts)."""

    path: Path
    name: str
    spec: SweepSpec
    models: Mapping[str, ModelConfig]
    systems: Mapping[str, SystemConfig]


def load_spec(path: str | os.PathLike) -> LoadedSpec:
    """Read, validate and resolve a spec file; every problem is a one-line :class:`ConfigError`."""
    require_file_name(path, SPEC_WANTED, ConfigError)
    path = Path(path)
    where = display_path(path)
    try:
        data = parse_data(read_text_bounded(path, CONFIG_BYTES), toml=True)
    except OSError as error:
        raise ConfigError(unreadable(where, error, SPEC_WANTED)) from None
    except UnicodeDecodeError as error:
        raise ConfigError(not_utf8(where, error)) from None
    except ValueError as error:  # not TOML
        raise ConfigError(f"{where}: not valid TOML: {' '.join(str(error).split())}") from None
    return load_spec_data(data, path)


def load_spec_data(data: dict[str, Any], path: Path) -> LoadedSpec:
    where = display_path(path)
    if (kind := preset_kind(data)) is not None:
        raise ConfigError(f"{where}: a {kind[0]} file, not a sweep spec ({kind[1]}); a spec names {kind[0]}s in its '{kind[0]}s' key")
    for key in data:  # a job field written at the top: say where it goes
        if key in JobSpec.model_fields and key not in SweepSpec.model_fields:
            raise ConfigError(f"{where}: key '{key}': a field of the [job] table: write it under [job]")
    try:
        spec = SweepSpec.model_validate(data, strict=True)
    except ValidationError as error:
        raise ConfigError(f"{where}: {validation_message(error, noun='key', model=SweepSpec)}") from None

    def fail(key: str, message: str) -> ConfigError:
        return ConfigError(f"{where}: key '{key}': {message}")

    for key, values in (("devices", spec.devices), ("microbatches", spec.microbatches), ("models", spec.models), ("systems", spec.systems)):
        try:
            _unique(values, key)
        except ValueError as error:
            raise fail(key, str(error)) from None
    known = ", ".join(REGISTRY)
    for key, chosen in (("schedules", spec.schedules), ("solver.schedules", spec.solver.schedules if spec.solver else None)):
        if isinstance(chosen, list):
            solver_only = key == "schedules" and spec.solver_schedule_names()  # a sweep of gap points alone
            if not chosen and not solver_only:  # as devices = [] is: a sweep of nothing would read as a result
                raise fail(key, "an empty list sweeps nothing: give at least one schedule, or \"all\"")
            for name in chosen:
                if name not in REGISTRY:
                    raise fail(key, f"unknown schedule '{name}' (known: {known})")
            try:
                _unique(chosen, key)
            except ValueError as error:
                raise fail(key, str(error)) from None
    for name in spec.filters:
        if name not in REGISTRY:
            raise fail(f"filters.{name}", f"unknown schedule '{name}' (known: {known})")
    for option in OPTIONS:
        try:
            spec.options.values(option)
        except (ValueError, PpoptError) as error:
            raise fail(f"options.{option}", str(error)) from None
    # values every point would refuse, refused here (each point was skipped with the reason, exit 0)
    try:
        UnitCosts(backward=float(spec.backward))
    except ConfigError as error:
        raise fail("backward", error.reason) from None
    fewest = {"devices": min(spec.devices), "microbatches": min(spec.microbatches)}
    over = [(value, key, other) for key, other in (("devices", "microbatches"), ("microbatches", "devices"))
            for value in getattr(spec, key) if 2 * value * fewest[other] > MAX_OPS]
    if over:  # the largest value is the one to blame (devices [4] with microbatches [10**9]: the 10**9)
        value, key, other = max(over)
        raise fail(key, f"{value} makes every schedule larger than the limit of {MAX_OPS:,} ops (at least "
                        f"2 x {value} x {fewest[other]} {other}: a forward and a backward per stage and microbatch)")
    for name, rule in spec.filters.items():
        if not rule.keeps_any(spec):
            raise fail(f"filters.{name}", "keeps no point of the sweep (its values are not among the sweep's): "
                                          "drop the schedule from schedules instead")
    if spec.solver is not None:
        s = spec.solver
        try:  # the unit model's own ranges (weight at most backward too)
            UnitCosts(s.forward, s.backward, s.weight, s.comm)
        except ConfigError as error:
            raise fail(f"solver.{error.field}", error.reason) from None
        solver_lists: tuple[tuple[str, list | None], ...] = (
            ("memory_limits", s.memory_limits), ("devices", s.devices), ("microbatches", s.microbatches))
        for key, listed in solver_lists:
            try:  # a value given twice would run its searches twice
                _unique(listed or [], f"solver.{key}")
            except ValueError as error:
                raise fail(f"solver.{key}", str(error)) from None

    models, systems = {}, {}
    for index, name in enumerate(spec.models):
        try:
            models[name] = load_model(_relative(name, path))
        except ConfigError as error:
            raise fail(f"models.{index}", str(error)) from None
    for index, name in enumerate(spec.systems):
        try:
            systems[name] = load_system(_relative(name, path))
        except ConfigError as error:
            raise fail(f"systems.{index}", str(error)) from None
    from ppopt.job import idle_job_flag

    job = spec.job
    if (idle := idle_job_flag(job.tp, job.dp, job.sequence_parallel, job.distributed_optimizer)) is not None:
        raise fail(f"job.{idle.field}", f"{idle.why}: give {idle.degree} > 1 or leave it out")  # as `ppopt job` refuses it
    if spec.job.tp > 1:  # a degree no model of the sweep splits into: every model point skipped, "none applicable"
        from ppopt.job import tensor_parallel_reason

        refusals = [tensor_parallel_reason(model, spec.job.tp, spec.job.sequence_parallel) for model in models.values()]
        if all(refusals):
            raise fail("job.tp", f"{refusals[0]}{' (and no model of the sweep takes it)' if len(refusals) > 1 else ''}")
    if spec.solver is None or spec.solver.microbatches is not None:  # else unit-mode points use them too
        # no count that a model's global batch splits into: every point skipped, "none applicable"
        reasons = []
        for microbatches, model in itertools.product(spec.microbatches, models.values()):
            try:
                spec.job.parallelism().check_batch(model, microbatches, spec.global_batch)
                break
            except ConfigError as error:
                reasons.append(error.reason)
        else:
            raise fail("microbatches", f"no count splits the global batch: {reasons[0]}")
    most = max(model.num_layers for model in models.values())
    if spec.solver is None and min(spec.devices) > most:  # a stage holds a layer at least: every point skipped
        raise fail("devices", f"every count is over the {most} layers of {'every' if len(models) > 1 else 'the'} model "
                              "(a device holds one layer at least)")
    return LoadedSpec(path, path.stem, spec, models, systems)


def _relative(name: str, spec_path: Path) -> str:
    """A model/system given as a relative file path is looked up next to the spec first."""
    if name.endswith((".toml", ".json")) or "/" in name or os.sep in name:
        candidate = spec_path.parent / name
        if not Path(name).is_absolute() and candidate.is_file():
            return str(candidate)
    return name


# --------------------------------------------------------------------------------------------------
# Points
# --------------------------------------------------------------------------------------------------


def canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def point_hash(inputs: Mapping[str, object]) -> str:
    """First 16 hex digits of the sha256 of the inputs' canonical JSON."""
    return hashlib.sha256(canonical_json(dict(inputs)).encode("utf-8")).hexdigest()[:16]


def config_digest(config: BaseModel) -> str:
    return hashlib.sha256(canonical_json(config.model_dump(mode="json")).encode("utf-8")).hexdigest()[:12]


def _option_combos(name: str, options: Options) -> list[dict[str, object]]:
    """Every combination of the options schedule ``name`` takes; the others are None."""
    taken = REGISTRY[name].options
    axes = [options.values(o) if o in taken else [None] for o in OPTIONS]
    return [dict(zip(OPTIONS, combo)) for combo in itertools.product(*axes)]


@dataclass(frozen=True)
class EvalItem:
    """One evaluation point: a schedule on (p, m), a model on a system. Produces one row."""

    inputs: dict
    hash: str
    model: ModelConfig
    system: SystemConfig
    cost: float
    """The schedule's ops (what its evaluation's time grows with: :func:`ppopt.sweep.run.item_seconds`)."""

    @property
    def hashes(self) -> tuple[str, ...]:
        return (self.hash,)


def _eval_ops(name: str, devices: int, microbatches: int, options: dict) -> int:
    """The ops of schedule ``name`` at (p, m) with ``options``, known before it is built (2·p·m for
    a family that cannot count them)."""
    family = get(name)
    return family.ops(devices, microbatches, family.taken(options)) or 2 * devices * microbatches


@dataclass(frozen=True)
class GapItem:
    """Schedules sharing a family space at one (p, m, memory limit): one search, one row each."""

    inputs: tuple[dict, ...]
    hashes: tuple[str, ...]
    cost: float = field(default=0.0)


def _applies(spec: SweepSpec, name: str, devices: int, microbatches: int, model: str | None = None, system: str | None = None) -> bool:
    rule = spec.filters.get(name)
    return rule is None or rule.keeps(devices, microbatches, model, system)


MAX_SWEEP_OPS = 2_000_000_000
"""Most ops (stages x microbatches x kinds, summed over the evaluation points) one sweep simulates:
hours of work on one core. A larger spec is refused before the first point; split it."""

MAX_SWEEP_POINTS = 250_000
"""Most evaluation points one sweep holds (after its filters); at a few milliseconds per point,
hours of work."""

MAX_SWEEP_UNFILTERED = 10 * MAX_SWEEP_POINTS
"""Most points a spec may list before its filters: counting what the filters keep goes point by
point (a spec of 1..499 devices x 1..4,999 microbatches, 209 million points, spent minutes in that
count), so a product above this is refused at once."""


def check_sweep_size(spec: SweepSpec, searches_run: bool = True) -> int:
    """Refuse, before any item is built, a spec of more than :data:`MAX_SWEEP_POINTS` evaluation
    points after its filters (:data:`MAX_SWEEP_UNFILTERED` before them, a product, checked first), whose points add up to more than :data:`MAX_SWEEP_OPS` ops or, when ``searches_run``, whose searches to more than
    :data:`MAX_SWEEP_SEARCH_S` seconds (every (p, m, limit, schedule) counted once, an upper bound
    of the searches run). Returns the number of evaluation points."""
    combos = {name: list(_option_combos(name, spec.options)) for name in spec.schedule_names()}
    models_systems = len(spec.models) * len(spec.systems)
    listed = len(spec.devices) * len(spec.microbatches) * sum(map(len, combos.values())) * models_systems
    if listed > MAX_SWEEP_UNFILTERED:
        raise ConfigError(f"sweep too large: {listed:,} points before its filters; the limit is {MAX_SWEEP_POINTS:,} "
                          f"points, {MAX_SWEEP_UNFILTERED:,} before filters: split the spec into several sweeps")
    points = ops = 0  # over the points the filters keep
    pairs = list(itertools.product(spec.models, spec.systems))
    for devices, microbatches in itertools.product(spec.devices, spec.microbatches):
        for name, name_combos in combos.items():
            kept = sum(_applies(spec, name, devices, microbatches, model, system) for model, system in pairs)
            if not kept:
                continue
            family = get(name)
            sizes = (family.ops(devices, microbatches, family.taken(c))
                     for c in name_combos)
            points += kept * len(name_combos)
            ops += kept * sum(min(size or 0, MAX_OPS) for size in sizes)  # a schedule over MAX_OPS is refused by its point
    if points > MAX_SWEEP_POINTS:
        raise ConfigError(f"sweep too large: {points:,} points; the limit is {MAX_SWEEP_POINTS:,}: split the spec into "
                          "several sweeps")
    if ops > MAX_SWEEP_OPS:
        raise ConfigError(f"sweep too large: {points:,} points make {ops:,} ops to simulate (stages x microbatches x "
                          f"kinds, summed); the limit is {MAX_SWEEP_OPS:,}: split the spec into several sweeps")
    solver = spec.solver
    if solver is not None and searches_run:
        searches = (len(solver.devices or spec.devices) * len(solver.microbatches or spec.microbatches)
                    * len(solver.memory_limits) * len(spec.solver_schedule_names()))
        if searches * solver.time_limit_s > MAX_SWEEP_SEARCH_S:
            raise ConfigError(f"sweep too large: up to {searches:,} searches of {solver.time_limit_s:g} s make "
                              f"{searches * solver.time_limit_s / 3600:,.0f} h of solver time; the limit is "
                              f"{MAX_SWEEP_SEARCH_S / 3600:.0f} h: split the spec or lower time_limit_s")
    return points


def expand(loaded: LoadedSpec, kinds: tuple[str, ...] = ("evaluate", "gap")) -> list[EvalItem | GapItem]:
    """The spec's work items of ``kinds`` (``"evaluate"``, ``"gap"``) in point order (the order rows
    appear in ``rows.csv``); callers check the sizes first (:func:`check_sweep_size`)."""
    spec = loaded.spec
    items: list[EvalItem | GapItem] = []
    for model_name, system_name in itertools.product(spec.models, spec.systems):
        model, system = loaded.models[model_name], loaded.systems[system_name]
        model_digest, system_digest = config_digest(model), config_digest(system)
        # a job's fields join the inputs only when set, so a pipeline-only point keeps its hash
        job = {} if spec.job == JOB_DEFAULT else spec.job.model_dump()
        for devices, microbatches in itertools.product(spec.devices, spec.microbatches):
            global_batch = spec.job.parallelism().given_batch(model, microbatches, spec.global_batch) or model.global_batch_size
            for name in spec.schedule_names() if "evaluate" in kinds else ():
                if not _applies(spec, name, devices, microbatches, model_name, system_name):
                    continue
                for combo in _option_combos(name, spec.options):
                    inputs = {
                        "kind": "evaluate", "schedule": name, "devices": devices, "microbatches": microbatches, **combo,
                        "model": model_name, "model_digest": model_digest, "system": system_name,
                        "system_digest": system_digest, "global_batch": global_batch, "backward": spec.backward, **job,
                    }
                    items.append(EvalItem(inputs, point_hash(inputs), model, system, float(_eval_ops(name, devices, microbatches, combo))))
    if spec.solver is not None and "gap" in kinds:  # building them generates every schedule searched
        items += _gap_items(spec)
    return items


def _point_ops(name: str, devices: int, microbatches: int, combo: dict, max_ops: int) -> int | None:
    """Ops of a solver point's schedule, counted from the registry (``Family.ops``) without
    generating it: a schedule over ``max_ops`` is not searched anyway, and generating one of 500 x
    4,000 just to count took a minute and 1.4 GB before the sweep's deadline could act. Its row then
    says it is over max_ops, whether or not its generator would also refuse it (Chimera at an odd p).
    One within ``max_ops`` is generated, and None returned when its generator refuses it (the point
    stays, its row says why)."""
    options = {k: v for k, v in combo.items() if v is not None}
    counted = get(name).ops(devices, microbatches, options)
    if counted is not None and counted > max_ops:
        return counted
    try:
        schedule = generate(name, devices, microbatches, **options)
    except PpoptError:
        return None
    return schedule.op_count


def _gap_items(spec: SweepSpec) -> list[GapItem]:
    from ppopt.solve.gap import family_space

    solver = spec.solver
    assert solver is not None
    items = []
    devices_list = solver.devices or spec.devices
    microbatch_list = solver.microbatches or spec.microbatches
    for devices, microbatches in itertools.product(devices_list, microbatch_list):
        for limit in solver.memory_limits:
            groups: dict[tuple[str, bool], list[dict]] = {}  # by family space, and whether over max_ops
            for name in spec.solver_schedule_names():
                if not _applies(spec, name, devices, microbatches):
                    continue
                for combo in _option_combos(name, spec.options):
                    ops = _point_ops(name, devices, microbatches, combo, solver.max_ops)
                    space = family_space(name, {k: v for k, v in combo.items() if v is not None}).describe()
                    too_large = ops is not None and ops > solver.max_ops
                    inputs = {
                        "kind": "gap", "schedule": name, "devices": devices, "microbatches": microbatches, **combo,
                        "memory_limit": None if limit == "none" else float(limit),
                        "unit_forward": solver.forward, "unit_backward": solver.backward, "unit_weight": solver.weight,
                        "unit_comm": solver.comm, "time_limit_s": solver.time_limit_s,
                        "deterministic_time": solver.deterministic_time, "seed": solver.seed,
                    }
                    if too_large:  # a point still: its row says why it was not searched
                        inputs["skip_reason"] = f"{ops} ops, over the [solver] max_ops of {solver.max_ops}"
                    groups.setdefault((space, too_large), []).append(inputs)
            for (_, too_large), group in groups.items():
                cost = 0.0 if too_large else 1e9 + solver.time_limit_s  # searches first: they are the long items
                items.append(GapItem(tuple(group), tuple(point_hash(i) for i in group), cost))
    return items
