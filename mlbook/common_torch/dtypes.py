"""The torch dtypes the book names, once.

Pages and tables name a floating-point format by a short string ("fp32",
"bf16", "fp8 E4M3"); torch names it by a dtype object. This is the one map
between the two, for every chapter that turns a name into a dtype.
"""

from __future__ import annotations

import torch

from mlbook.common import validate

# name -> torch dtype. The fp8 dtypes are torch's OCP FP8 formats: E4M3 without
# infinities ("fn": finite, NaN only) and E5M2 with IEEE-style inf and NaN.
DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp8 E4M3": torch.float8_e4m3fn,
    "fp8 E5M2": torch.float8_e5m2,
}


def torch_dtype(dtype) -> torch.dtype:
    """The torch dtype for a name in DTYPES; a torch dtype in DTYPES
    is returned as is."""
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
        return dtype
    validate.one_of("dtype", dtype, tuple(DTYPES))
    return DTYPES[dtype]


def dtype_name(dtype) -> str:
    """The book's name for a torch dtype (or a name) in DTYPES."""
    dt = torch_dtype(dtype)
    return next(name for name, value in DTYPES.items() if value == dt)
