"""NVFP4 torch reference: grid, rounding, packing order, scales, round trip, GEMM."""

from __future__ import annotations

import pytest
import torch

from proxy.launcher import nvfp4

GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _exact(values: list[float]) -> torch.Tensor:
    """Dequantized `values` (one block of 16) with block scale 448 and global scale 448,
    so each value maps onto the e2m1 grid unscaled."""
    return nvfp4.dequantize(nvfp4.quantize(torch.tensor([values]), global_scale=448.0))[0]


def test_every_signed_grid_value_round_trips_exactly() -> None:
    values = GRID + [-v for v in GRID[1:]] + [6.0]
    assert _exact(values).tolist() == values


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.25, 0.0),  # ties go to the even code
        (0.75, 1.0),
        (1.25, 1.0),
        (1.75, 2.0),
        (2.5, 2.0),
        (3.5, 4.0),
        (5.0, 4.0),
        (0.26, 0.5),
        (5.01, 6.0),
        (-3.4, -3.0),
    ],
)
def test_rounds_to_nearest_ties_to_even(value: float, expected: float) -> None:
    block = [value] + [0.0] * 14 + [6.0]  # the 6.0 pins the block scale to 448
    assert _exact(block)[0].item() == expected


def test_saturates_at_six_times_the_scale() -> None:
    q = nvfp4.quantize(torch.tensor([[7.0] + [0.0] * 15]), global_scale=448.0)
    assert q.block_scales.float().item() == 448.0  # clamped, not NaN
    assert nvfp4.dequantize(q)[0, 0].item() == 6.0


def test_packs_two_codes_per_byte_low_nibble_first() -> None:
    x = torch.tensor([[0.5, 6.0, -1.0, 0.0] + [0.0] * 12])
    q = nvfp4.quantize(x, global_scale=448.0)
    assert q.packed.dtype == torch.uint8
    assert q.packed.shape == (1, 8)
    # 0.5 is code 1 (low nibble), 6.0 is code 7; -1.0 is sign 8 | code 2 = 0xA.
    assert q.packed[0, :2].tolist() == [0x71, 0x0A]
    assert nvfp4.unpack_codes(q.packed)[0, :4].tolist() == [1, 7, 10, 0]


def test_pack_rejects_odd_length() -> None:
    with pytest.raises(ValueError, match="even"):
        nvfp4.pack_codes(torch.zeros(3, dtype=torch.uint8))


def test_scales_follow_the_format() -> None:
    torch.manual_seed(1)
    x = torch.randn(4, 64) * 3
    q = nvfp4.quantize(x)
    assert q.block_scales.dtype == torch.float8_e4m3fn
    assert q.block_scales.shape == (4, 4)
    assert q.global_scale.dtype == torch.float32
    assert q.global_scale.item() == pytest.approx(448 * 6 / x.abs().max().item(), rel=1e-6)
    # value = e2m1 * block_scale / global_scale, recomputed by hand for one element
    code = nvfp4.unpack_codes(q.packed)[2, 37]
    by_hand = nvfp4.e2m1_values(code).item() * q.block_scales[2, 2].float().item()
    assert nvfp4.dequantize(q)[2, 37].item() == pytest.approx(by_hand / q.global_scale.item())


def test_random_round_trip_within_format_bounds() -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 256, dtype=torch.bfloat16)
    q = nvfp4.quantize(x)
    block_error, relative_rms = nvfp4.roundtrip_error(x, q)
    assert 0.05 < block_error <= 0.1875
    assert 0.05 < relative_rms < 0.12
    assert nvfp4.dequantize(q, torch.bfloat16).dtype == torch.bfloat16


def test_zero_tensor_has_no_nan() -> None:
    q = nvfp4.quantize(torch.zeros(2, 32))
    assert q.global_scale.item() == 448 * 6
    assert torch.equal(nvfp4.dequantize(q), torch.zeros(2, 32))


def test_batched_input_keeps_leading_dimensions() -> None:
    x = torch.randn(3, 5, 32)
    q = nvfp4.quantize(x)
    assert q.packed.shape == (3, 5, 16)
    assert q.block_scales.shape == (3, 5, 2)
    assert nvfp4.dequantize(q).shape == (3, 5, 32)


def test_rejects_last_dimension_not_multiple_of_16() -> None:
    with pytest.raises(ValueError, match=r"\(4, 20\)"):
        nvfp4.quantize(torch.zeros(4, 20))


def test_reference_mm_is_fp32_matmul_of_dequantized_operands() -> None:
    torch.manual_seed(2)
    a, b = torch.randn(32, 128), torch.randn(48, 128)
    qa, qb = nvfp4.quantize(a), nvfp4.quantize(b)
    out = nvfp4.reference_mm(qa, qb)
    assert out.dtype == torch.float32 and out.shape == (32, 48)
    assert torch.allclose(out, nvfp4.dequantize(qa) @ nvfp4.dequantize(qb).T)
    cosine = torch.nn.functional.cosine_similarity(out.flatten(), (a @ b.T).flatten(), dim=0)
    assert cosine > 0.97
