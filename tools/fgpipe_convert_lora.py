"""LoRA checkpoints (model = llama with lora_rank > 0) for tools/fgpipe-convert (docs/gpt.md,
"LoRA").

export-lora: PEFT's layout: adapter_model.safetensors with
base_model.model.<Hugging Face module>.lora_A.weight [r, in] and .lora_B.weight [out, r]
(module: model.layers.N.self_attn.q_proj, ...) and adapter_config.json (r, lora_alpha,
target_modules, peft_type LORA, task_type CAUSAL_LM).
merge: the base weights with W + (lora_alpha / r) B A in place of each adapted W (in float64,
rounded once to float32), for `export` of a LoRA checkpoint; merge_stream the same, computed
block by block of rows as the export writes them.
"""
import json
import os

import numpy as np

import fgpipe_safetensors as safetensors
import fgpipe_stream as stream
from fgpipe_safetensors import BadInput

MODULES = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
           "o": "self_attn.o_proj", "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


def lora_settings(c):  # (rank, alpha, targets) of a checkpoint's config; rank 0: no LoRA
    rank = int(c.get("lora_rank", "0"))
    return rank, float(c.get("lora_alpha", "0")), [t for t in c.get("lora_targets", "").split(",") if t]


def split(tensors):
    """The checkpoint's tensors ({"layers.0.self_attn.q_proj.lora_A.weight": array, ...}) as
    (base tensors, {module: (A, B)})."""
    base, pairs = {}, {}
    for name, v in tensors.items():
        for which in ("A", "B"):
            suffix = f".lora_{which}.weight"
            if name.endswith(suffix):
                pairs.setdefault(name[: -len(suffix)], {})[which] = v
                break
        else:
            base[name] = v
    for module, ab in pairs.items():
        if set(ab) != {"A", "B"}:
            raise BadInput(f"adapter {module} lacks lora_{'B' if 'A' in ab else 'A'}")
    return base, {m: (ab["A"], ab["B"]) for m, ab in pairs.items()}


def merge(tensors, c):
    """The base tensors with each adapted weight W + (alpha / r) B A."""
    rank, alpha, _ = lora_settings(c)
    base, adapters = split(tensors)
    for module, (A, B) in adapters.items():
        W = base[module + ".weight"]
        merged = W.astype(np.float64) + (alpha / rank) * (B.astype(np.float64) @ A.astype(np.float64))
        base[module + ".weight"] = merged.astype(np.float32)
    return base


def merge_stream(datasets, c):
    """merge's result without reading it: {name: (shape, get)} of the base tensors (HDF5
    datasets), each adapted weight's rows r0..r1 computed as merge computes them."""
    rank, alpha, _ = lora_settings(c)
    base, adapters = split(datasets)
    out = {k: (ds.shape, stream.h5_rows(ds)) for k, ds in base.items()}
    for module, (A, B) in adapters.items():
        W = base[module + ".weight"]
        a = A[...].astype(np.float64)  # [r, in]: small

        def rows(r0, r1, W=W, B=B, a=a):
            merged = W[r0:r1].astype(np.float64) + (alpha / rank) * (B[r0:r1].astype(np.float64) @ a)
            return merged.astype(np.float32)
        out[module + ".weight"] = (W.shape, rows)
    return out


def export_lora(tensors, c, out):
    """adapter_model.safetensors and adapter_config.json into directory out."""
    rank, alpha, targets = lora_settings(c)
    if rank <= 0:
        raise BadInput("export-lora: the checkpoint has no LoRA adapters (lora_rank 0)")
    _, adapters = split(tensors)
    peft = {}
    for module, (A, B) in adapters.items():
        peft[f"base_model.model.model.{module}.lora_A.weight"] = A
        peft[f"base_model.model.model.{module}.lora_B.weight"] = B
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": alpha,
              "target_modules": sorted(MODULES[t].split(".")[1] for t in targets),
              "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False,
              "inference_mode": True, "base_model_name_or_path": None}
    try:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "adapter_config.json"), "w") as g:
            json.dump(config, g, indent=2)
    except OSError as e:
        raise BadInput(f"{out}: {e.strerror}")
    safetensors.write(os.path.join(out, "adapter_model.safetensors"), peft)
