"""PowerInfer-style activation predictor: logits = fc2 . ReLU(fc1 . h), no biases.

State-dict keys are `fc1.weight` [r, n_embd] and `fc2.weight` [n_ff, r], as in the
original's `model_N.pt` files. A neuron is predicted active when logit >= threshold.
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class Predictor(nn.Module):
    def __init__(self, n_embd, n_ff, rank):
        super().__init__()
        self.fc1 = nn.Linear(n_embd, rank, bias=False)
        self.fc2 = nn.Linear(rank, n_ff, bias=False)

    def forward(self, h):
        return self.fc2(F.relu(self.fc1(h)))


def load_predictors(pred_dir, n_layers):
    """Returns (list of Predictor, sparse_threshold)."""
    preds = []
    for i in range(n_layers):
        sd = torch.load(os.path.join(pred_dir, f"model_{i}.pt"), map_location="cpu")
        r, d = sd["fc1.weight"].shape
        p = Predictor(d, sd["fc2.weight"].shape[0], r)
        p.load_state_dict(sd)
        preds.append(p.eval())
    thr = 0.0
    cfg = os.path.join(pred_dir, "config.json")
    if os.path.exists(cfg):
        with open(cfg) as f:
            thr = float(json.load(f).get("sparse_threshold", 0.0))
    return preds, thr


def mask_fns(preds, threshold):
    """Callables for LlamaReLU.forward(ffn_masks=...): predicted-active mask per layer."""
    return [lambda h, p=p: p(h) >= threshold for p in preds]
