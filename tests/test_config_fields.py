"""The reference of model and system files (`ppopt list model-fields`, `system-fields`), the
side-by-side view of files as read (`ppopt list models NAME|FILE ...`), and the errors a user's
own file gets for a unit slip or a name that is not a preset."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.config import ModelConfig, SystemConfig, load_model, load_system
from ppopt.errors import ConfigError
from ppopt.report.config_fields import field_docs

ROOT = Path(__file__).resolve().parent.parent


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("config", [ModelConfig, SystemConfig])
def test_every_field_is_explained(config):
    """A field added without a docstring would reach the reference with no meaning."""
    docs = field_docs(config)
    assert docs and all(doc.meaning and doc.kind for doc in docs), [d.name for d in docs if not d.meaning]
    assert not any(":mod:" in d.meaning or "``" in d.meaning for d in docs)  # no reStructuredText left


@pytest.mark.parametrize(("config", "load", "what"), [(ModelConfig, load_model, "model"), (SystemConfig, load_system, "system")])
def test_the_reference_says_what_a_file_needs_and_what_it_gets_otherwise(tmp_path, config, load, what):
    """A file with only the fields the reference calls required loads, and each other field then has
    the default the reference states; leaving out any required field is refused naming it."""
    docs = field_docs(config)
    required = [d.name for d in docs if d.default == "required"]
    full = load("llama3-8b" if what == "model" else "dgx-h100")

    def write(names):
        top = {n: getattr(full, n) for n in names if "." not in n}
        tables = {}
        for name in (n for n in names if "." in n):
            table, key = name.split(".")
            tables.setdefault(table, {})[key] = getattr(getattr(full, table), key)
        path = tmp_path / f"minimal-{what}.json"
        path.write_text(json.dumps({**top, **tables}))
        return path

    loaded = load(write(required))
    expected = {"name": f'"minimal-{what}"', "ffn_hidden_size": str(4 * full.hidden_size) if what == "model" else None,
                "num_kv_heads": str(full.num_attention_heads) if what == "model" else None}
    from ppopt.report.config_fields import values_of

    for doc in docs:
        if doc.name in required:
            continue
        value, given = values_of(loaded)[doc.name]
        assert value == (expected.get(doc.name) or doc.default), doc.name
        assert not given, doc.name
    for name in required:
        others = [n for n in required if n != name]
        table = name.split(".")[0]  # a link table left with none of its fields is missing as a whole
        missing = name if "." not in name or any(n.startswith(f"{table}.") for n in others) else table
        with pytest.raises(ConfigError, match=f"missing field '{re.escape(missing)}'"):
            load(write(others))


def test_the_reference_bounds_are_the_ones_a_file_is_checked_against(tmp_path):
    """Every stated bound of a system file is enforced: the bound itself loads (unless strict), one
    step past it is refused naming the field."""
    checked = 0
    for doc in field_docs(SystemConfig):
        if doc.name.startswith("inter_node.") or not doc.kind.startswith("number"):
            continue
        for sign, number in re.findall(r"(>=|>|<=) (\S+?)(?:,|$)", doc.kind):
            limit = float(number)
            cases = {">=": [(limit, True), (limit / 2 if limit > 0 else -1.0, False)], ">": [(limit, False)],
                     "<=": [(limit, True), (2 * limit, False)]}[sign]
            for value, ok in cases:
                path = _system_with(tmp_path, doc.name, value)
                if ok:
                    load_system(path)
                else:
                    with pytest.raises(ConfigError, match=f"field '{re.escape(doc.name)}'"):
                        load_system(path)
                checked += 1
    assert checked >= 20


def _system_with(directory: Path, field: str, value: float) -> Path:
    """dgx-h100's system file with ``field`` (``key`` or ``table.key``) set to ``value``, as JSON."""
    data = tomllib.loads((ROOT / "configs" / "dgx-h100.toml").read_text())
    *table, key = field.split(".")
    (data[table[0]] if table else data)[key] = value
    path = directory / "system.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("key", "value", "reason"), [
    ("peak_flops", "312", "must be at least 1e+09 FLOP/s, got 312 (a file gives FLOP/s: 989e12 for 989 TFLOP/s)"),
    ("memory_capacity_bytes", "40", "must be at least 1e+06 bytes, got 40 (a file gives bytes: 80e9 for 80 GB)"),
    ("compute_latency_s", "10", "must be at most 1 s, got 10 s (seconds: 10 µs is 1e-05)"),
    # zero and below named the type's bound of 1 ("greater than or equal to 1"), not the file's
    ("peak_flops", "0", "must be at least 1e+09 FLOP/s, got 0 (a file gives FLOP/s: 989e12 for 989 TFLOP/s)"),
    ("intra_node.bandwidth_bytes_per_s", "-5", "must be at least 1e+06 bytes/s, got -5 (a file gives bytes/s: 50e9 for 50 GB/s)"),
])
def test_a_unit_slip_in_a_system_file_is_refused_naming_the_unit(tmp_path, key, value, reason):
    """312 meant TFLOP/s, 40 meant GB, 10 meant µs: each gave a step of 8e15 ms, a 0 GB GPU or a
    2,030 s step with exit 0. The CLI already refused a bare --memory-limit 40."""
    path = _system_with(tmp_path, key, float(value))
    result = cli("job", "--model", "llama3-8b", "--system", path, "--pp", 8)
    assert (result.exit_code, result.output) == (1, f"error: {path}: field '{key}': {reason.replace(value, f'{float(value):g}', 1)}\n")


def test_a_preset_name_that_is_a_file_here_says_to_give_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m13b.toml").write_text('name = "m13b"\n')
    result = cli("job", "--model", "m13b", "--system", "dgx-h100")
    assert result.exit_code == 1
    assert result.output.startswith("error: unknown model preset 'm13b' (known: ")
    assert result.output.endswith("; for the file, give its name: m13b.toml\n")
    assert "give its name" not in cli("job", "--model", "m13c", "--system", "dgx-h100").output


def test_list_fields_prints_the_reference_in_every_format():
    text = cli("list", "system-fields")
    assert text.exit_code == 0
    assert "inter_node_per  (\"device\" or \"node\", default \"device\")" in text.output
    assert "peak_flops  (number >= 1e+09, <= 1e+21, FLOP/s, required)" in text.output  # the file minimum, not the class one
    data = json.loads(cli("list", "model-fields", "--json").stdout)
    assert [row["field"] for row in data] == list(ModelConfig.model_fields)
    assert {row["field"]: row["default"] for row in data}["ffn_hidden_size"] == "4 x hidden_size"
    markdown = cli("list", "model-fields", "--format", "markdown").output.splitlines()
    assert markdown[0] == "| field | type | unit | default | meaning |" and len(markdown) == 2 + len(ModelConfig.model_fields)


def test_list_models_shows_each_file_as_read_with_its_defaults_marked(tmp_path):
    """A file with only the fields `list models` shows gets GPT's defaults (GELU, no fused attention,
    dropout): side by side with the preset it was copied from, the defaults are marked."""
    mine = tmp_path / "mine.toml"
    mine.write_text('num_layers = 40\nhidden_size = 5120\nnum_attention_heads = 40\nvocab_size = 32000\nseq_length = 4096\n')
    result = cli("list", "models", "llama3-8b", mine)
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[1:] for line in result.output.splitlines()[2:] if line and not line.startswith("*")}
    assert rows["activation"] == ['"swiglu"', '"gelu"', "*"]
    assert rows["flash_attention"] == ["true", "false", "*"]
    assert rows["ffn_hidden_size"] == ["14336", "20480", "*"]
    assert rows["num_layers"] == ["32", "40"]
    assert result.output.rstrip().endswith("* the default: the file leaves the field out (`ppopt list model-fields`)")
    # the parameters, derived: 40 GPT blocks of 12h² + 13h (h = 5120: 314,639,360) and two untied
    # 32,000 x 5,120 embeddings (327,680,000): 12,913,254,400
    assert rows["parameters"] == ["(derived)", "8.03", "B", "12.9", "B"]
    # CSV: the value itself in a cell (it was TOML's '"gelu"', quoted again), the mark a yes/no column
    csv = cli("list", "models", mine, "--format", "csv").output.splitlines()
    assert csv[0] == f"field,{mine},{mine} default" and "activation,gelu,yes" in csv and "num_layers,40,no" in csv
    assert f"parameters (derived),{40 * 314_639_360 + 327_680_000}," in csv
    assert json.loads(cli("list", "models", mine, "--json").stdout)[0]["parameters"] == 12_913_254_400
    data = json.loads(cli("list", "models", mine, "--json").stdout)
    assert data[0]["given"] == str(mine) and data[0]["name"] == "mine" and "name" in data[0]["defaults"]
    assert data[0]["hidden_size"] == 5120 and "activation" in data[0]["defaults"] and "hidden_size" not in data[0]["defaults"]
    refused = cli("list", "schedules", "1f1b")
    assert refused.exit_code == 1 and "takes no names" in refused.output


@pytest.mark.parametrize("what", ["model-fields", "system-fields"])
def test_the_readme_reference_is_the_commands_output(what):
    """The README's field tables are `ppopt list model-fields/system-fields --format markdown`, as printed now."""
    readme = (ROOT / "README.md").read_text()
    summary = f"(<code>ppopt list {what} --format markdown</code>)</summary>\n\n"
    assert summary in readme
    table = readme.split(summary, 1)[1].split("\n\n</details>", 1)[0]
    assert table == cli("list", what, "--format", "markdown").output.rstrip("\n")


def test_a_system_file_given_for_a_model_is_named_as_such():
    """Each swapped file was refused with every missing and unknown field, thirty items on one line."""
    root = Path(__file__).resolve().parent.parent
    with pytest.raises(ConfigError, match=r"dgx-h100\.toml: a system file, not a model file \(it gives "):
        load_model(root / "configs" / "dgx-h100.toml")
    with pytest.raises(ConfigError, match=r"llama3-8b\.toml: a model file, not a system file \(it gives "):
        load_system(root / "models" / "llama3-8b.toml")
    result = CliRunner().invoke(main, ["list", "models", str(root / "configs" / "dgx-h100.toml")])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "a system file, not a model file" in result.output


def test_a_cost_preset_given_as_a_model_or_system_says_to_give_it_as_costs(tmp_path):
    """`ppopt profile`'s output given as --model listed five missing and four unknown fields."""
    from ppopt.costs import partition_layers, stage_costs
    from ppopt.io.cost_preset import write_cost_preset

    preset = tmp_path / "measured.json"
    model = load_model("study")
    write_cost_preset(preset, stage_costs(model, load_system("mid-mid"), partition_layers(model.num_layers, 2), 4, 4), None, {})
    for load, noun in ((load_model, "model"), (load_system, "system")):
        with pytest.raises(ConfigError) as error:
            load(preset)
        assert str(error.value).endswith(f"measured.json: a cost preset (ppopt-costs/1), not a {noun} file: give it as --costs "
                                         "(evaluate, compare, search, gap, frontier and run --compare take one)")


def test_a_file_outside_the_working_directory_is_named_as_given(tmp_path, monkeypatch):
    """A model file given as a system, by a path outside the working directory but inside the
    repository, was named "models/llama3-8b.toml" (relative to the repository), a path that leads
    nowhere from where the user stands. It is named as given now."""
    given = Path(__file__).resolve().parent.parent / "models" / "llama3-8b.toml"
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["list", "systems", str(given)])
    assert result.exit_code == 1
    assert result.output.startswith(f"error: {given}: a model file, not a system file")
