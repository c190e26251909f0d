"""Writes safetensors files for the tests' PyTorch references (F32, BF16, F16, U8 tensors), apart
from tools/fgpipe_safetensors.py: the tests should not trust the code they check."""
import json
import struct

import torch

DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.uint8: "U8"}


def write_safetensors(path, tensors):  # {name: tensor}, in sorted order, header 8-byte aligned
    header, offset = {}, 0
    for name in sorted(tensors):  # tensor by tensor: a 1.5B model is not copied whole
        t = tensors[name]
        n = t.numel() * t.element_size()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name in sorted(tensors):
            t = tensors[name].detach().contiguous()
            a = (t.view(torch.int16) if t.dtype in (torch.bfloat16, torch.float16) else t).numpy()
            a.astype(a.dtype.newbyteorder("<"), copy=False).tofile(f)
