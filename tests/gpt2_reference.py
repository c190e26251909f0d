#!/usr/bin/python3
"""The PyTorch side of tests/gpt2_convert.sh: a randomly initialised GPT-2 in Hugging Face's
layout and names, written as Hugging Face writes it, and its loss and logits on a tokens file.

usage: gpt2_reference.py OUT_DIR [--n-layer 2] [--n-embd 64] [--n-head 4] [--ctx 32]
                         [--vocab 50257] [--windows 4] [--seed 0] [--weights-only]

Writes into OUT_DIR:
  model.safetensors    transformer.wte/wpe, transformer.h.i.{ln_1, attn.c_attn, attn.c_proj, ln_2,
                       mlp.c_fc, mlp.c_proj}, transformer.ln_f; Conv1D weights [in, out]; the
                       causal-mask buffers (attn.bias, uint8, as older GPT-2 files carry them);
                       no lm_head.weight (tied to wte, as GPT-2 saves it)
  tokens.bin           uint16 little-endian ids < vocab: `windows` windows of ctx + 1 and a tail
                       shorter than that (which fgpipe eval leaves out)
  reference.json       {"loss": mean cross-entropy in nats per token, "windows": n, "tokens": n}
  logits.bin           the first window's logits, float32 little-endian [ctx][vocab]
  no_ln_f.safetensors  the model without transformer.ln_f.weight (a bad input)
  bad_c_attn.safetensors  the model with h.1's c_attn weight [C, 2C] (a bad input)

The forward runs in float64 on the float32 weights (the reference's own rounding is then far
below fgpipe's float32). The weights are random and not initialisation-like: LayerNorm weights
around 1 and biases around 0 with spread, every bias non-zero, attention weights large enough
that the softmax is far from uniform, so a transposed matrix, a swapped q/k/v, a LayerNorm
weight read as its bias or a wrong GELU shows in the logits.
"""
import argparse
import json
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from safetensors_ref import write_safetensors  # tests/, beside this file


class Conv1D(nn.Module):  # Hugging Face's GPT-2 linear: weight [in, out], y = x W + b
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.empty(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


def gelu_new(x):  # GPT-2's tanh approximation (src/math/activation_math.h's fg_gelu)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class Attention(nn.Module):
    def __init__(self, C, n_head, ctx):
        super().__init__()
        self.n_head = n_head
        self.c_attn = Conv1D(C, 3 * C)
        self.c_proj = Conv1D(C, C)
        self.register_buffer("bias", torch.tril(torch.ones(ctx, ctx, dtype=torch.uint8)).view(1, 1, ctx, ctx))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # q, k, v: columns 0..C-1, C..2C-1, 2C..3C-1
        heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.n_head)
        scores = scores.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        return self.c_proj((scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = Conv1D(C, 4 * C)
        self.c_proj = Conv1D(4 * C, C)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, C, n_head, ctx):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = Attention(C, n_head, ctx)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, n_layer, C, n_head, ctx, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, C)
        self.wpe = nn.Embedding(ctx, C)
        self.h = nn.ModuleList(Block(C, n_head, ctx) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, *shape):
        super().__init__()
        self.transformer = GPT2Model(*shape)

    def forward(self, idx):
        return self.transformer(idx) @ self.transformer.wte.weight.t()  # the tied head, no bias


def randomise(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=gen)
            if name.endswith("wte.weight") or name.endswith("wpe.weight"):
                p.copy_(0.1 * r)  # logits ~ ln_f(x) . wte row: a spread of several nats
            elif ".ln_" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * r)
            elif name.endswith("bias"):
                p.copy_(0.1 * r)
            else:  # the Conv1D weights: about unit-variance outputs
                p.copy_(r * (1.5 / math.sqrt(p.shape[0])))
        # Every wte row shares a unit direction u that ln_f's bias points against (and wpe
        # takes out of the input): the real logits sit around -4, so the pad columns (logit 0
        # exactly: zero rows) would move the loss by about 0.1 nats if they were wrongly in the
        # softmax.
        t = model.transformer
        u = torch.randn(t.ln_f.bias.shape, generator=gen, dtype=torch.float64)
        u /= u.norm()
        t.wte.weight += u.float()
        t.wpe.weight -= u.float()
        t.ln_f.bias -= (4.0 * u).float()




def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-embd", type=int, default=64)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--weights-only", action="store_true",
                    help="write model.safetensors alone: no tokens, no forward pass, no bad files (large shapes)")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)  # callers name a fresh folder (bench_finetune_ooc.sh)
    torch.set_num_threads(2)
    gen = torch.Generator().manual_seed(a.seed)
    model = GPT2LMHeadModel(a.n_layer, a.n_embd, a.n_head, a.ctx, a.vocab)
    randomise(model, gen)

    state = dict(model.state_dict())  # transformer.*: the tied head is not a separate tensor
    write_safetensors(f"{a.out_dir}/model.safetensors", state)
    if a.weights_only:
        return
    write_safetensors(f"{a.out_dir}/no_ln_f.safetensors",
                      {k: v for k, v in state.items() if k != "transformer.ln_f.weight"})
    bad = dict(state)
    bad["transformer.h.1.attn.c_attn.weight"] = bad["transformer.h.1.attn.c_attn.weight"][:, :2 * a.n_embd]
    write_safetensors(f"{a.out_dir}/bad_c_attn.safetensors", bad)

    # The windows, then a tail of ctx / 2 tokens too short for another; the first and last ids
    # of the table are in the first window.
    n = a.windows * a.ctx + 1 + a.ctx // 2
    tokens = torch.randint(0, a.vocab, (n,), generator=gen)
    tokens[3], tokens[7] = a.vocab - 1, 0
    tokens.numpy().astype("<u2").tofile(f"{a.out_dir}/tokens.bin")

    model = model.double()
    with torch.no_grad():
        w = torch.stack([tokens[i * a.ctx:i * a.ctx + a.ctx + 1] for i in range(a.windows)])
        logits = model(w[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, a.vocab), w[:, 1:].reshape(-1))
    logits[0].float().numpy().astype("<f4").tofile(f"{a.out_dir}/logits.bin")
    with open(f"{a.out_dir}/reference.json", "w") as f:
        json.dump({"loss": loss.item(), "windows": a.windows, "tokens": a.windows * a.ctx,
                   "logits_std": logits.std().item()}, f)


if __name__ == "__main__":
    main()
