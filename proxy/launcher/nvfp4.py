"""Pure-torch reference of the NVFP4 format (quantize, dequantize, reference GEMM).

NVFP4 stores e2m1 values {0, .5, 1, 1.5, 2, 3, 4, 6} with a sign bit, two per byte
(low nibble first), in blocks of 16 along the last axis with one FP8-E4M3 scale per
block and one fp32 global scale per tensor: value = e2m1 * block_scale / global_scale.
The global scale follows FlashInfer's recipe, 448 * 6 / amax, so that the largest block
scale lands near FP8-E4M3's maximum. Rounding is to nearest, ties to even, saturating
at 6, as the hardware conversion does. Runs on any device torch runs on; torch is only
imported by callers that already need it (this module is never imported by the
launcher's fast path).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

if TYPE_CHECKING:
    from torch import Tensor

BLOCK_SIZE = 16
E2M1_MAX = 6.0
FP8_E4M3_MAX = 448.0
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Midpoints between neighbouring e2m1 magnitudes, and whether a tie there rounds up
# (to the even code above) or down (to the even code below).
_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_TIE_ROUNDS_UP = (False, True, False, True, False, True, False)


class NvFp4Quantized(NamedTuple):
    """A tensor in NVFP4: `packed` uint8 [..., K/2], `block_scales` float8_e4m3fn
    [..., K/16], `global_scale` fp32 scalar tensor."""

    packed: Tensor
    block_scales: Tensor
    global_scale: Tensor


def global_scale_for(x: Tensor) -> Tensor:
    """FlashInfer's per-tensor scale 448 * 6 / amax(x) (1.0 for an all-zero tensor)."""
    amax = x.detach().abs().float().max()
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    return (FP8_E4M3_MAX * E2M1_MAX / safe).to(torch.float32)


def e2m1_codes(scaled: Tensor) -> Tensor:
    """4-bit codes (sign << 3 | magnitude index) of already-scaled fp32 values."""
    magnitude = scaled.abs()
    index = torch.zeros_like(magnitude, dtype=torch.uint8)
    for midpoint, up in zip(_MIDPOINTS, _TIE_ROUNDS_UP):
        above = magnitude >= midpoint if up else magnitude > midpoint
        index += above.to(torch.uint8)
    sign = (scaled < 0).to(torch.uint8) << 3
    return index | sign


def e2m1_values(codes: Tensor) -> Tensor:
    """fp32 values of 4-bit codes (inverse of `e2m1_codes` on the grid)."""
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    magnitude = table[(codes & 0x7).long()]
    return torch.where((codes & 0x8) != 0, -magnitude, magnitude)


def pack_codes(codes: Tensor) -> Tensor:
    """Two codes per byte along the last axis, the first of each pair in the low nibble."""
    if codes.shape[-1] % 2:
        raise ValueError(f"last dimension must be even to pack, got {codes.shape[-1]}")
    low = codes[..., 0::2]
    high = codes[..., 1::2]
    return (low | (high << 4)).to(torch.uint8)


def unpack_codes(packed: Tensor) -> Tensor:
    """Inverse of `pack_codes`: [..., K/2] uint8 -> [..., K] codes."""
    low = packed & 0x0F
    high = packed >> 4
    return torch.stack((low, high), dim=-1).flatten(start_dim=-2)


def quantize(x: Tensor, global_scale: Tensor | float | None = None) -> NvFp4Quantized:
    """Quantize `x` [..., K] (K a multiple of 16) to NVFP4 along its last axis."""
    if x.dim() == 0 or x.shape[-1] % BLOCK_SIZE:
        raise ValueError(
            f"last dimension must be a multiple of {BLOCK_SIZE}, got shape {tuple(x.shape)}"
        )
    xf = x.detach().to(torch.float32)
    if global_scale is None:
        gscale = global_scale_for(xf)
    else:
        gscale = torch.as_tensor(global_scale, dtype=torch.float32, device=xf.device)
    blocks = xf.reshape(*xf.shape[:-1], xf.shape[-1] // BLOCK_SIZE, BLOCK_SIZE)
    block_amax = blocks.abs().amax(dim=-1)
    # Non-saturating cast: out-of-range values would become NaN, hence the clamp.
    scale_f32 = (block_amax / E2M1_MAX * gscale).clamp(max=FP8_E4M3_MAX)
    block_scales = scale_f32.to(torch.float8_e4m3fn)
    stored = block_scales.to(torch.float32)
    to_e2m1 = torch.where(stored > 0, gscale / stored, torch.zeros_like(stored))
    codes = e2m1_codes(blocks * to_e2m1.unsqueeze(-1)).reshape(xf.shape)
    return NvFp4Quantized(pack_codes(codes), block_scales, gscale)


def dequantize(q: NvFp4Quantized, dtype: torch.dtype = torch.float32) -> Tensor:
    """Values of an NVFP4 tensor: e2m1 * block_scale / global_scale."""
    values = e2m1_values(unpack_codes(q.packed))
    blocks = values.reshape(*values.shape[:-1], values.shape[-1] // BLOCK_SIZE, BLOCK_SIZE)
    scale = q.block_scales.to(torch.float32).unsqueeze(-1) / q.global_scale
    return (blocks * scale).reshape(values.shape).to(dtype)


def reference_mm(a: NvFp4Quantized, b: NvFp4Quantized) -> Tensor:
    """fp32 `A @ B.T` of two NVFP4 operands, A [M, K] and B [N, K] (a Linear weight)."""
    return dequantize(a) @ dequantize(b).transpose(-2, -1)


def roundtrip_error(x: Tensor, q: NvFp4Quantized) -> tuple[float, float]:
    """(max |x - x_hat| / amax of its block, ||x - x_hat|| / ||x||) for `q` = quantize(x)."""
    xf = x.detach().to(torch.float32)
    error = (xf - dequantize(q)).abs()
    blocks = xf.reshape(-1, BLOCK_SIZE).abs().amax(dim=-1, keepdim=True)
    per_block = error.reshape(-1, BLOCK_SIZE) / torch.where(blocks > 0, blocks, 1.0)
    norm = xf.norm()
    relative = (error.norm() / norm).item() if norm > 0 else 0.0
    return per_block.max().item(), relative
