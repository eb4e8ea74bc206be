"""tools/plot/plot_experts.py's reading of `powerinfer profile` expert statistics (the plotting
itself needs matplotlib and is not tested): shares, reuse, in-expert activity, the static
hot-set coverage, and files without expert statistics refused."""
import os
import sys

import numpy as np
import pytest

from conftest import ROOT
from gguf_io import VT, write_gguf
from quants import GGMLType

sys.path.insert(0, os.path.join(ROOT, "tools", "plot"))
import plot_experts  # noqa: E402


def write_stats(path, experts=True, neurons=True):
    meta = {"general.architecture": "activation_stats", "activation_stats.block_count": 2,
            "activation_stats.n_tokens": 10, "activation_stats.source": "test"}
    types = {"activation_stats.block_count": VT.UINT32, "activation_stats.n_tokens": VT.UINT64}
    tensors = {}
    if experts:
        meta.update({"activation_stats.expert_count": 4, "activation_stats.expert_used_count": 2,
                     "activation_stats.expert_pairs": 16})
        types.update({"activation_stats.expert_count": VT.UINT32, "activation_stats.expert_used_count": VT.UINT32,
                      "activation_stats.expert_pairs": VT.UINT64})
    for l in range(2):
        if neurons:
            # 3 neurons per expert; every neuron of expert 0 fires on each token routed to it.
            c = np.zeros(12, dtype=np.float32)
            c[0:3] = 10.0 if l == 0 else 0.0
            tensors[f"blk.{l}.activation_counts"] = (GGMLType.F32, (12,), c)
        if experts:
            counts = np.array([10, 6, 4, 0] if l == 0 else [5, 5, 5, 5], dtype=np.float32)
            tensors[f"blk.{l}.expert_counts"] = (GGMLType.F32, (4,), counts)
            tensors[f"blk.{l}.expert_reuse"] = (GGMLType.F32, (1,), np.array([8.0 if l == 0 else 4.0], dtype=np.float32))
    write_gguf(path, meta, tensors, types=types)


def test_load_stats_and_coverage(tmp_path):
    p = str(tmp_path / "s.gguf")
    write_stats(p)
    st = plot_experts.load_stats(p)
    assert st["n_expert"] == 4 and st["n_used"] == 2 and st["pairs"] == 16
    np.testing.assert_allclose(st["shares"][0], [1.0, 0.6, 0.4, 0.0])
    np.testing.assert_allclose(st["reuse"], [0.5, 0.25])
    # Layer 0: 30 neuron firings of 20 routed slots x 3 neurons; layer 1: none.
    np.testing.assert_allclose(st["fired"], [0.5, 0.0])
    cov = plot_experts.static_coverage(st["shares"])
    np.testing.assert_allclose(cov[0], [0.0, 0.5, 0.8, 1.0, 1.0])
    np.testing.assert_allclose(cov[1], [0.0, 0.25, 0.5, 0.75, 1.0])


def test_swiglu_experts_have_no_neuron_counts(tmp_path):
    p = str(tmp_path / "s.gguf")
    write_stats(p, neurons=False)
    assert plot_experts.load_stats(p)["fired"] is None


def test_dense_statistics_are_refused(tmp_path):
    p = str(tmp_path / "s.gguf")
    write_stats(p, experts=False)
    with pytest.raises(ValueError, match="no expert statistics"):
        plot_experts.load_stats(p)
    assert plot_experts.main([p, "-o", str(tmp_path / "x.png")]) == 1
