"""A Llama-shaped decoder with random weights, built from a config (no downloads), and a
batched decode step run either eagerly or replayed as one CUDA graph. Every slot of the
batch is an independent sequence, so the server can batch continuously.

Imported only on the GPU machine: it needs PyTorch, which the runner's core does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Config:
    layers: int = 8
    d_model: int = 2048
    heads: int = 16
    ffn_mult: int = 4
    vocab: int = 4096
    max_batch: int = 16
    max_steps: int = 96


class Decoder:
    """Weights and a static KV cache for `max_batch` sequences of `max_steps` tokens."""

    def __init__(
        self,
        cfg: Config,
        device: str,
        dtype: torch.dtype = torch.float16,
        seed: int = 0,
        extra_pct: int = 0,
    ) -> None:
        g = torch.Generator(device="cpu").manual_seed(seed)
        d, h = cfg.d_model, cfg.heads
        self.cfg, self.device, self.dtype = cfg, device, dtype

        def w(*shape: int) -> torch.Tensor:
            t = torch.randn(*shape, generator=g) / math.sqrt(shape[-1])
            return t.to(device=device, dtype=dtype)

        self.embed = w(cfg.vocab, d)
        self.layers = [
            {
                "qkv": w(3 * d, d),
                "o": w(d, d),
                "up": w(cfg.ffn_mult * d, d),
                "down": w(d, cfg.ffn_mult * d),
                "n1": torch.ones(d, device=device, dtype=dtype),
                "n2": torch.ones(d, device=device, dtype=dtype),
            }
            for _ in range(cfg.layers)
        ]
        self.head = w(cfg.vocab, d)
        # A planted effect of known size: one more matrix holding `extra_pct`% of the
        # weights, multiplied in every step, so a step reads and multiplies exactly that
        # much more (the step is bound by reading the weights at this batch size).
        self.extra = None
        if extra_pct:
            rows = round(extra_pct / 100 * self.weight_elements() / d)
            self.extra = w(rows, d)
        shape = (cfg.layers, cfg.max_batch, h, cfg.max_steps, d // h)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        # Static inputs of one step (so a CUDA graph can replay it). Each slot of the batch
        # is its own sequence at its own position: a finished sequence's slot takes a new
        # one while the others go on (continuous batching, as serving engines do).
        self.tokens = torch.zeros(cfg.max_batch, dtype=torch.long, device=device)
        self.pos = torch.zeros(cfg.max_batch, dtype=torch.long, device=device)
        self.slots = torch.arange(cfg.max_batch, device=device)
        self.steps = torch.arange(cfg.max_steps, device=device)
        self.out = torch.zeros(cfg.max_batch, dtype=torch.long, device=device)
        self.graph: Any = None

    def weight_elements(self) -> int:
        """The step's matrix elements (embedding rows read are negligible)."""
        n = int(self.head.numel())
        for L in self.layers:
            n += int(L["qkv"].numel() + L["o"].numel() + L["up"].numel() + L["down"].numel())
        return n

    @staticmethod
    def _rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

    def step(self) -> None:
        """One decode step for the whole batch: embed, N layers, greedy next token."""
        cfg = self.cfg
        b, h, dh = cfg.max_batch, cfg.heads, cfg.d_model // cfg.heads
        x = self.embed[self.tokens]
        mask = (self.steps.view(1, -1) <= self.pos.view(-1, 1)).view(b, 1, 1, cfg.max_steps)
        for i, L in enumerate(self.layers):
            y = self._rms(x, L["n1"])
            q, k, v = (y @ L["qkv"].T).view(b, 3, h, dh).unbind(1)
            self.k[i][self.slots, :, self.pos] = k
            self.v[i][self.slots, :, self.pos] = v
            a = F.scaled_dot_product_attention(q.unsqueeze(2), self.k[i], self.v[i], attn_mask=mask)
            x = x + a.squeeze(2).reshape(b, -1) @ L["o"].T
            y = self._rms(x, L["n2"])
            x = x + F.silu(y @ L["up"].T) @ L["down"].T
        if self.extra is not None:  # the planted work: its result is added as zero
            x = x + (x @ self.extra.T)[:, :1] * 0.0
        self.out.copy_(torch.argmax(x @ self.head.T, dim=-1))

    def capture(self) -> None:
        """Record one step as a CUDA graph (after a warm-up on a side stream)."""
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.step()
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.step()

    def admit(self, slot: int, first_token: int) -> None:
        """Start a new sequence in `slot` (its old one is over)."""
        self.tokens[slot] = first_token
        self.pos[slot] = 0

    def decode(self, steps: int) -> None:
        """Decode `steps` tokens in every slot, then wait for the GPU."""
        last = self.cfg.max_steps - 1
        for _ in range(steps):
            if self.graph is not None:
                self.graph.replay()
            else:
                self.step()
            self.tokens.copy_(self.out)
            self.pos.add_(1).clamp_(max=last)  # an idle slot idles at the last position
        if self.device == "cuda":
            torch.cuda.synchronize()

    def generate(self, first_tokens: list[int], steps: int) -> list[int]:
        """Decode `steps` tokens for sequences started together (the warm-up)."""
        for slot, tok in enumerate(first_tokens):
            self.admit(slot, tok)
        self.decode(steps)
        tokens: list[int] = self.out[: len(first_tokens)].tolist()
        return tokens
