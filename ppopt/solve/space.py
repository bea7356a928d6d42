"""Search spaces: a schedule family's structure plus what is left free.

A space is written ``KEY=VALUE[,KEY=VALUE...]`` (``--space``), or ``fixed:NAME`` for the fully fixed
point of a handcrafted schedule (its placement and per-device order are kept). Keys:

``placement``
    ``linear`` (stage r on device r), ``looped`` (v·p stages, stage s on device s mod p),
    ``v`` (2p stages, device r holds r and 2p-1-r), ``zigzag`` (Hanayo: 2W·p stages on a zig-zag),
    ``bidirectional`` (Chimera: p stages, each on devices s and p-1-s), ``any`` (free stage → device
    map; small instances only), or ``family`` (the solver picks one of linear, looped, v, zigzag).
``chunks`` / ``waves``
    v for ``looped`` and ``any`` (stages = v·p), W for ``zigzag``.
``backward``
    ``full`` (one B op) or ``split`` (I then W; W may go anywhere after its I).
``order``
    ``free`` (the solver chooses each device's order) or ``fixed`` (the hint's order is kept).
``directions``
    for ``bidirectional``: ``free`` (the solver splits microbatches between the two directions) or
    ``even`` (half down, half up, as in Chimera).
``split``
    for ``bidirectional``: layer split A:B between the halves of the stages (the asymmetric placement).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from ppopt.errors import ConfigError, ScheduleError
from ppopt.generators import OPTIONS, REGISTRY, check_option_names, generate, get
from ppopt.io import decimal_int
from ppopt.ir import Kind, Op, Schedule
from ppopt.placement import parse_split, placement, split_text

PLACEMENTS = ("linear", "looped", "v", "zigzag", "bidirectional", "any", "family")
FAMILY_MEMBERS = ("linear", "looped", "v", "zigzag")


def hint_names(placement: str) -> tuple[str, ...]:
    """Handcrafted schedules tried as hints in a placement (best one wins): the registry's
    ``hints`` of each family (:mod:`ppopt.generators`)."""
    return tuple(f.name for f in REGISTRY.values() if placement in f.hints)


@dataclass(frozen=True)
class Space:
    """What is fixed and what is free in a search (see the module docstring)."""

    placement: str = "linear"
    chunks: int = 2
    waves: int = 1
    backward: str = "full"
    order: str = "free"
    directions: str = "even"
    split: tuple[float, float] | None = None
    fixed: str | None = None  # name of the handcrafted schedule for ``fixed:NAME``
    fixed_options: dict = field(default_factory=dict)

    def describe(self) -> str:
        if self.fixed:  # with the options that make it another schedule than the default's, as --space reads them
            return ",".join([f"fixed:{self.fixed}", *(f"{k}={_option_text(k, v)}" for k, v in sorted(self.fixed_options.items())
                                                      if not _is_default(k, v))])
        parts = [f"placement={self.placement}"]
        if self.placement in ("looped", "any"):
            parts.append(f"chunks={self.chunks}")
        if self.placement == "zigzag":
            parts.append(f"waves={self.waves}")
        parts += [f"backward={self.backward}", f"order={self.order}"]
        if self.placement == "bidirectional":
            parts.append(f"directions={self.directions}")
            if self.split:
                parts.append(f"split={self.split[0]:g}:{self.split[1]:g}")
        return ",".join(parts)

    @property
    def split_backward(self) -> bool:
        return self.backward == "split"


def _option_text(key: str, value: object) -> str:
    """A schedule option as --space writes it (a split as A:B)."""
    return split_text(value) if key == "split" else str(value)


def _is_default(key: str, value: object) -> bool:
    return _option_text(key, value) == _option_text(key, OPTIONS[key][0])


def _positive_int(value: str, key: str | None = None, field: str = "space") -> int:
    """``value`` as an integer >= 1; the error names the space ``key`` (if any) and carries ``field``."""
    try:  # plain decimal digits: int() would also read 1_0 and other scripts' digits
        number = decimal_int(value.strip())
    except ValueError:
        number = 0
    if number < 1:
        what = f"space key {key!r} must be" if key else "must be"
        raise ScheduleError(f"{what} a positive integer, got {value!r}", field=field)
    return number


CHOICES = {"placement": PLACEMENTS, "backward": ("full", "split"), "order": ("free", "fixed"), "directions": ("free", "even")}
"""The space keys that take a word, and their words (the others: chunks, waves, split)."""


def _read_pairs(items: list[str], choices: dict[str, tuple[str, ...]], unknown: str) -> dict[str, object]:
    """``KEY=VALUE`` items of a space spec read: a word of ``choices``, chunks and waves as positive
    integers, split as a pair (:func:`ppopt.placement.parse_split`). ``unknown`` words the error for
    another key (formatted with ``key`` and ``item``); every error carries the field ``space``."""
    values: dict[str, object] = {}
    for item in items:
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not value:
            raise ScheduleError(f"space item {item.strip()!r} is not KEY=VALUE", field="space")
        if key not in choices and key not in ("chunks", "waves", "split"):
            raise ScheduleError(unknown.format(key=key, item=item.strip()), field="space")
        if key in values:
            raise ScheduleError(f"space key {key!r} is given twice", field="space")
        if key in choices:
            if value not in choices[key]:
                raise ScheduleError(f"space key {key!r} must be one of {', '.join(choices[key])}, got {value!r}", field="space")
            values[key] = value
        elif key == "split":
            try:
                values[key] = parse_split(value)
            except ScheduleError as error:
                raise ScheduleError(f"space key 'split' {error.reason}", field="space") from None
        else:
            values[key] = _positive_int(value, key)
    return values


MAX_SPACE_CHARACTERS = 200
"""The longest space spec read (every key given, with counts of eight digits, is under 150 characters)."""


def parse_space(spec: str, **schedule_options: object) -> Space:
    """Parse a space spec; errors name the key or value at fault and carry the field ``space``.

    ``schedule_options`` (``chunks``, ``waves``, ``split`` from the shared flags) give the values
    the spec does not set, and the options of the handcrafted schedule in ``fixed:NAME``.
    """
    if not isinstance(spec, str):
        raise ScheduleError(f"must be a space's text such as 'placement=linear', got {spec!r}", field="space")
    check_option_names(schedule_options)  # chunk=3 was ignored without a word
    spec = spec.strip()
    if len(spec) > MAX_SPACE_CHARACTERS:  # every message below quotes a part of it
        from ppopt.io import shown

        raise ScheduleError(f"{len(spec):,} characters, longer than the {MAX_SPACE_CHARACTERS} a space spec may take: "
                            f"got {shown(spec)}", field="space")
    if spec.startswith("fixed:"):
        name, *pairs = spec.removeprefix("fixed:").split(",")
        name = name.strip()
        try:
            get(name)
        except ScheduleError as error:
            raise ScheduleError(f"fixed:NAME needs a schedule: {error.reason}", field="space") from None
        options = {k: v for k, v in schedule_options.items() if v is not None}
        # fixed:NAME,chunks=4 (as describe() writes it) is fixed:NAME with --chunks 4
        in_spec = _read_pairs(pairs, {}, f"fixed:{name} takes chunks=V, waves=W or split=A:B after a comma, got {{item!r}}")
        for key, read in in_spec.items():  # written in the spec: its errors name --space
            if options.get(key) is not None and _option_text(key, options[key]) != _option_text(key, read):
                raise ScheduleError(f"fixed:{name} sets {key}={_option_text(key, read)}, and --{key} another value: give one",
                                    field="space")
            options[key] = split_text(read) if key == "split" else read
        for key in options:  # an option the schedule does not take would be ignored
            if key not in get(name).options:
                if key in in_spec:
                    raise ScheduleError(f"{name} does not take {key} (fixed:{name})", field="space")
                raise ScheduleError(f"{name} does not take it (fixed:{name})", field=key)
        return Space(fixed=name, fixed_options=options, order="fixed")
    if not spec:
        raise ScheduleError("empty space spec (e.g. placement=linear,backward=split)", field="space")
    values = _read_pairs(spec.split(","), CHOICES,
                         "unknown space key {key!r} (known: placement, chunks, waves, backward, order, directions, split)")
    placement_given = values.get("placement", Space.placement)
    for key, used_by in (("chunks", ("looped", "any", "family")), ("waves", ("zigzag", "family")), ("split", ("bidirectional",))):
        if placement_given in used_by:
            continue
        if key in values:  # a key the space would ignore
            raise ScheduleError(f"space key {key!r} needs placement={' or '.join(used_by)}", field="space")
        if schedule_options.get(key) is not None:  # the flag, likewise
            raise ScheduleError(f"only applies to a space with placement={' or '.join(used_by)} (this one's is "
                                f"{placement_given})", field=key)
    # --chunks, --waves and --split fill in what the spec leaves out (and may not contradict it)
    for key in ("chunks", "waves"):
        flag = schedule_options.get(key)
        if flag is not None and key in values and _positive_int(str(flag), field=key) != values[key]:
            raise ScheduleError(f"{flag} contradicts the space's {key}={values[key]}: give one of them", field=key)
        if key not in values and flag is not None:
            values[key] = _positive_int(str(flag), field=key)
    if schedule_options.get("split") is not None:
        flag_split = parse_split(schedule_options["split"])
        if "split" in values and flag_split != values["split"]:
            raise ScheduleError(f"{schedule_options['split']} contradicts the space's split: give one of them", field="split")
        values["split"] = flag_split
    if values.get("directions") == "free" and values.get("placement") != "bidirectional":
        raise ScheduleError("space key 'directions' needs placement=bidirectional", field="space")
    return Space(**values)  # type: ignore[arg-type]


def family_space(name: str, options: Mapping[str, object]) -> Space:
    """The relaxed space a handcrafted schedule is a point of: its registry entry's ``space``
    (:mod:`ppopt.generators`), with the schedule's ``options``."""
    return parse_space(get(name).space(options))


def placement_of(space: Space, devices: int) -> tuple[tuple[int, ...], ...] | None:
    """The stage → devices map of a space, or None when the solver chooses it (``any``, ``family``)."""
    if space.placement in ("any", "family"):
        return None
    return placement(space.placement, devices, chunks=space.chunks, waves=space.waves)


def largest_stage_count(space: Space, devices: int) -> int:
    """Stages of the largest schedule of ``space`` on ``devices`` devices, from its keys alone (no
    placement is built, so a huge chunk or wave count costs nothing): v·p for ``looped`` and ``any``,
    2W·p for ``zigzag``, 2p for ``v``, p for ``linear`` and ``bidirectional``, the largest member's
    for ``family``; for ``fixed:NAME``, p times its options' chunks (or 2 x waves), at least p."""
    if space.fixed:
        chunks, waves = space.fixed_options.get("chunks") or 1, space.fixed_options.get("waves") or 0
        return devices * max(1, int(chunks), 2 * int(waves))
    per_device = {"looped": space.chunks, "any": space.chunks, "zigzag": 2 * space.waves, "v": 2}
    if space.placement == "family":
        return devices * max(1, *(per_device.get(member, 1) for member in FAMILY_MEMBERS))
    return devices * per_device.get(space.placement, 1)


def size_key(space: Space) -> str | None:
    """The space key that sets its stage count (``chunks=V`` or ``waves=W``), if any: what a size
    error names."""
    keys = []
    if not space.fixed and space.placement in ("looped", "any", "family") and space.chunks > 1:
        keys.append((space.chunks, f"chunks={space.chunks}"))
    if not space.fixed and space.placement in ("zigzag", "family") and space.waves > 1:
        keys.append((2 * space.waves, f"waves={space.waves}"))
    return max(keys)[1] if keys else None


def stage_count(space: Space, devices: int) -> int:
    """S, the stages a schedule of ``space`` on ``devices`` devices has: its placement's, else
    (free placement) ``chunks`` per device."""
    placement = placement_of(space, devices)
    if placement is not None:
        return len(placement)
    return devices * (space.chunks if space.placement == "any" else 1)


def with_backward(schedule: Schedule, split: bool) -> Schedule:
    """The same order with backward split (each B becomes I then W) or merged (I becomes B, W dropped);
    overlapped F&B pairs become two plain ops (the solver treats a pair as two ops), so every hint of a
    relaxed space is timed as the solver's model times it."""
    if not any(op.kind is (Kind.B if split else Kind.I) for op in schedule.ops()):
        return replace(schedule, overlapped=()) if schedule.overlapped else schedule
    orders = []
    for order in schedule.orders:
        new: list[Op] = []
        for op in order:
            if split and op.kind is Kind.B:
                new += [Op(op.stage, Kind.I, op.microbatch), Op(op.stage, Kind.W, op.microbatch)]
            elif not split and op.kind is Kind.I:
                new.append(Op(op.stage, Kind.B, op.microbatch))
            elif split or op.kind is not Kind.W:
                new.append(op)
        orders.append(tuple(new))
    suffix = "+split" if split else "+merged"
    return replace(schedule, name=schedule.name + suffix, orders=tuple(orders), overlapped=())


def space_of(schedule: Schedule) -> Space:
    """The relaxed space ``schedule`` is a point of, as a family's is (:func:`family_space`): its
    placement (linear, looped with v chunks, v or zigzag with W waves when the stage map is theirs,
    else ``any`` with v chunks when every device holds v of the S = v·p stages), its backward (split
    when it holds any I: a B of a mixed schedule is an I with its W right after), the order free.
    Raises ScheduleError for a schedule no space holds (a replicated stage, uneven layer shares,
    devices holding unequal numbers of stages)."""
    if not isinstance(schedule, Schedule):  # a family's name: family_space takes those
        raise ConfigError(f"must be a Schedule (ppopt.solve.space.family_space takes a family's name), got {schedule!r:.60}",
                          field="schedule")
    p, stages = schedule.devices, schedule.stages
    backward = "split" if schedule.split_backward else "full"
    if schedule.replicas > 1:
        raise ScheduleError(f"{schedule.name} places a stage on several devices: only the bidirectional placement does, "
                            "with the families' own schedules (chimera, dualpipe)")
    if schedule.stage_weights is not None and len(set(schedule.stage_weights)) > 1:  # the spaces' instances split evenly
        raise ScheduleError(f"{schedule.name} splits the layers unevenly over its stages; the relaxed spaces split them evenly")
    chunks, extra = divmod(stages, p)
    plain = Space(backward=backward)
    styles = [replace(plain, placement="linear")] if stages == p else []
    if not extra and chunks > 1:
        styles.append(replace(plain, placement="looped", chunks=chunks))
    if stages == 2 * p:
        styles.append(replace(plain, placement="v"))
    if not extra and chunks % 2 == 0:
        styles.append(replace(plain, placement="zigzag", waves=chunks // 2))
    for space in styles:
        if placement_of(space, p) == schedule.placement:
            return space
    held = [len(stages_on) for stages_on in schedule.stages_by_device()]
    if extra or any(count != chunks for count in held):
        raise ScheduleError(f"{schedule.name}'s devices hold unequal numbers of stages ({','.join(map(str, held))}); "
                            "the relaxed spaces give every device the same number")
    return replace(plain, placement="any", chunks=chunks)


def handcrafted_in(space: Space, devices: int, microbatches: int) -> Iterator[Schedule]:
    """Handcrafted schedules that are points of ``space`` (backward converted to the space's kind),
    generated one at a time as they are asked for (at hundreds of thousands of ops each takes
    seconds, so a caller on a budget can stop early).

    Schedules whose generator refuses (p, m) are left out.
    """
    if space.fixed:
        yield generate(space.fixed, devices, microbatches, **space.fixed_options)
        return
    names = hint_names(space.placement)
    if space.placement == "family":
        names = tuple(n for member in FAMILY_MEMBERS for n in hint_names(member))
    # the families built for the space's backward first: a caller short of time may take only the
    # first (64 x 4,096, split space: GPipe split came first, and the search reported 12,410 slots where
    # ZB-H1, never built in its time, takes 12,350)
    names = tuple(sorted(names, key=lambda n: (REGISTRY[n].kinds == 3) != space.split_backward))
    options: dict[str, object] = {"chunks": space.chunks, "waves": space.waves}
    if space.split:
        options["split"] = space.split
        names = tuple("chimera-asym" if n == "chimera" else n for n in names)
    for name in names:
        try:
            schedule = generate(name, devices, microbatches, **options)
        except ScheduleError:
            continue
        target = placement_of(space, devices)
        if target is not None and schedule.placement != target:
            continue
        if space.placement == "any" and schedule.stages != stage_count(space, devices):
            continue
        yield with_backward(schedule, space.split_backward)
