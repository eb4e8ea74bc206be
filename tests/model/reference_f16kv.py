#!/usr/bin/env python3
"""reference_forward.py with the engine's KV-cache storage emulated: keys (after RoPE) and
values are rounded to IEEE half before attention, as the engine's f16 KV cache stores them.
Everything else is the unmodified float64 reference. Same command line as
reference_forward.py. Used to separate the f16-cache rounding (a storage choice, ~2e-4
relative on tiny models) from the arithmetic of the forward pass (~1e-6 for f32 weights).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import reference_forward as ref  # noqa: E402

_attention = ref.attention


def attention_f16_cache(q, k, v, *args, **kwargs):
    as_f16 = lambda a: a.astype(np.float16).astype(np.float64)  # noqa: E731
    return _attention(q, as_f16(k), as_f16(v), *args, **kwargs)


ref.attention = attention_f16_cache

if __name__ == "__main__":
    sys.exit(ref.main())
