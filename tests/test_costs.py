"""Cost model: FLOPs, activations, partitions, roofline and communication formulas."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from ppopt.config import LinkConfig, ModelConfig, SystemConfig, load_model, load_system
from ppopt.costs import (
    Costs,
    activation_bytes_per_layer,
    allreduce_time_s,
    layer_forward_flops,
    layer_linear_params,
    layer_param_count,
    link_between,
    logits_forward_flops,
    microbatch_size,
    op_time_s,
    partition_layers,
    stage_costs,
    transfer_time_s,
    unit_costs,
)
from ppopt.errors import ConfigError
from ppopt.units import UnitCosts


def gpt(**overrides) -> ModelConfig:
    fields = dict(name="gpt", num_layers=8, hidden_size=256, num_attention_heads=8,
                  vocab_size=1000, seq_length=128, global_batch_size=16)
    fields.update(overrides)
    return ModelConfig(**fields)


def system(**overrides) -> SystemConfig:
    link = LinkConfig(bandwidth_bytes_per_s=1e10, latency_s=1e-6)
    fields = dict(name="sys", peak_flops=1e12, memory_bandwidth_bytes_per_s=1e11,
                  memory_capacity_bytes=1e10, intra_node=link, inter_node=link)
    fields.update(overrides)
    return SystemConfig(**fields)


# --- FLOPs and parameters -------------------------------------------------------------------------


@given(b=st.integers(1, 64), s=st.integers(1, 8192), h=st.integers(1, 16384),
       heads=st.integers(1, 128))
def test_standard_gpt_forward_flops_are_exact(b, s, h, heads):
    assume(heads <= h)  # a model has at most one head per hidden dimension
    model = gpt(hidden_size=h, seq_length=s, num_attention_heads=heads)
    assert layer_forward_flops(model, b) == 24 * b * s * h * h + 4 * b * s * s * h


def test_study_layer_flops():
    model = load_model("study")
    b, s, h = 2, 4096, 4096
    assert layer_forward_flops(model, b) == 24 * b * s * h**2 + 4 * b * s**2 * h


def test_standard_gpt_params_per_layer():
    h = 256
    assert layer_linear_params(gpt(hidden_size=h)) == 12 * h * h
    assert layer_param_count(gpt(hidden_size=h)) == 12 * h * h + 13 * h


def test_gqa_swiglu_flops():
    # Llama 3 8B block: Q and O (h x h), K and V (h x h/4), gate/up/down (h x f).
    model = load_model("llama3-8b")
    h, f, b, s = 4096, 14336, 1, 8192
    linear = 2 * h * h + 2 * h * (h // 4) + 3 * h * f
    assert layer_linear_params(model) == linear
    assert layer_forward_flops(model, b) == 2 * b * s * linear + 4 * b * s * s * h


@pytest.mark.parametrize("name, expected", [("llama3-8b", 8.03e9), ("llama3-70b", 70.55e9),
                                            ("gpt3-175b", 174.6e9)])
def test_preset_parameter_counts(name, expected):
    model = load_model(name)
    costs = stage_costs(model, load_system("mid-mid"), [model.num_layers], 1,
                        global_batch=1)
    assert costs.stages[0].param_count == pytest.approx(expected, rel=2e-3)


def test_backward_is_twice_forward_in_flops():
    # With no latencies and a compute-bound system, durations are FLOPs / peak.
    model = gpt()
    fast_memory = system(memory_bandwidth_bytes_per_s=1e30)
    costs = stage_costs(model, fast_memory, [2, 2, 2, 2], microbatches=4)
    b = costs.microbatch_size
    core = 4 * b * model.seq_length**2 * model.hidden_size
    for index, stage in enumerate(costs.stages):
        flops = 2 * layer_forward_flops(model, b)
        if index == 3:
            flops += logits_forward_flops(model, b)
        assert stage.forward_s == pytest.approx(flops / 1e12)
        assert stage.backward_s == pytest.approx(2 * stage.forward_s)
        assert stage.backward_s == stage.input_grad_s + stage.weight_grad_s
        # The attention core's backward belongs to I.
        assert stage.input_grad_s - stage.weight_grad_s == pytest.approx(2 * 2 * core / 1e12)


# --- activations, messages, persistent memory -----------------------------------------------------


def test_activation_bytes_korthikanti_hand_case():
    # s=128, b=2, h=256, a=8: s·b·h·(34 + 5·a·s/h) = 65536 · (34 + 20) = 3,538,944 bytes.
    model = gpt()
    assert activation_bytes_per_layer(model, 2) == 3_538_944
    assert activation_bytes_per_layer(model, 2) == 128 * 2 * 256 * (34 + 5 * 8 * 128 / 256)


@given(b=st.integers(1, 16), s=st.integers(1, 4096), h=st.integers(1, 8192),
       heads=st.integers(1, 128))
def test_activation_bytes_korthikanti_general(b, s, h, heads):
    assume(heads <= h)  # a model has at most one head per hidden dimension
    model = gpt(hidden_size=h, seq_length=s, num_attention_heads=heads)
    expected = s * b * h * 34 + 5 * heads * s * s * b  # = s·b·h·(34 + 5·a·s/h)
    assert activation_bytes_per_layer(model, b) == expected


def test_stage_memory_and_messages():
    model = gpt()
    sys_ = system()
    costs = stage_costs(model, sys_, [3, 5], microbatches=8)
    b = 2
    act = activation_bytes_per_layer(model, b)
    first, last = costs.stages
    assert costs.microbatch_size == b and costs.microbatches == 8
    assert first.activation_bytes == 3 * act
    assert last.activation_bytes == 5 * act + b * 128 * 1000 * 4  # + the loss's softmax in fp32 (Korthikanti et al. 2022, §4.3)
    per_layer = layer_param_count(model)
    assert first.param_count == 3 * per_layer + 1000 * 256
    assert last.param_count == 5 * per_layer + 1000 * 256
    for stage in costs.stages:
        assert stage.send_bytes == b * 128 * 256 * 2
        assert stage.persistent_bytes == stage.param_count * 16
        assert stage.gradient_bytes == stage.param_count * 2


def test_tied_embeddings_copy_on_the_last_stage():
    # Megatron-LM keeps a synchronised copy of a tied word embedding on the last pipeline stage
    # (its output layer): 4 blocks + V·h = 4 · 789,760 + 1000 · 256 on stage 1; stage 0 holds the
    # embedding too. With one stage the matrix is held once.
    costs = stage_costs(gpt(tie_embeddings=True), system(), [4, 4], microbatches=4)
    assert costs.stages[1].param_count == 4 * layer_param_count(gpt()) + 1000 * 256
    assert costs.stages[0].param_count == 4 * layer_param_count(gpt()) + 1000 * 256
    single = stage_costs(gpt(tie_embeddings=True), system(), [8], microbatches=4)
    assert single.stages[0].param_count == 8 * layer_param_count(gpt()) + 1000 * 256


def test_stage_costs_rejects_bad_partitions():
    with pytest.raises(ConfigError, match="has 7 layers"):
        stage_costs(gpt(), system(), [3, 4], microbatches=4)
    with pytest.raises(ConfigError, match="not divisible"):
        stage_costs(gpt(), system(), [4, 4], microbatches=3)


# --- partitions -----------------------------------------------------------------------------------


@given(layers=st.integers(1, 500), data=st.data())
def test_even_partition(layers, data):
    stages = data.draw(st.integers(1, layers))
    parts = partition_layers(layers, stages)
    assert len(parts) == stages
    assert sum(parts) == layers
    assert max(parts) - min(parts) <= 1
    assert list(parts) == sorted(parts, reverse=True)  # extra layers go to the earliest stages


def test_even_partition_examples():
    assert partition_layers(10, 3) == (4, 3, 3)
    assert partition_layers(128, 8) == (16,) * 8


def test_weighted_partition_one_to_two():
    assert partition_layers(128, 2, [1, 2]) == (43, 85)
    assert partition_layers(129, 2, [1, 2]) == (43, 86)


def test_a_stage_rounded_to_no_layer_takes_one_from_the_latest_largest():
    """4 layers by weights 1:10:10: exact shares 0.19, 1.90, 1.90 round to 0, 2, 2; stage 0 needs a
    layer, and of the two largest stages the later one gives it: (1, 2, 1)."""
    assert partition_layers(4, 3, [1, 10, 10]) == (1, 2, 1)


def test_a_tied_embedding_is_counted_once():
    """The output projection is the word embedding's own V·h matrix unless tied: the whole model
    counts V·h = 1,000 × 256 = 256,000 parameters fewer when tied."""
    from ppopt.costs import model_param_count

    untied, tied = gpt(tie_embeddings=False), gpt(tie_embeddings=True)
    blocks = 8 * layer_param_count(untied)
    assert model_param_count(untied) == blocks + 2 * 256_000
    assert model_param_count(tied) == blocks + 256_000


@given(layers=st.integers(1, 300),
       weights=st.lists(st.floats(0.01, 100, allow_nan=False), min_size=1, max_size=16))
def test_weighted_partition_invariants(layers, weights):
    if len(weights) > layers:
        with pytest.raises(ConfigError):
            partition_layers(layers, len(weights), weights)
        return
    parts = partition_layers(layers, len(weights), weights)
    assert sum(parts) == layers
    assert min(parts) >= 1
    total = sum(weights)
    # Largest-remainder rounding is within one layer of the exact share unless the >= 1 rule
    # had to move layers.
    if all(layers * w / total >= 1 for w in weights):
        for count, weight in zip(parts, weights):
            assert abs(count - layers * weight / total) < 1


def test_partition_errors():
    with pytest.raises(ConfigError, match="cannot split 3 layers over 4 stages"):
        partition_layers(3, 4)
    with pytest.raises(ConfigError):
        partition_layers(8, 2, [1])
    with pytest.raises(ConfigError):
        partition_layers(8, 2, [1, 0])


# --- microbatch size ------------------------------------------------------------------------------


def test_microbatch_size():
    model = gpt(global_batch_size=256)
    assert microbatch_size(model, 8) == 32
    assert microbatch_size(model, 256) == 1
    assert microbatch_size(model, 4, global_batch=12) == 3


def test_microbatch_size_errors():
    model = gpt(global_batch_size=256)
    with pytest.raises(ConfigError, match="256.*not divisible by 3"):
        microbatch_size(model, 3)
    with pytest.raises(ConfigError, match="512 microbatches exceed the global batch of 256"):
        microbatch_size(model, 512)
    with pytest.raises(ConfigError):
        microbatch_size(model, 0)


# --- roofline -------------------------------------------------------------------------------------


def test_roofline_picks_the_max():
    sys_ = system(peak_flops=1e12, compute_efficiency=0.5, compute_latency_s=1e-6,
                  memory_bandwidth_bytes_per_s=1e11, memory_efficiency=0.8, memory_latency_s=2e-6)
    compute_bound = op_time_s(1e12, 1e6, sys_)
    assert compute_bound == pytest.approx(1e12 / 0.5e12 + 1e-6)
    memory_bound = op_time_s(1e6, 1e12, sys_)
    assert memory_bound == pytest.approx(1e12 / 0.8e11 + 2e-6)
    assert op_time_s(0, 0, sys_) == 0.0


@given(flops=st.floats(0, 1e18), moved=st.floats(0, 1e15))
def test_roofline_is_at_least_each_term(flops, moved):
    sys_ = system(compute_latency_s=1e-6, memory_latency_s=1e-7)
    t = op_time_s(flops, moved, sys_)
    if flops or moved:
        assert t >= flops / 1e12 + 1e-6
        assert t >= moved / 1e11 + 1e-7


# --- communication --------------------------------------------------------------------------------


def test_hockney():
    link = LinkConfig(bandwidth_bytes_per_s=50e9, latency_s=500e-9)
    assert transfer_time_s(100e6, link) == pytest.approx(100e6 / 50e9 + 500e-9)
    assert transfer_time_s(0, link) == 0.0
    with pytest.raises(ValueError):
        transfer_time_s(-1, link)


def test_allreduce():
    link = LinkConfig(bandwidth_bytes_per_s=50e9, latency_s=500e-9)
    assert allreduce_time_s(1e9, link) == pytest.approx(1e9 / 50e9 + 2 * 500e-9)
    assert allreduce_time_s(1e9, link, participants=4) == pytest.approx(
        2 * 3 / 4 * 1e9 / 50e9 + 6 * 500e-9)
    assert allreduce_time_s(1e9, link, participants=1) == 0.0
    assert allreduce_time_s(0, link) == 0.0


def test_link_between_on_dgx_h100():
    sys_ = load_system("dgx-h100")
    assert link_between(sys_, 0, 7) == sys_.intra_node
    assert link_between(sys_, 7, 8) == sys_.inter_node
    assert link_between(sys_, 8, 15) == sys_.intra_node
    assert sys_.intra_node.bandwidth_bytes_per_s == 450e9
    assert sys_.inter_node.bandwidth_bytes_per_s == 50e9


def test_study_grid_is_one_node():
    sys_ = load_system("mid-mid")
    assert link_between(sys_, 0, 255) == sys_.intra_node == sys_.inter_node


# --- unit mode ------------------------------------------------------------------------------------


def test_unit_costs():
    costs = unit_costs(4)
    assert isinstance(costs, Costs) and len(costs.stages) == 4
    for stage in costs.stages:
        assert (stage.forward_s, stage.backward_s) == (1.0, 2.0)
        assert (stage.input_grad_s, stage.weight_grad_s) == (1.0, 1.0)
        assert (stage.activation_bytes, stage.persistent_bytes, stage.send_bytes) == (1.0, 0.0, 0.0)
    split = unit_costs(2, UnitCosts(forward=1, backward=1, weight=0.25), microbatches=8)
    assert split.stages[0].input_grad_s == 0.75 and split.stages[0].weight_grad_s == 0.25
    assert split.microbatches == 8
    chunks = unit_costs(8, devices=4)  # two chunks per device: half a share each
    assert (chunks.stages[0].forward_s, chunks.stages[0].backward_s, chunks.stages[0].activation_bytes) == (0.5, 1.0, 0.5)
    with pytest.raises(ConfigError, match="weight: must lie between 0 and backward"):
        unit_costs(2, UnitCosts(backward=1, weight=2))


def test_realistic_stage_costs_are_finite_and_positive():
    model = load_model("llama3-8b")
    costs = stage_costs(model, load_system("dgx-h100"), partition_layers(32, 4), microbatches=64)
    for stage in costs.stages:
        for value in (stage.forward_s, stage.input_grad_s, stage.weight_grad_s,
                      stage.activation_bytes, stage.persistent_bytes, stage.send_bytes):
            assert math.isfinite(value) and value > 0


def test_llama_activations_have_no_dropout_masks():
    # Korthikanti et al. 2022's item list per block, in units of s·b·h, for Llama 3 70B (e = 2,
    # K and V of width h/8, SwiGLU f = 3.5h, flash attention: no score tensors): QKV input 2,
    # Q 2, K 0.25, V 0.25, output-projection input 2, MLP input 2, gate, up and their product
    # 3·2·3.5 = 21, two norm inputs 4: 33.5. With dropout its two 1-byte masks add 2: 35.5.
    model = load_model("llama3-70b")
    sbh = model.seq_length * model.hidden_size
    assert not model.dropout
    assert activation_bytes_per_layer(model, 1) == 33.5 * sbh
    assert activation_bytes_per_layer(model.model_copy(update={"dropout": True}), 1) == 35.5 * sbh
    assert load_model("gpt3-175b").dropout


def test_scores_without_dropout_keep_the_softmax_output_only():
    # Without flash attention and without dropout a block keeps 32·sbh of its s·b·h items (34 minus
    # the two 1-byte masks) and only the softmax output of the scores, e·a·s²·b = 2·a·s²·b (with
    # dropout also the mask and dropout output: 5·a·s²·b).
    model = gpt(dropout=False)
    s, h, a = model.seq_length, model.hidden_size, model.num_attention_heads
    assert activation_bytes_per_layer(model, 1) == s * h * 32 + 2 * a * s * s
    assert activation_bytes_per_layer(gpt(), 1) == s * h * 34 + 5 * a * s * s


def test_learned_position_embeddings_on_the_first_stage():
    # GPT-3 175B: s·h = 2048 · 12288 = 25,165,824 position parameters, on stage 0 only.
    model = load_model("gpt3-175b")
    assert model.learned_position_embeddings and not load_model("llama3-70b").learned_position_embeddings
    without = model.model_copy(update={"learned_position_embeddings": False})
    split = [48, 48]
    with_pos = stage_costs(model, load_system("mid-mid"), split, 1, global_batch=1)
    no_pos = stage_costs(without, load_system("mid-mid"), split, 1, global_batch=1)
    assert with_pos.stages[0].param_count - no_pos.stages[0].param_count == 25_165_824
    assert with_pos.stages[1].param_count == no_pos.stages[1].param_count


def test_stage_costs_follow_the_systems_op_time_rule():
    # One stage of the 8-layer gpt (h = 256, s = 128, a = 8, V = 1000, f = 4h), b = 4 (16 / 4 microbatches).
    # Per block: F FLOPs 24·b·s·h² + 4·b·s²·h = 805,306,368 + 67,108,864 = 872,415,232; I = F + 4·b·s²·h,
    # W = F - 4·b·s²·h; activations s·b·h·(34 + 5·a·s/h) = 131,072·54 = 7,077,888 bytes; weights
    # (12h² + 13h)·2 = 1,579,520 bytes. Logits: 2·b·s·h·V = 262,144,000 FLOPs, s·b·V·2 = 1,024,000
    # bytes kept; output matrix V·h·2 = 512,000 bytes; embedding rows b·s·h·2 = 262,144 bytes.
    f_flops = 8 * 872_415_232 + 262_144_000
    acts, weights, logits, rows = 8 * 7_077_888, 8 * 1_579_520 + 512_000, 1_024_000, 262_144
    core = 8 * 4 * 4 * 128 * 128 * 256
    # additive: F = FLOPs/peak + (activations + 2·logits (written, read by the loss) + rows)/BW + L_c;
    # W pays no latency (it runs inside B's kernel sequence) and moves activations + logits + rows
    additive = system(op_time_rule="additive", compute_latency_s=1e-3)
    stage = stage_costs(gpt(), additive, [8], microbatches=4).stages[0]
    assert stage.forward_s == pytest.approx(f_flops / 1e12 + (acts + 2 * logits + rows) / 1e11 + 1e-3)
    assert stage.weight_grad_s == pytest.approx((f_flops - core) / 1e12 + (acts + logits + rows) / 1e11)
    assert stage.input_grad_s == pytest.approx((f_flops + core) / 1e12 + (acts + logits) / 1e11 + 1e-3)
    # roofline: the larger of compute and memory (weights counted), each op paying its latency
    roofline = system(compute_latency_s=1e-3)
    stage = stage_costs(gpt(), roofline, [8], microbatches=4).stages[0]
    assert stage.forward_s == pytest.approx(max(f_flops / 1e12 + 1e-3, (acts + 2 * logits + rows + weights) / 1e11))
    assert stage.weight_grad_s == pytest.approx(max((f_flops - core) / 1e12 + 1e-3, (acts + logits + rows + weights) / 1e11))
