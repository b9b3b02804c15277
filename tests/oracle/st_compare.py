#!/usr/bin/env python3
"""st_compare.py A.safetensors B.safetensors: prints the relative Frobenius
distance ||A - B|| / ||A|| over every f32 tensor of two safetensors files
with the same tensors (numpy only; the format is an 8-byte little-endian
header length, a JSON header, then the data)."""
import json
import struct
import sys

import numpy as np


def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {t['dtype']}, expected F32")
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype="<f4").astype(np.float64)
    return out


a, b = read(sys.argv[1]), read(sys.argv[2])
if sorted(a) != sorted(b):
    sys.exit(f"different tensors: {sorted(set(a) ^ set(b))}")
num = sum(float(((a[k] - b[k]) ** 2).sum()) for k in a)
den = sum(float((a[k] ** 2).sum()) for k in a)
print(f"{(num / den) ** 0.5:.3e}")
