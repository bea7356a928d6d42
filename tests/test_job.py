"""The 3D job model's formulas against hand-computed values (tensor, data parallelism, recomputation)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ppopt.config import LinkConfig, ModelConfig, SystemConfig, load_model, load_system
from ppopt.costs import elementwise_traffic_bytes, stored_activation_bytes_per_layer
from ppopt.errors import ConfigError
from ppopt.job import Job, Work, evaluate_job, job_costs, job_work, pipeline_system, ring_allreduce_work, work_time_s

GPT = ModelConfig(name="gpt-1k", num_layers=4, hidden_size=1024, num_attention_heads=16, vocab_size=50257,
                  seq_length=1024, global_batch_size=16, tie_embeddings=True)
SYSTEM = SystemConfig(
    name="toy", peak_flops=100e12, memory_bandwidth_bytes_per_s=1e12, memory_capacity_bytes=80e9, devices_per_node=8,
    intra_node=LinkConfig(bandwidth_bytes_per_s=100e9, latency_s=1e-6),
    inter_node=LinkConfig(bandwidth_bytes_per_s=40e9, latency_s=5e-6), inter_node_per="node",
)
SBH = 1024 * 1 * 1024  # s·b·h for b = 1


def test_stored_activations_follow_korthikanti_table_2():
    # sbh·(34 + 5as/h) with 5·16·1024/1024 = 80: 114·sbh
    assert stored_activation_bytes_per_layer(GPT, 1) == 114 * SBH
    # t = 2: sbh·(10 + 24/2 + 80/2) = 62·sbh; with sequence parallelism sbh·(34/2 + 80/2) = 57·sbh
    assert stored_activation_bytes_per_layer(GPT, 1, tp=2) == 62 * SBH
    assert stored_activation_bytes_per_layer(GPT, 1, tp=2, sequence_parallel=True) == 57 * SBH
    # selective drops the score term: sbh·(10 + 12) = 22·sbh; full keeps the block input 2·sbh (/t with SP)
    assert stored_activation_bytes_per_layer(GPT, 1, tp=2, recompute="selective") == 22 * SBH
    assert stored_activation_bytes_per_layer(GPT, 1, tp=2, recompute="full") == 2 * SBH
    assert stored_activation_bytes_per_layer(GPT, 1, tp=2, sequence_parallel=True, recompute="full") == SBH
    with pytest.raises(ConfigError, match="recompute"):
        stored_activation_bytes_per_layer(GPT, 1, recompute="some")


def test_tensor_parallel_block_work():
    # One block, b = 1, t = 4: FLOPs (24·s·h² + 4·s²·h)/4 = (24·2^30 + 4·2^30)/4 = 7·2^30;
    # two all-reduces of s·h·e = 2 MiB in NVLink: 2 · 2·(3/4)·2 MiB = 6 MiB, 2 · 2·3 = 12 hops;
    # plus the all-gather of the received activation (Megatron's scatter/gather: each rank is sent
    # 2 MiB / 4 = 0.5 MiB): (3/4)·2 MiB = 1.5 MiB, 3 hops.
    job = Job(GPT, SYSTEM, tp=4, pp=4, dp=1, micro_batch=1)  # one block per stage
    work = job_work(job)
    forward = work.forward[1]  # a middle stage: no embedding, no logits
    assert forward.gemm_flops == 7 * 2**30
    assert forward.intra_bytes == 7.5 * 2**20
    assert forward.intra_hops == 15
    assert forward.inter_bytes == 0
    assert work.send_bytes == 2**19
    assert work.forward[0].intra_bytes == 9 * 2**20  # no gather; the embedding's all-reduce, 2·(3/4)·2 MiB
    # with sequence parallelism the activation is already split: no all-gather
    assert job_work(Job(GPT, SYSTEM, tp=4, pp=4, micro_batch=1, sequence_parallel=True)).forward[1].intra_bytes == 6 * 2**20
    # the ring formula itself: 2(n-1)/n·bytes and 2(n-1) latencies
    ring = ring_allreduce_work(2**21, 4, 4, 1, SYSTEM)
    assert work_time_s(ring, SYSTEM) == pytest.approx(1.5 * 2**21 / 100e9 + 6 * 1e-6)


def test_tensor_parallelism_beyond_a_node_uses_the_whole_nic():
    # t = 16 spans two nodes; the node's 8 GPUs are all in that ring: the ring gets the node's NIC.
    ring = ring_allreduce_work(1e6, 16, 16, 1, SYSTEM)
    assert ring.inter_bytes == pytest.approx(2 * 15 / 16 * 1e6)
    assert ring.inter_hops == 30


def test_data_parallel_gradient_allreduce():
    # Stage gradients G bytes; d = 4 with t = 2 spans 8 GPUs: NVLink ring, 2·(3/4)·G.
    g = 1e9
    assert ring_allreduce_work(g, 4, 8, 2, SYSTEM).intra_bytes == pytest.approx(1.5 * g)
    # d = 8 with t = 2 spans 16 GPUs: 4 members per node, 2 rings share the node's NIC: 2·(7/8)·G·2,
    # as the bytes of a ring with some but not all of a node's GPUs
    across = ring_allreduce_work(g, 8, 16, 2, SYSTEM)
    assert across.partial_ring_bytes == pytest.approx(2 * 7 / 8 * g * 2) and across.inter_bytes == 0
    # one NIC per GPU: the ring's channels spread over the NICs of its 4 members on the node, so its
    # inter-node hops carry 2·(7/8)·G over 4 device links: 2·(7/8)·G / 4 in one device link's bytes
    per_gpu = SYSTEM.model_copy(update={"inter_node_per": "device"})
    assert ring_allreduce_work(g, 8, 16, 2, per_gpu).partial_ring_bytes == pytest.approx(2 * 7 / 8 * g / 4)
    # the same hardware either way: a node NIC of 8 device links gives the same time as 8 NICs of one
    assert across.partial_ring_bytes / 8 == pytest.approx(ring_allreduce_work(g, 8, 16, 2, per_gpu).partial_ring_bytes)
    # and with one member per node (t = 8, d = 2 on 8-GPU nodes) a single device link, as before
    assert ring_allreduce_work(g, 2, 16, 8, per_gpu).inter_bytes == pytest.approx(2 * 1 / 2 * g)
    # in a job: d = 2, t = 1, p = 1 on one node -> the stage's fp16 gradients, 2·(1/2)·G
    job = Job(GPT, SYSTEM, tp=1, pp=1, dp=2, micro_batch=1)
    work = job_work(job)
    assert work.gradient_sync[0].intra_bytes == pytest.approx(work.param_count[0] * 2)


def test_a_ring_with_some_but_not_all_of_a_node_reaches_the_partial_ring_efficiency():
    # 1 GB over d = 4 data-parallel ranks across nodes, one NIC per node of 40 GB/s (SYSTEM).
    # t = 4: 2 members per node, 4 rings share the NIC: 2·(3/4)·1 GB·4 = 6 GB -> 150 ms at full speed,
    # 600 ms at a quarter of it; the 6 ring steps' latencies (5 µs each) add 30 µs either way.
    g, quarter = 1e9, SYSTEM.model_copy(update={"partial_ring_efficiency": 0.25})
    partial = ring_allreduce_work(g, 4, 16, 4, SYSTEM)
    assert work_time_s(partial, SYSTEM) == pytest.approx(0.15 + 30e-6)
    assert work_time_s(partial, quarter) == pytest.approx(0.6 + 30e-6)
    # t = 8 (one member per node: 8 rings, 2·(3/4)·1 GB·8 = 12 GB, 300 ms) and t = 1 (all 8 GPUs of a
    # node in one ring of d = 16: 2·(15/16)·1 GB = 1.875 GB, 46.875 ms) are whole-node patterns: the
    # efficiency leaves them alone
    for ranks, span, stride, seconds in ((4, 32, 8, 0.3), (16, 16, 1, 0.046875)):
        ring = ring_allreduce_work(g, ranks, span, stride, SYSTEM)
        assert ring.partial_ring_bytes == 0
        latencies = 2 * (ranks - 1) * 5e-6
        assert work_time_s(ring, quarter) == work_time_s(ring, SYSTEM) == pytest.approx(seconds + latencies)


def test_norms_and_row_parallel_biases_are_whole_on_every_tensor_parallel_rank():
    # GPT block, h = 1024: 12h² + 13h parameters, of which the two LayerNorms (4h) and the biases of
    # the attention output and the second MLP matrix (2h) are replicated: at t = 8 a rank holds
    # (12·1024² + 7·1024)/8 + 6·1024 = 1,572,864 + 896 + 6,144 = 1,579,904 per block.
    work = job_work(Job(GPT, SYSTEM, tp=8, pp=4, micro_batch=1))
    assert work.param_count[1] == 1_579_904  # a middle stage: one block, nothing else
    assert work.persistent_bytes[1] == 16 * 1_579_904
    # Llama-style (RMSNorm scale only, no biases): only the norms, 2h, stay whole
    llama = GPT.model_copy(update={"activation": "swiglu", "ffn_hidden_size": 2816})
    whole = job_work(Job(llama, SYSTEM, pp=4, micro_batch=1)).param_count[1]
    assert job_work(Job(llama, SYSTEM, tp=8, pp=4, micro_batch=1)).param_count[1] == (whole - 2048) / 8 + 2048


def test_the_output_layer_all_reduces_its_input_gradient_over_the_tensor_parallel_group():
    # t = 2, p = 2: two blocks per stage, b·s·h·e = 2 MiB per all-reduce, ring 2·(1/2)·2 MiB = 2 MiB.
    # The last stage's I: two all-reduces per block (4 x 2 MiB) and the output layer's (2 MiB): 10 MiB
    # (the first stage's I: 8 MiB and the all-gather of the received gradient, (1/2)·2 MiB: 9 MiB).
    work = job_work(Job(GPT, SYSTEM, tp=2, pp=2, micro_batch=1))
    assert work.input_grad[1].intra_bytes == 10 * 2**20
    assert work.input_grad[0].intra_bytes == 9 * 2**20
    # with sequence parallelism: an all-gather (1 MiB) in F and a reduce-scatter (1 MiB) in I instead
    sp = job_work(Job(GPT, SYSTEM, tp=2, pp=2, micro_batch=1, sequence_parallel=True))
    assert sp.input_grad[1].intra_bytes == 9 * 2**20
    assert sp.forward[1].intra_bytes == 9 * 2**20  # 4 x 2 MiB in the blocks, 1 MiB before the logits


def test_tied_embeddings_all_reduce_their_gradient_between_the_first_and_last_stage():
    # p = 2, t = d = 1 on one node: V·h·2 = 102,926,336 bytes each way over NVLink (100 GB/s), two
    # latencies of 1 µs: 0.00102926336 + 2e-6 s, the whole gradient synchronisation.
    tied = evaluate_job(Job(GPT, SYSTEM, pp=2, micro_batch=1))
    assert tied.gradient_sync_s == pytest.approx(VH * 2 / 100e9 + 2e-6)
    untied = evaluate_job(Job(GPT.model_copy(update={"tie_embeddings": False}), SYSTEM, pp=2, micro_batch=1))
    assert untied.gradient_sync_s == 0
    assert evaluate_job(Job(GPT, SYSTEM, pp=1, micro_batch=1)).gradient_sync_s == 0  # one copy only
    # a V shape puts stage 0 and the last stage on device 0: one device, no all-reduce
    v_shape = Job(GPT, SYSTEM, pp=2, micro_batch=1, global_batch=4, schedule="zb-v")
    assert v_shape.stages == 4 and evaluate_job(v_shape).gradient_sync_s == 0
    # it follows the data-parallel all-reduce, so overlapping that one with the backward leaves it
    # whole (d = 2: at d = 1 there is no all-reduce to overlap, and the job refuses the flag)
    overlapped = evaluate_job(Job(GPT, SYSTEM, pp=2, dp=2, micro_batch=1, overlap_gradient_sync=True))
    assert overlapped.gradient_sync_s >= VH * 2 / 100e9 + 2e-6
    with pytest.raises(ConfigError) as raised:
        Job(GPT, SYSTEM, pp=2, micro_batch=1, overlap_gradient_sync=True)
    assert raised.value.field == "overlap_gradient_sync"


def test_distributed_optimizer_shards_the_optimizer_state():
    plain = job_work(Job(GPT, SYSTEM, dp=4, micro_batch=1))
    sharded = job_work(Job(GPT, SYSTEM, dp=4, micro_batch=1, distributed_optimizer=True))
    params = plain.param_count[0]
    assert plain.persistent_bytes[0] == pytest.approx(16 * params)
    assert sharded.persistent_bytes[0] == pytest.approx((4 + 12 / 4) * params)  # 2e + (16 - 2e)/d


def test_full_recomputation_reruns_the_forward():
    # middle stage, one block: backward = 2·F GEMMs without recomputation, 3·F with full.
    none = job_work(Job(GPT, SYSTEM, tp=2, pp=4, micro_batch=1)).backward[1]
    full = job_work(Job(GPT, SYSTEM, tp=2, pp=4, micro_batch=1, recompute="full")).backward[1]
    forward = job_work(Job(GPT, SYSTEM, tp=2, pp=4, micro_batch=1)).forward[1]
    assert none.gemm_flops == 2 * forward.gemm_flops
    assert full.gemm_flops == 3 * forward.gemm_flops
    # the recomputed forward's all-reduces too (t = 2: 2 per pass of 2·(1/2)·2 MiB = 2 MiB each) and
    # one all-gather of the received gradient, (1/2)·2 MiB: 4·2 + 1 = 9 MiB (the forward: 2·2 + 1)
    assert forward.intra_bytes == 5 * 2**20
    assert full.intra_bytes == 9 * 2**20
    # selective: only the attention core (4·s²·h/t = 2·2^30) is recomputed
    selective = job_work(Job(GPT, SYSTEM, tp=2, pp=4, micro_batch=1, recompute="selective")).backward[1]
    assert selective.gemm_flops == none.gemm_flops + 2 * 2**30


def test_work_time_is_linear_in_the_parameters():
    work = Work(gemm_flops=1e12, gemm_units=2.0, memory_bytes=1e9, ops=1.0, intra_bytes=1e8, inter_bytes=4e7, intra_hops=2, inter_hops=1)
    system = SYSTEM.model_copy(update={"compute_efficiency": 0.5, "gemm_half_saturation_flops": 1e10, "compute_latency_s": 1e-4,
                                       "op_time_rule": "additive"})
    links = 1e8 / 100e9 + 4e7 / 40e9 + 2e-6 + 5e-6
    expected = (1e12 + 2 * 1e10) / 50e12 + 1e9 / 1e12 + 1e-4 + links
    assert work_time_s(work, system) == pytest.approx(expected)
    # roofline: max(compute + L_c, memory + L_m) = max(0.0204 + 1e-4, (1e9 + 3e9)/1e12 + 0) = 0.0205,
    # the operand bytes counting as memory traffic; the links add as before
    roofline = system.model_copy(update={"op_time_rule": "roofline"})
    assert work_time_s(work + Work(operand_bytes=3e9), roofline) == pytest.approx(0.0205 + links)
    assert work_time_s(work + Work(operand_bytes=30e9), roofline) == pytest.approx(31e9 / 1e12 + links)


def test_placement_of_pipeline_stages():
    # t·d = 2 on 8-GPU nodes: 4 stages per node; with one NIC per node a crossing message shares it by 2.
    job = Job(GPT, SYSTEM, tp=2, pp=4, dp=1, micro_batch=1)
    system = pipeline_system(job)
    assert system.devices_per_node == 4
    assert system.inter_node.bandwidth_bytes_per_s == 20e9


def test_job_checks_its_layout():
    with pytest.raises(ConfigError, match="micro_batch"):
        Job(GPT, SYSTEM, dp=2, micro_batch=3)
    with pytest.raises(ConfigError, match="pp"):
        Job(GPT, SYSTEM, pp=5)
    with pytest.raises(ConfigError, match="recompute"):
        Job(GPT, SYSTEM, recompute="all")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown schedule 'no-such-family'") as unknown:
        Job(GPT, SYSTEM, pp=2, schedule="no-such-family")  # not a registered family: the registry's error
    assert unknown.value.field == "schedule"


def test_job_refuses_a_tensor_parallel_degree_megatron_cannot_split():
    """Each rank holds whole heads and key/value groups and an equal slice of the MLP (and of the
    sequence with sequence parallelism): 16 heads split over 3 ranks, 8 key/value groups over 16 and
    a sequence of 1,000 tokens over 16 ranks are refused, naming t."""
    with pytest.raises(ConfigError, match="3 does not divide the model's 16 query heads") as error:
        Job(GPT, SYSTEM, tp=3)
    assert error.value.field == "tp"
    grouped = GPT.model_copy(update={"num_attention_heads": 32, "num_kv_heads": 8})
    assert Job(grouped, SYSTEM, tp=8).tp == 8
    with pytest.raises(ConfigError, match="16 does not divide the model's 8 key/value heads"):
        Job(grouped, SYSTEM, tp=16)
    odd_sequence = grouped.model_copy(update={"num_kv_heads": 16, "seq_length": 1000})
    assert Job(odd_sequence, SYSTEM, tp=16).tp == 16
    with pytest.raises(ConfigError, match="16 does not divide the model's 1000 sequence tokens"):
        Job(odd_sequence, SYSTEM, tp=16, sequence_parallel=True)


def test_evaluate_job_adds_gradient_sync_and_optimizer_to_the_pipeline():
    result = evaluate_job(Job(GPT, SYSTEM, tp=2, pp=2, dp=2, micro_batch=2, recompute="full"))
    assert result.step_time_s == pytest.approx(result.pipeline_s + result.gradient_sync_s + result.optimizer_s)
    assert result.gradient_sync_s > 0 and result.optimizer_s > 0
    assert result.peak_memory_bytes > 0


def test_overlapped_gradient_sync_exposes_only_what_outlasts_the_last_backward():
    job = Job(GPT, SYSTEM, tp=1, pp=2, dp=8, micro_batch=1)
    plain = evaluate_job(job)
    overlapped = evaluate_job(Job(GPT, SYSTEM, tp=1, pp=2, dp=8, micro_batch=1, overlap_gradient_sync=True))
    assert overlapped.pipeline_s == plain.pipeline_s  # the pipeline is the same either way
    work = job_work(job)
    syncs = [work_time_s(w, SYSTEM) for w in work.gradient_sync]
    embedding = [work_time_s(w, SYSTEM) for w in work.embedding_sync]  # the tied embedding's, after it
    backward = [stage.backward_s for stage in job_costs(job).stages]
    assert plain.gradient_sync_s == pytest.approx(max(s + e for s, e in zip(syncs, embedding)))
    assert overlapped.gradient_sync_s == pytest.approx(max(max(0.0, s - b) + e for s, b, e in zip(syncs, backward, embedding)))
    assert overlapped.step_time_s < plain.step_time_s


# Several or replicated stages per device. GPT here: P = 12h² + 13h = 12,596,224 parameters per block,
# V·h = 50,257 · 1024 = 51,463,168; 16 bytes of state per parameter; A = 114·sbh = 119,537,664 bytes
# stored per block and microbatch (b = 1); the last stage also keeps the loss's softmax in fp32,
# S = 4·s·V = 205,852,672 (Korthikanti et al. 2022, Section 4.3), and the logits' gradient,
# L = s·V·e = 102,926,336, is its working set while the backward runs.
P, VH, A, L = 12_596_224, 51_463_168, 114 * SBH, 1024 * 50257 * 2
S = 1024 * 50257 * 4


def test_interleaved_job_per_gpu_memory():
    # p = 2, 2 chunks: 4 one-block stages, device 0 holds stages 0 (embedding) and 2, device 1 stages
    # 1 and 3 (output layer: its own copy of the tied embedding). Device 0's order is
    # F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 F0.3 B2.1 F2.2 B0.0 F2.3 ...: at most 5 microbatch-blocks live (after
    # F0.2, F0.3, F2.2, F2.3), 5·A. Device 1 (F1.0 F1.1 F3.0 B3.0 ...) peaks at 2·A + (A + S), plus
    # the logits' gradient L while the backward runs (its working set, in the simulation's peaks).
    job = Job(GPT, SYSTEM, pp=2, micro_batch=1, global_batch=4, schedule="interleaved-1f1b", chunks=2)
    assert job.stages == 4 and job.stage_layers == (1, 1, 1, 1)
    persistent = (2 * P + VH) * 16  # each device: two blocks + one V·h matrix = 1,226,489,856 bytes
    result = evaluate_job(job)
    assert result.simulation.persistent_bytes == (persistent, persistent)
    assert result.simulation.peak_memory_bytes[0] == persistent + 5 * A  # 1,824,178,176
    assert result.simulation.peak_memory_bytes[1] == persistent + 3 * A + S + L  # 1,893,881,856
    assert result.peak_memory_bytes == persistent + 3 * A + S + L  # device 1's: the fp32 softmax outweighs 2·A
    from ppopt.plan import memory_of
    assert memory_of(job).peak_bytes == result.peak_memory_bytes and memory_of(job).stage == 1  # device 1's pipeline rank


def test_a_split_backward_frees_the_loss_softmax_at_i_and_keeps_the_logits_gradient_until_w():
    """ZB-H1 at p = 2, m = 4, two blocks per stage (GPT above, b = 1). The last stage stores 2A + S
    per microbatch; a split backward's I computes the loss's gradient, so S goes at the end of I,
    while the output layer's W needs the logits' gradient L until its end: I frees S - L (Qi et al.
    2024, Section 2.1: W needs less memory than B), W the rest, 2A + L. ZB-H1's last device runs
    F0 I0 F1 I1 W0 F2 I2 W1 F3 ...: at most two live, the older past its I when the newer is made,
    so its stored peak is (2A + S) + (2A + L), where freeing all at W gave 2·(2A + S); 1F1B holds
    one at a time there, freed whole by B."""
    job = Job(GPT, SYSTEM, pp=2, micro_batch=1, global_batch=4, schedule="zb-h1")
    costs = job_costs(job)
    assert [c.input_grad_release_bytes for c in costs.stages] == [0.0, S - L]
    assert costs.stages[1].activation_bytes == 2 * A + S
    result = evaluate_job(job)
    assert result.simulation.peak_activation_bytes[1] == (2 * A + S) + (2 * A + L)
    one_f_one_b = evaluate_job(Job(GPT, SYSTEM, pp=2, micro_batch=1, global_batch=4, schedule="1f1b"))
    assert one_f_one_b.simulation.peak_activation_bytes[1] == 2 * A + S
    from ppopt.plan import memory_of
    assert memory_of(job).peak_bytes == result.peak_memory_bytes


def test_chimera_job_persistent_memory_and_gradient_sync():
    # p = 4: device 0 holds stage 0 (blocks + embedding) and the up pipeline's stage 3 (block + its
    # V·h copy), each replica in full: (2P + 2·V·h)·16 = 2,049,900,544 bytes; device 1 holds stages 1
    # and 2: 2P·16. With d = 2 (a ring over 2 GPUs of one node: bytes/100 GB/s + 2 hops of 1 µs each)
    # device 0 all-reduces both its stages' fp16 gradients one after the other:
    # 2·((P + V·h)·2 / 100e9 + 2e-6) = 0.00256637568 s. It holds stage 0 and (a replica of) the last
    # stage, so its two tied embedding copies are summed locally: no embedding all-reduce.
    job = Job(GPT, SYSTEM, pp=4, dp=2, micro_batch=1, global_batch=8, schedule="chimera")
    result = evaluate_job(job)
    assert result.simulation.persistent_bytes == ((2 * P + 2 * VH) * 16, 2 * P * 16, 2 * P * 16, (2 * P + 2 * VH) * 16)
    assert result.gradient_sync_s == pytest.approx(2 * ((P + VH) * 2 / 100e9 + 2e-6))


def test_job_schedules_and_their_options():
    assert Job(GPT, SYSTEM, pp=2, micro_batch=1, global_batch=4, schedule="hanayo", waves=1).stages == 4
    with pytest.raises(ConfigError, match="exceed the model's 4 layers"):
        Job(GPT, SYSTEM, pp=2, micro_batch=1, global_batch=4, schedule="hanayo", waves=2)
    with pytest.raises(ConfigError, match="chimera is not defined"):
        evaluate_job(Job(GPT.model_copy(update={"num_layers": 3}), SYSTEM, pp=3, micro_batch=1, global_batch=4,
                         schedule="chimera"))
    from ppopt.plan import schedule_variants
    # 32 layers on 2 devices: chunks c >= 2 with 2c dividing 32; Hanayo's 2W·p stages fit for W = 1, 2
    assert schedule_variants("interleaved-1f1b", 2, 32) == [{"chunks": c} for c in (2, 4, 8, 16)]
    # a balanced split holds any stage count up to the layers: every c with 2c <= 31
    assert schedule_variants("interleaved-1f1b", 2, 31, balanced=True) == [{"chunks": c} for c in range(2, 16)]
    assert schedule_variants("interleaved-1f1b", 2, 31) == []  # no 2c divides 31
    assert schedule_variants("hanayo", 2, 32) == [{"waves": 1}, {"waves": 2}]
    assert schedule_variants("hanayo", 4, 12) == [{"waves": 1}]
    assert schedule_variants("zb-v", 4, 6) == []


def test_elementwise_traffic_counts_each_kernel():
    # GPT, b = 1: a·s²·b = 16·sbh. Forward 42·sbh + 13·a·s²·b = (42 + 208)·sbh = 250·sbh; backward
    # 50·sbh + 19·a·s²·b = (50 + 304)·sbh = 354·sbh (costs.elementwise_traffic_bytes's kernel list).
    assert elementwise_traffic_bytes(GPT, 1) == (250 * SBH, 354 * SBH)
    # t = 2: the layer norms and dropout-adds stay whole (22·sbh), the rest halves: 22 + 10 + 104 = 136
    assert elementwise_traffic_bytes(GPT, 1, tp=2)[0] == 136 * SBH
    assert elementwise_traffic_bytes(GPT, 1, core_only=True) == (208 * SBH, 304 * SBH)


def test_kernel_accounting_gives_every_gemm_kernel_one_unit_and_launches():
    # n = 1 and op_accounting "kernels": 4 linear GEMMs + Q·Kᵀ + scores·V in F (6), 4 input-gradient
    # GEMMs + 4 attention-core gradients in I (8), 4 weight-gradient GEMMs in W; full recomputation
    # adds F's six to I. Kernels launched: BLOCK_KERNELS plus two all-reduces per pass at t > 1.
    system = SYSTEM.model_copy(update={"op_accounting": "kernels", "op_time_rule": "additive"})
    work = job_work(Job(GPT, system, tp=2, pp=4, micro_batch=1, recompute="full"))
    assert (work.forward[1].gemm_units, work.input_grad[1].gemm_units, work.weight_grad[1].gemm_units) == (6, 14, 4)
    assert (work.forward[1].kernels, work.input_grad[1].kernels, work.weight_grad[1].kernels) == (15, 32, 4)
    assert work.forward[1].memory_bytes == elementwise_traffic_bytes(GPT, 1, tp=2)[0]


def test_an_op_lasts_at_least_its_kernels_host_time():
    system = SYSTEM.model_copy(update={"op_time_rule": "additive", "kernel_host_s": 1e-4, "compute_latency_s": 1e-5})
    # GPU 1e9 / 100e12 = 1e-5 s under 10 launches of 1e-4 s: host-bound, 1e-3 + 1e-5
    assert work_time_s(Work(gemm_flops=1e9, kernels=10, ops=1), system) == pytest.approx(1e-3 + 1e-5)
    # GPU 1e12 / 100e12 = 0.01 s: the launches hide under it, 0.01 + 1e-5
    assert work_time_s(Work(gemm_flops=1e12, kernels=10, ops=1), system) == pytest.approx(0.01 + 1e-5)


@given(st.floats(1e3, 1e13), st.floats(1e3, 1e13), st.floats(0, 1e11))
def test_a_gemm_kernel_never_gets_faster_as_it_grows(small, large, half):
    # n = 1: (g + k) / (e·peak), a fixed cost plus a rate; monotone in g for every k
    small, large = sorted((small, large))
    system = SYSTEM.model_copy(update={"op_time_rule": "additive", "gemm_half_saturation_flops": half})
    assert work_time_s(Work(gemm_flops=small, gemm_units=1.0), system) <= work_time_s(Work(gemm_flops=large, gemm_units=1.0), system)


def test_layouts_that_split_groups_across_node_boundaries_unevenly_are_refused():
    """Megatron order, rank = tp + t·(dp + d·pp), 8 GPUs per node. t = 6, p = 4 (24 GPUs): the
    tensor-parallel group of ranks 6-11 spans nodes 0 and 1 while ranks 0-5 stay on node 0, which
    one cost per stage cannot express; t = 2, d = 3, p = 4: the stage of ranks 6-11 does the same.
    Refused, naming the flag. Regular layouts pass: t·d = 6 on one node (6 GPUs), t·d = 4 dividing
    a node (12 GPUs), t = 16 spanning two whole nodes."""
    model, system = load_model("gpt3-175b"), load_system("dgx-h100")
    with pytest.raises(ConfigError, match="tensor parallelism 6 neither divides nor is a multiple of the 8 GPUs") as tp:
        Job(model, system, tp=6, pp=4, global_batch=24)
    assert tp.value.field == "tp"
    with pytest.raises(ConfigError, match="t·d = 6 ranks per stage neither divides") as dp:
        Job(model, system, tp=2, pp=4, dp=3, global_batch=96)
    assert dp.value.field == "dp"
    for tp_, pp, dp_ in ((2, 1, 3), (4, 3, 1), (16, 2, 1), (8, 4, 3)):
        Job(model, system, tp=tp_, pp=pp, dp=dp_, global_batch=96)


def test_plan_enumerates_no_layout_split_unevenly_across_nodes():
    """GPT-3 175B (global batch 1536 = 2^9 · 3) on 48 GPUs: d = 3, 6, 12, 24 divide the batch, but
    with t = 2 or 4 a stage of t·d = 6 or 12 ranks straddles the 8-GPU nodes; only t·d dividing 8 or
    a multiple of it remain."""
    from ppopt.plan import PlanRequest, layouts

    found = layouts(PlanRequest(load_model("gpt3-175b"), load_system("dgx-h100"), 48))
    assert found and all(8 % (t * d) == 0 or (t * d) % 8 == 0 for t, _, d in found)
    assert (8, 2, 3) in found and (2, 2, 12) in found  # t·d = 24: three whole nodes per stage
    assert (2, 4, 6) not in found and (1, 16, 3) not in found  # t·d = 12 and 3 straddle


def test_a_gpu_runs_one_optimizer_step_whatever_its_stage_count():
    # Llama 3 8B over 4 GPUs holds 8 blocks per GPU as 2 chunks of 4 or 4 chunks of 2 (interleaved
    # 1F1B); device 0 also holds the embedding either way. A fused optimizer updates a GPU's state in
    # one pass, so the fixed time per op (dgx-a100: about 1.7 ms) counts once per GPU: the same
    # optimizer time for both (per stage it would differ by 2 x that time).
    model, system = load_model("llama3-8b"), load_system("dgx-a100")
    two, four = (evaluate_job(Job(model, system, pp=4, micro_batch=1, global_batch=32, schedule="interleaved-1f1b",
                                  chunks=v)) for v in (2, 4))
    assert two.optimizer_s == pytest.approx(four.optimizer_s, rel=1e-12)
    # and that time is one op over the GPU's whole state: the 1-stage 1F1B over the same 8 blocks + embedding
    one = evaluate_job(Job(model, system, pp=4, micro_batch=1, global_batch=32, layers=(8, 8, 8, 8)))
    assert one.optimizer_s == pytest.approx(two.optimizer_s, rel=1e-12)


def test_working_sets_by_recomputation_by_hand():
    """While a backward runs a GPU also holds, beyond what it stores: with full recomputation the
    re-run block's activations, all of them, A = 114·sbh; with selective the attention scores it
    re-computes, 5as²b = 5·16·1024²·1 = 80·sbh at t = 1 (Korthikanti et al. 2022, Section 4.2.1);
    with none nothing. The last stage holds the larger of that and the logits' gradient L: the
    loss's and the output layer's backward run first and free L before the last block's backward
    re-runs anything (here A > L > 80·sbh)."""
    def working(recompute):
        return job_work(Job(GPT, SYSTEM, pp=2, micro_batch=1, global_batch=4, recompute=recompute)).working_bytes

    assert A > L > 80 * SBH
    assert working("full") == (A, A)
    assert working("selective") == (80 * SBH, L)
    assert working("none") == (0.0, L)


def test_a_distributed_optimizer_steps_its_shard_only():
    """Adam reads and writes a GPU's parameter state once (2 x 16 bytes per parameter); with the
    state sharded over d = 4 replicas each GPU updates a quarter: the optimizer's memory traffic and
    its time drop to 1/4, the gradient all-reduce is unchanged (Rajbhandari et al. 2020, Section 5.1)."""
    plain = job_work(Job(GPT, SYSTEM, pp=2, dp=4, micro_batch=1, global_batch=8))
    sharded = job_work(Job(GPT, SYSTEM, pp=2, dp=4, micro_batch=1, global_batch=8, distributed_optimizer=True))
    for stage in range(2):
        assert plain.optimizer[stage].memory_bytes == 2 * plain.param_count[stage] * 16
        assert sharded.optimizer[stage].memory_bytes == 2 * plain.param_count[stage] * 16 / 4
        assert work_time_s(sharded.optimizer[stage], SYSTEM) < work_time_s(plain.optimizer[stage], SYSTEM)
    assert sharded.gradient_sync == plain.gradient_sync


def test_job_text_picks_a_readable_unit_for_its_step(tmp_path):
    """Step, pipeline, sync and optimizer lines were always milliseconds with one decimal: a toy
    model's step read 0.0 ms, a step of days twelve digits of ms. Under a millisecond they are in
    microseconds, from 10,000 s on in seconds with separators, and milliseconds between."""
    import re

    from click.testing import CliRunner

    from ppopt.cli import main

    tiny = tmp_path / "tiny.toml"
    tiny.write_text('name = "tiny"\nnum_layers = 2\nhidden_size = 64\nnum_attention_heads = 4\nvocab_size = 256\n'
                    "seq_length = 32\nglobal_batch_size = 8\n")
    for model, extra, unit in ((str(tiny), ["--pp", "2"], "us"), ("llama3-8b", ["--pp", "4"], "ms"),
                               ("gpt3-175b", ["--tp", "8", "--global-batch", "100000"], "s")):
        done = CliRunner().invoke(main, ["job", "--model", model, "--system", "dgx-h100", "--micro-batch", "1", *extra])
        assert done.exit_code == 0, done.output
        step = next(line for line in done.stdout.splitlines() if line.startswith("step"))
        assert re.fullmatch(rf"step +[\d,]+\.\d {unit}", step), step
        data = json.loads(CliRunner().invoke(main, ["job", "--model", model, "--system", "dgx-h100", "--micro-batch", "1", *extra,
                                                    "--json"]).stdout)
        shown = float(step.split()[1].replace(",", ""))
        assert shown == pytest.approx(data["step_time_s"] * {"us": 1e6, "ms": 1e3, "s": 1.0}[unit], abs=0.05)
