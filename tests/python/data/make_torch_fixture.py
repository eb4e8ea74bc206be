#!/usr/bin/env python3
"""Regenerates torch_state_dict.pt (needs PyTorch; the tests that read it do not).

The file is a real `torch.save` archive with tensors whose values test_checkpoints.py
recomputes from these same formulas: several dtypes, a transposed (non-contiguous) view,
a view with a storage offset, a 0-d tensor and an nn.Parameter."""
import os

import torch

here = os.path.dirname(os.path.abspath(__file__))
sd = {
    "fc1.weight": torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.5 - 1,
    "fc2.weight": (torch.arange(12, dtype=torch.float16) / 8).reshape(4, 3).t(),
    "emb": torch.arange(10, dtype=torch.bfloat16)[2:7],
    "scalar": torch.tensor(2.5, dtype=torch.float64),
    "ids": torch.tensor([1, -2, 3], dtype=torch.int64),
    "param": torch.nn.Parameter(torch.tensor([[1.0, 2.0], [3.0, 4.0]])),
}
torch.save(sd, os.path.join(here, "torch_state_dict.pt"))
