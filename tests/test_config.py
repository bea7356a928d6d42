"""Configuration layer: presets load, the study grid scales as documented, bad files fail."""

from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError

from ppopt.config import (
    LinkConfig,
    ModelConfig,
    list_models,
    list_systems,
    load_model,
    load_system,
)
from ppopt.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
MODEL_FILES = sorted((REPO / "models").glob("*.toml"))
SYSTEM_FILES = sorted((REPO / "configs").glob("*.toml"))
LEVELS = ("slow", "mid", "fast")
GRID = [f"{c}-{n}" for c in LEVELS for n in LEVELS]

VALID_SYSTEM = """\
name = "tiny"
peak_flops = 1.0e15
memory_bandwidth_bytes_per_s = 3.0e12
memory_capacity_bytes = 8.0e10

[intra_node]
bandwidth_bytes_per_s = 4.5e11
latency_s = 1e-6

[inter_node]
bandwidth_bytes_per_s = 5e10
latency_s = 5e-6
"""

VALID_MODEL = """\
name = "tiny"
num_layers = 4
hidden_size = 64
num_attention_heads = 4
vocab_size = 1000
seq_length = 128
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- presets --------------------------------------------------------------------------------------


def test_preset_dirs_are_not_empty():
    assert MODEL_FILES and SYSTEM_FILES


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.stem)
def test_every_model_preset_loads(path):
    by_path = load_model(path)
    by_name = load_model(path.stem)
    assert by_path == by_name
    assert by_name.name == path.stem


@pytest.mark.parametrize("path", SYSTEM_FILES, ids=lambda p: p.stem)
def test_every_system_preset_loads(path):
    by_path = load_system(path)
    by_name = load_system(path.stem)
    assert by_path == by_name
    assert by_name.name == path.stem


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_a_preset_file_with_a_byte_order_mark_loads_as_without(tmp_path, suffix):
    """Some Windows editors start UTF-8 files with a byte-order mark; TOML's parser called it an
    invalid statement at line 1 (the CSV readers already skipped it)."""
    original = SYSTEM_FILES[0]
    system = load_system(original)
    text = original.read_text() if suffix == ".toml" else json.dumps(system.model_dump(mode="json"))
    marked = tmp_path / f"marked{suffix}"
    marked.write_text("\ufeff" + text, encoding="utf-8")
    assert load_system(marked) == system


def test_a_nan_in_a_preset_is_called_not_finite(tmp_path):
    """Pydantic's own message for nan against a lower bound was 'Input should be greater than or
    equal to 1', true but not the reason."""
    text = "\n".join("peak_flops = nan" if line.startswith("peak_flops =") else line
                     for line in SYSTEM_FILES[0].read_text().splitlines())
    path = tmp_path / "nan.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"field 'peak_flops': must be a finite number, got nan$"):
        load_system(path)


def test_list_presets_sorted_and_complete():
    assert list_models() == sorted(p.stem for p in MODEL_FILES)
    assert list_systems() == sorted(p.stem for p in SYSTEM_FILES)
    assert {"study", "gpt3-175b", "llama3-8b", "llama3-70b"} <= set(list_models())
    assert {"dgx-h100", "dgx-a100", *GRID} <= set(list_systems())


def test_study_grid_files_exist():
    for name in GRID:
        assert (REPO / "configs" / f"{name}.toml").is_file(), name


def test_mid_mid_matches_the_paper():
    system = load_system("mid-mid")
    assert system.peak_flops == 1e15
    assert system.memory_bandwidth_bytes_per_s == 3.35e12
    assert system.memory_latency_s == 50e-9
    assert system.intra_node == system.inter_node == LinkConfig(
        bandwidth_bytes_per_s=50e9, latency_s=500e-9)
    assert system.memory_capacity_bytes == 80 * 2**30
    assert system.compute_efficiency == system.memory_efficiency == 1.0


def _close(a: float, b: float) -> bool:
    # "Exactly" x10 up to the rounding of the decimal literals in the files (1 ulp).
    return math.isclose(a, b, rel_tol=1e-12)


@pytest.mark.parametrize("compute", LEVELS)
@pytest.mark.parametrize("network", LEVELS)
def test_grid_scaling(compute, network):
    factor = {"slow": 0.1, "mid": 1.0, "fast": 10.0}
    base = load_system("mid-mid")
    system = load_system(f"{compute}-{network}")
    c, n = factor[compute], factor[network]
    assert _close(system.peak_flops, base.peak_flops * c)
    assert _close(system.memory_bandwidth_bytes_per_s, base.memory_bandwidth_bytes_per_s * c)
    assert _close(system.memory_latency_s, base.memory_latency_s / c)
    for link, base_link in ((system.intra_node, base.intra_node),
                            (system.inter_node, base.inter_node)):
        assert _close(link.bandwidth_bytes_per_s, base_link.bandwidth_bytes_per_s * n)
        assert _close(link.latency_s, base_link.latency_s / n)
    # Everything else is the same across the grid.
    same = {"compute_efficiency", "compute_latency_s", "memory_efficiency", "memory_capacity_bytes",
            "devices_per_node", "overlap_comm_compute", "bytes_per_param_state"}
    for field in same:
        assert getattr(system, field) == getattr(base, field), field
    assert system.intra_node == system.inter_node


def test_study_model_matches_the_paper():
    model = load_model("study")
    assert (model.num_layers, model.hidden_size, model.num_attention_heads, model.seq_length) == (
        128, 4096, 80, 4096)
    assert model.activation == "gelu"
    assert model.global_batch_size == 256
    assert model.ffn_hidden_size == 4 * 4096


# --- defaults and validation ----------------------------------------------------------------------


def test_model_defaults():
    model = ModelConfig(name="m", num_layers=2, hidden_size=64, num_attention_heads=8,
                        vocab_size=100, seq_length=16)
    assert model.ffn_hidden_size == 256
    assert model.num_kv_heads == 8
    assert model.global_batch_size == 256
    assert model.bytes_per_element == 2
    assert model.activation == "gelu"
    assert model.tie_embeddings is False
    assert model.ffn_matrices == 2


def test_models_are_frozen():
    model = load_model("study")
    with pytest.raises(ValidationError):
        model.num_layers = 3  # type: ignore[misc]


def test_kv_heads_must_divide_heads():
    with pytest.raises(ValidationError, match="num_kv_heads"):
        ModelConfig(name="m", num_layers=2, hidden_size=64, num_attention_heads=8, num_kv_heads=3,
                    vocab_size=100, seq_length=16)


def test_system_defaults(tmp_path):
    system = load_system(_write(tmp_path, "tiny.toml", VALID_SYSTEM))
    assert system.compute_efficiency == 1.0
    assert system.memory_efficiency == 1.0
    assert system.compute_latency_s == 0.0
    assert system.memory_latency_s == 0.0
    assert system.devices_per_node == 8
    assert system.overlap_comm_compute is True
    assert system.bytes_per_param_state == 16.0
    assert system.description == ""


def test_json_files_load(tmp_path):
    model = load_model(_write(tmp_path, "m.json", json.dumps(
        {"num_layers": 2, "hidden_size": 8, "num_attention_heads": 2, "vocab_size": 10,
         "seq_length": 4})))
    assert model.name == "m"  # name defaults to the file stem
    assert model.hidden_size == 8


def test_config_objects_pass_through():
    model = load_model("study")
    system = load_system("mid-mid")
    assert load_model(model) is model
    assert load_system(system) is system


# --- error messages -------------------------------------------------------------------------------


def _error(loader, path) -> str:
    with pytest.raises(ConfigError) as info:
        loader(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unknown_key(tmp_path):
    path = _write(tmp_path, "bad.toml", VALID_SYSTEM.replace("peak_flops", "peak_flop"))
    message = _error(load_system, path)
    assert "bad.toml" in message
    assert "unknown field 'peak_flop'; did you mean 'peak_flops'?" in message
    assert "missing field 'peak_flops'" in message
    nested = _write(tmp_path, "links.toml", VALID_SYSTEM.replace("latency_s", "latency"))  # inside the link tables
    assert "unknown field 'intra_node.latency'; did you mean 'latency_s'?" in _error(load_system, nested)


def test_missing_key(tmp_path):
    path = _write(tmp_path, "bad.toml", VALID_MODEL.replace("hidden_size = 64\n", ""))
    message = _error(load_model, path)
    assert "bad.toml" in message
    assert "missing field 'hidden_size'" in message


def test_negative_bandwidth(tmp_path):
    text = VALID_SYSTEM.replace("bandwidth_bytes_per_s = 5e10", "bandwidth_bytes_per_s = -5e10")
    message = _error(load_system, _write(tmp_path, "bad.toml", text))
    assert "bad.toml" in message
    assert "field 'inter_node.bandwidth_bytes_per_s': must be at least 1e+06 bytes/s, got -5e+10" in message


def test_zero_peak_flops(tmp_path):
    text = VALID_SYSTEM.replace("peak_flops = 1.0e15", "peak_flops = 0")
    message = _error(load_system, _write(tmp_path, "foo.toml", text))
    assert message.endswith("foo.toml: field 'peak_flops': must be at least 1e+09 FLOP/s, got 0 (a file gives FLOP/s: 989e12 "
                            "for 989 TFLOP/s)")


def test_efficiency_above_one(tmp_path):
    text = VALID_SYSTEM + "compute_efficiency = 1.5\n"
    # appended after a table header, so it belongs to [inter_node]: an unknown field there
    message = _error(load_system, _write(tmp_path, "bad.toml", text))
    assert "unknown field 'inter_node.compute_efficiency'" in message
    text = "compute_efficiency = 1.5\n" + VALID_SYSTEM
    message = _error(load_system, _write(tmp_path, "bad.toml", text))
    assert "field 'compute_efficiency'" in message


def test_bad_activation_and_heads(tmp_path):
    bad = _write(tmp_path, "bad.toml", VALID_MODEL + 'activation = "relu"\n')
    message = _error(load_model, bad)
    assert "field 'activation'" in message
    message = _error(load_model, _write(tmp_path, "bad.toml", VALID_MODEL + "num_kv_heads = 3\n"))
    assert "num_kv_heads (3) must divide num_attention_heads (4)" in message
    # more heads than dimensions (99,999 heads of 4,096) was accepted, its a·s² attention tensors
    # priced as if real; 64 heads of 64 dimensions (one each) stay a model
    wide = VALID_MODEL.replace("num_attention_heads = 4", "num_attention_heads = 65")
    message = _error(load_model, _write(tmp_path, "bad.toml", wide))
    assert "num_attention_heads (65) must be at most hidden_size (64): each head needs at least one dimension" in message
    assert load_model(_write(tmp_path, "ok.toml", wide.replace("= 65", "= 64"))).num_attention_heads == 64


def test_syntax_errors_are_one_line(tmp_path):
    message = _error(load_model, _write(tmp_path, "bad.toml", "num_layers = = 3\n"))
    assert "bad.toml" in message and "TOML" in message
    message = _error(load_model, _write(tmp_path, "bad.json", "{not json"))
    assert "bad.json" in message and "JSON" in message
    message = _error(load_model, _write(tmp_path, "list.json", "[1, 2]"))
    assert "list.json" in message


def test_unknown_preset():
    with pytest.raises(ConfigError) as info:
        load_model("xyz")
    message = str(info.value)
    assert message.startswith("unknown model preset 'xyz' (known: ")
    assert "study" in message
    with pytest.raises(ConfigError, match="unknown system preset 'nope'.*mid-mid"):
        load_system("nope")


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_system(tmp_path / "absent.toml")


def test_files_are_strictly_typed(tmp_path):
    message = _error(load_model, _write(tmp_path, "bad.toml",
                                        VALID_MODEL.replace("num_layers = 4", 'num_layers = "4"')))
    assert "field 'num_layers'" in message
    message = _error(load_system, _write(tmp_path, "bad.toml",
                                         "overlap_comm_compute = 1\n" + VALID_SYSTEM))
    assert "field 'overlap_comm_compute'" in message


@pytest.mark.parametrize(
    "old, new, field",
    [
        ("latency_s = 1e-6", "latency_s = inf", "intra_node.latency_s"),
        ("peak_flops = 1.0e15", "peak_flops = inf", "peak_flops"),
        ("memory_capacity_bytes = 8.0e10", "memory_capacity_bytes = +inf", "memory_capacity_bytes"),
        ("bandwidth_bytes_per_s = 5e10", "bandwidth_bytes_per_s = inf", "inter_node.bandwidth_bytes_per_s"),
        ("latency_s = 5e-6", "latency_s = nan", "inter_node.latency_s"),
    ],
)
def test_non_finite_numbers_in_a_system_file_are_refused(tmp_path, old, new, field):
    message = _error(load_system, _write(tmp_path, "inf.toml", VALID_SYSTEM.replace(old, new)))
    assert f"inf.toml: field '{field}'" in message and "\n" not in message


def test_non_finite_numbers_in_a_json_file_are_refused(tmp_path):
    data = json.loads(json.dumps({"name": "j", "peak_flops": 1e15, "memory_bandwidth_bytes_per_s": 3e12,
                                  "memory_capacity_bytes": 8e10, "compute_latency_s": 0.0,
                                  "intra_node": {"bandwidth_bytes_per_s": 1e11}, "inter_node": {"bandwidth_bytes_per_s": 1e10}}))
    data["compute_latency_s"] = math.inf
    message = _error(load_system, _write(tmp_path, "inf.json", json.dumps(data)))  # json writes Infinity
    assert "field 'compute_latency_s': must be a finite number, got inf" in message


def test_python_objects_may_use_an_infinite_bandwidth():
    # unit mode: a link that costs only its latency (ppopt.solve.instance.unit_system)
    assert LinkConfig(bandwidth_bytes_per_s=math.inf, latency_s=1.0).bandwidth_bytes_per_s == math.inf


def test_a_directory_is_not_a_config_file(tmp_path):
    with pytest.raises(ConfigError, match="is a directory, not a system file"):
        load_system(tmp_path)


def test_devices_per_node_has_an_upper_bound(tmp_path):
    """10^40 was accepted (every other count of a system has a bound): 2^40 + 1 is refused; the study
    presets' 10^6 stays valid."""
    from ppopt.config import load_system
    from ppopt.errors import ConfigError

    text = (REPO / "configs" / "dgx-a100.toml").read_text()
    path = tmp_path / "huge.toml"
    path.write_text(text.replace("devices_per_node = 8", f"devices_per_node = {2**40 + 1}", 1))
    with pytest.raises(ConfigError, match="field 'devices_per_node': Input should be less than or equal to 1099511627776"):
        load_system(path)
    assert load_system(REPO / "configs" / "mid-mid.toml").devices_per_node == 1_000_000


def test_an_unknown_key_is_named_even_when_it_reads_like_a_type(tmp_path):
    """Pydantic names a union's branches by type ('int', 'list[...]'); the spec files' filter of those
    names must not drop a model file's own unknown keys called 'list' or 'a[0]' ("unknown field ''")."""
    path = tmp_path / "m.toml"
    path.write_text('name = "m"\nnum_layers = 2\nhidden_size = 64\nnum_attention_heads = 2\nvocab_size = 100\n'
                    'seq_length = 16\nlist = 1\n"a[0]" = 3\n')
    with pytest.raises(ConfigError) as error:
        load_model(path)
    assert str(error.value).endswith("unknown field 'list'; unknown field 'a[0]'")


def test_a_number_given_as_text_in_a_file_says_to_give_it_unquoted(tmp_path):
    """`memory_capacity_bytes = "40GB"` (as --memory-limit takes it) was refused with pydantic's
    words alone; the message names the text and says what a file wants."""
    text = (REPO / "configs" / "dgx-h100.toml").read_text()
    path = tmp_path / "mine.toml"
    path.write_text(re.sub(r"(?m)^memory_capacity_bytes = .*$", 'memory_capacity_bytes = "40GB"', text))
    with pytest.raises(ConfigError) as error:
        load_system(path)
    assert "field 'memory_capacity_bytes': Input should be a valid number, got the text '40GB': give the number unquoted" \
        in str(error.value)


@pytest.mark.parametrize("value, said", [
    (3, "field 'intra_node': must be a table of its own keys ([intra_node] in TOML, an object in JSON), got the number 3"),
    ("fast", "field 'intra_node': must be a table of its own keys ([intra_node] in TOML, an object in JSON), got the text 'fast'"),
])
def test_a_link_that_is_not_a_table_is_worded_without_pydantic_s_class_names(tmp_path, value, said):
    """It said "Input should be a valid dictionary or instance of LinkConfig", a class of the code."""
    system = tomllib.loads((REPO / "configs" / "dgx-a100.toml").read_text())
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({**system, "intra_node": value}))
    with pytest.raises(ConfigError) as error:
        load_system(path)
    assert error.value.reason.endswith(said) and "LinkConfig" not in str(error.value)


def test_a_json_null_is_named_as_such(tmp_path):
    system = tomllib.loads((REPO / "configs" / "dgx-a100.toml").read_text())
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({**system, "devices_per_node": None}))
    with pytest.raises(ConfigError) as error:
        load_system(path)
    assert error.value.reason.endswith("field 'devices_per_node': Input should be a valid integer, got null")


def test_a_mapping_is_checked_as_strictly_as_a_file():
    """A mapping took "32" as 32 and True as 1 layer (then "4 stages exceed the model's 1 layers"),
    where a file refuses both; numpy's numbers (an array's elements) are still numbers."""
    import numpy as np

    fields = load_model("llama3-8b").model_dump()
    for slip in ("32", True):
        with pytest.raises(ConfigError, match="field 'num_layers': Input should be a valid integer"):
            load_model({**fields, "num_layers": slip})
    assert load_model({**fields, "num_layers": np.int64(16)}).num_layers == 16
    system = load_system("dgx-h100").model_dump()
    with pytest.raises(ConfigError, match="field 'peak_flops'"):
        load_system({**system, "peak_flops": "1e15"})
    assert load_system({**system, "peak_flops": np.float64(2e15)}).peak_flops == 2e15
