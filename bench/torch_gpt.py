#!/usr/bin/python3
"""The default fgpipe GPT (docs/gpt.md) in PyTorch, as the mainstream-framework reference for
bench/bench_gpt.sh's bp row: the same model, initialisation, data split, AdamW schedule and
step shape (micro-batches accumulated into one step), on the same CPU threads.

Not on fgpipe's training path: a benchmark reference only. Debian 12: apt-get install
python3-torch (1.13). Prints one JSON line: tokens/s over the training steps (evaluation not
counted), final train loss, validation loss (nats and bits per byte) and next-byte accuracy over
the validation split's non-overlapping windows, peak RSS.

usage: bench/torch_gpt.py TEXT_FILE [--steps 2000] [--threads 2] [--n-layer 4] ...
"""
import argparse
import json
import math
import resource
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.n_head)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        a = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        x = x + self.c_proj(a.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer, C, n_head, ctx, vocab=256):
        super().__init__()
        self.wte = nn.Embedding(vocab, C)
        self.wpe = nn.Embedding(ctx, C)
        self.h = nn.ModuleList(Block(C, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        for name, p in self.named_parameters():  # fgpipe's initialisation
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln_" in name:
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied head, no bias
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1)), logits


def lr_at(step, args):  # src/math/optimizer.c's lr_at
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    span = args.steps - args.warmup
    t = (step - args.warmup) / (span - 1) if span > 1 else 1.0
    return 0.5 * args.lr * (1.0 + math.cos(math.pi * min(t, 1.0)))


def windows(data, starts, ctx):
    idx = np.stack([data[s:s + ctx + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(idx[:, :-1]), torch.from_numpy(idx[:, 1:])


@torch.no_grad()
def validate(model, data, train_end, ctx, rows):
    n = (len(data) - train_end - 1) // ctx
    loss_sum, hits = 0.0, 0
    for first in range(0, n, rows):
        starts = [train_end + w * ctx for w in range(first, min(first + rows, n))]
        x, y = windows(data, starts, ctx)
        loss, logits = model(x, y)
        loss_sum += loss.item() * y.numel()
        hits += (logits.argmax(-1) == y).sum().item()
    return loss_sum / (n * ctx), hits / (n * ctx)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("text_file")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    data = np.fromfile(args.text_file, dtype=np.uint8)
    train_end = len(data) * 9 // 10
    model = GPT(args.n_layer, args.n_embd, args.n_head, args.ctx)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.0)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args)
        opt.zero_grad(set_to_none=True)
        step_loss = 0.0
        for _ in range(args.micro_batches):
            x, y = windows(data, rng.integers(0, train_end - args.ctx, args.micro_batch), args.ctx)
            loss, _ = model(x, y)
            (loss / args.micro_batches).backward()
            step_loss += loss.item() / args.micro_batches
        opt.step()
    seconds = time.perf_counter() - t0
    val_loss, val_acc = validate(model, data, train_end, args.ctx, 16)
    tokens = args.steps * args.micro_batches * args.micro_batch * args.ctx
    print(json.dumps({
        "framework": f"torch {torch.__version__}", "threads": args.threads, "steps": args.steps,
        "tokens_per_s": tokens / seconds, "final_loss": step_loss, "val_loss": val_loss,
        "val_bits_per_byte": val_loss / math.log(2), "test_acc": val_acc,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


if __name__ == "__main__":
    main()
