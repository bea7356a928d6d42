"""The tiny GPT a run trains, and its split into pipeline stages (imports torch).

Pre-norm transformer blocks (Radford et al. 2019, "Language Models are Unsupervised Multitask
Learners", section 2.3): ``x + attn(ln1(x))`` then ``x + mlp(ln2(x))``, causal self-attention,
an MLP of width 4·hidden with GELU. Stage 0 also holds the token and position embeddings; the last
stage the final norm and the vocabulary head. Blocks are split over the stages with
:func:`ppopt.costs.partition_layers` (earliest stages take the remainder).

Every rank builds all stages from the same seed, so the parameters are identical everywhere and
each rank can build the non-pipelined reference model (the stages in order) for the gradient check.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ppopt.costs import partition_layers
from ppopt.run.spec import ModelSize


class Block(nn.Module):
    def __init__(self, size: ModelSize):
        super().__init__()
        self.heads = size.heads
        self.ln1 = nn.LayerNorm(size.hidden)
        self.qkv = nn.Linear(size.hidden, 3 * size.hidden)
        self.proj = nn.Linear(size.hidden, size.hidden)
        self.ln2 = nn.LayerNorm(size.hidden)
        self.up = nn.Linear(size.hidden, 4 * size.hidden)
        self.down = nn.Linear(4 * size.hidden, size.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, h))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class StageModule(nn.Module):
    """One pipeline stage: [embeddings] + blocks + [final norm and head]."""

    def __init__(self, size: ModelSize, blocks: int, first: bool, last: bool):
        super().__init__()
        self.embed = nn.Embedding(size.vocab, size.hidden) if first else None
        self.position = nn.Embedding(size.sequence, size.hidden) if first else None
        self.blocks = nn.ModuleList(Block(size) for _ in range(blocks))
        self.norm = nn.LayerNorm(size.hidden) if last else None
        self.head = nn.Linear(size.hidden, size.vocab) if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None and self.position is not None:
            x = self.embed(x) + self.position(torch.arange(x.shape[1], device=x.device))
        for block in self.blocks:
            x = block(x)
        if self.norm is not None and self.head is not None:
            x = self.head(self.norm(x))
        return x


def build_stages(size: ModelSize, stages: int, seed: int, dtype: torch.dtype) -> list[StageModule]:
    """All ``stages`` stage modules, stage 0 first, initialised from ``seed`` (identical on every rank)."""
    torch.manual_seed(seed)
    counts = partition_layers(size.layers, stages)
    return [StageModule(size, n, s == 0, s == stages - 1).to(dtype) for s, n in enumerate(counts)]


def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy over the microbatch's tokens."""
    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def synthetic_batch(size: ModelSize, microbatches: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and targets of one step, ``microbatches · microbatch_size`` sequences (fixed seed)."""
    generator = torch.Generator().manual_seed(seed + 1)
    shape = (microbatches * size.microbatch_size, size.sequence)
    tokens = torch.randint(size.vocab, shape, generator=generator)
    target = torch.randint(size.vocab, shape, generator=generator)
    return tokens, target
