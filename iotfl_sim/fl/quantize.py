"""QSGD quantization (Alistarh et al., NeurIPS 2017) and its lossless encoding, shared by every method.

Quantizer. ``q`` bits mean ``s = 2**q`` quantization intervals of [0, 1] (FedX: "q is associated with 2^q
levels ... 2^q bins in [0, 1]"): each value v_i of a normalisation group v becomes ``||v||_2 * sgn(v_i) * l_i / s``
with the integer level ``l_i`` in {0, ..., s} drawn by unbiased stochastic rounding of ``s |v_i| / ||v||_2``
(``l = floor(.)`` plus one with probability equal to the fractional part), so E[Q(v)] = v and
E||Q(v) - v||^2 <= min(d / s^2, sqrt(d) / s) ||v||^2 for a group of d values (QSGD Lemma 3.1). Signs and the
float32 norm are kept apart from the levels. Integer tensors and ``bits >= 32`` pass through unchanged.

Normalisation groups (``bucket``), two modes:

- ``bucket=None``, per tensor (FedX's default): every floating tensor is one group normalised by its own L2
  norm, FedX's "Q(theta / ||theta||_2)" read per parameter tensor (the paper does not say whether theta is
  one tensor or the whole model; QSGD quantizes each layer's tensor on its own, and so does this). Nothing is
  padded, in memory or on the wire. The error grows with the group size d (Lemma 3.1's bound above): at 8 bits
  the noise is 4-16 % of the energy of the initial HAR-Wild and MobileNetV3 weights, and the messages are
  2.5-4x smaller than bucketed ones (most levels round to zero).
- ``bucket=b`` (an int), QSGD's bucketing: the flattened tensor is cut into groups of ``b`` values, each with
  its own norm; the last group is zero-padded to ``b`` in memory (its uniform draws included, so the draws of
  later tensors depend on ``b``), never on the wire. With b = 512 an 8-bit message loses almost nothing (at
  most 0.1 % of the energy on the same weights).

Wire format (lossless, bits on the wire), the same stream for both modes. Per tensor of n values:

- the norms: 32 bits each (IEEE float32), one per tensor (``None``) or ceil(n / b) (bucketed);
- then per group, for each non-zero level in order: the run of zeros before it as Elias-omega(run + 1), its
  sign as 1 bit (1 = negative), the level |l| as Elias-omega(|l|); zero levels have no sign bit;
- a group's trailing run of zeros as Elias-omega(run + 1) (the decoder knows the group's length, so it stops
  when the group is full); no padding: a bucketed tensor's last group is coded at its real length.

A message's size is the sum of these bits over its tensors, rounded up to whole bytes once per message (shapes
are known to both sides, so nothing else is sent). Example, one tensor of 7 values at 3 bits per tensor with
levels (6, 0, -4, 2, 0, -2, 2): 32 (norm) + [1 + 1 + 6] + [3 + 1 + 6] + [1 + 1 + 3] + [3 + 1 + 3] + [1 + 1 + 3]
= 67 bits, 9 bytes. ``encoded_bits`` computes the exact length of that stream without building it
(vectorised), ``encode_bucket`` / ``decode_bucket`` build and read the real bit string of one group (tests
and small vectors).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

NORM_BITS = 32
DEFAULT_BUCKET = 512
# Server work per quantized value (|v|, scale, uniform draw, compare, floor, sign, level -> code length) under the
# old FLOP rule (server.compute): a stated assumption; a server profile prices QSGD from measured rates instead.
QSGD_FLOPS_PER_VALUE = 10.0


def levels_of(bits: int) -> int:
    """s: the number of quantization intervals of [0, 1] for ``bits`` bits (2**bits)."""
    if bits < 1:
        raise ValueError(f"QSGD needs at least 1 bit, got {bits}")
    return 2**bits


def _buckets(flat: torch.Tensor, bucket: int | None) -> tuple[torch.Tensor, int]:
    """(groups x group length, n): one row per tensor (``None``, no padding) or per bucket (last zero-padded)."""
    n = flat.numel()
    if bucket is None:
        return flat.view(1, n), n
    pad = (-n) % bucket
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    return flat.view(-1, bucket), n


def quantize_levels(
    x: torch.Tensor, bits: int, generator: torch.Generator, bucket: int | None = DEFAULT_BUCKET
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(norms per group, signed integer levels per value (flattened, unpadded), s) of QSGD(x, bits); a group is
    the whole tensor (``bucket=None``) or ``bucket`` values."""
    s = levels_of(bits)
    norms, signed = stochastic_levels(x, s, generator, bucket)
    return norms, signed, torch.tensor(s)


def stochastic_levels(
    x: torch.Tensor, s: int, generator: torch.Generator, bucket: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(norms per group, signed integer levels in {-s..s} per value, flattened and unpadded): QSGD's unbiased
    stochastic rounding of s |x_i| / ||group||_2 for any number of intervals s (``quantize_levels``: s = 2^bits)."""
    b, n = _buckets(x.detach().reshape(-1).to(torch.float32), bucket)
    norms = b.norm(dim=1, keepdim=True)
    scaled = (b.abs() * (s / norms.clamp_min(1e-30))).clamp_max(s)  # a zero bucket stays all zero
    low = scaled.floor()
    u = torch.rand(b.shape, generator=generator, dtype=torch.float32)
    lvl = low.add_((u < scaled.sub_(low)).to(torch.float32))
    return norms.reshape(-1), lvl.copysign_(b).to(torch.int64).reshape(-1)[:n]


def dequantize_levels(
    norms: torch.Tensor, signed: torch.Tensor, bits: int, shape: tuple[int, ...], bucket: int | None
) -> torch.Tensor:
    s = levels_of(bits)
    n = signed.numel()
    b, _ = _buckets(signed.to(torch.float32), bucket)
    out = b * (norms.reshape(-1, 1) / s)
    return out.reshape(-1)[:n].reshape(shape)


def qsgd(x: torch.Tensor, bits: int, generator: torch.Generator, bucket: int | None = DEFAULT_BUCKET) -> torch.Tensor:
    """Q(x, bits): the dequantized tensor (same dtype and shape)."""
    norms, signed, _ = quantize_levels(x, bits, generator, bucket)
    return dequantize_levels(norms, signed, bits, tuple(x.shape), bucket).to(x.dtype)


# ---------------------------------------------------------------------------------------------- Elias omega


_TABLE_MAX = 1 << 16
_table: np.ndarray | None = None


def omega_length(n: np.ndarray) -> np.ndarray:
    """Bits of the Elias-omega code of each positive integer in ``n`` (vectorised; a table below 2**16)."""
    global _table
    n = np.asarray(n, dtype=np.int64)
    if n.size == 0:
        return n.copy()
    if n.min() < 1:
        raise ValueError("Elias-omega codes positive integers only")
    if n.max() < _TABLE_MAX:
        if _table is None:
            _table = np.concatenate([[0], _omega_length(np.arange(1, _TABLE_MAX, dtype=np.int64))])
        return _table[n]
    return _omega_length(n)


def _omega_length(n: np.ndarray) -> np.ndarray:
    total = np.ones_like(n)  # the terminating 0
    m = n.copy()
    while True:
        live = m > 1
        if not live.any():
            return total
        groups = np.zeros_like(m)
        groups[live] = np.floor(np.log2(m[live])).astype(np.int64)
        # guard against log2 rounding for large powers of two
        fix = live & ((1 << (groups + 1)) <= m)
        groups[fix] += 1
        fix = live & ((1 << groups) > m)
        groups[fix] -= 1
        total[live] += groups[live] + 1
        m = np.where(live, groups, 1)


def omega_encode(n: int) -> str:
    """The Elias-omega code of ``n`` >= 1 as a string of '0'/'1'."""
    if n < 1:
        raise ValueError("Elias-omega codes positive integers only")
    code = "0"
    while n > 1:
        b = bin(n)[2:]
        code = b + code
        n = len(b) - 1
    return code


def omega_decode(bits: str, pos: int) -> tuple[int, int]:
    """(value, next position) of the Elias-omega code starting at ``pos``."""
    n = 1
    while bits[pos] == "1":
        b = bits[pos : pos + n + 1]
        pos += n + 1
        n = int(b, 2)
    return n, pos + 1


# ---------------------------------------------------------------------------------------------- the stream


def encode_bucket(norm: float, signed: np.ndarray) -> str:
    """The bit string of one bucket (norm as IEEE float32, then run/sign/level tokens)."""
    out = [format(np.float32(norm).view(np.uint32), "032b")]
    run = 0
    for v in np.asarray(signed, dtype=np.int64):
        if v == 0:
            run += 1
            continue
        out.append(omega_encode(run + 1))
        out.append("1" if v < 0 else "0")
        out.append(omega_encode(int(abs(v))))
        run = 0
    if run:
        out.append(omega_encode(run + 1))
    return "".join(out)


def decode_bucket(bits: str, length: int) -> tuple[float, np.ndarray]:
    """Inverse of ``encode_bucket`` for a bucket of ``length`` values."""
    norm = float(np.uint32(int(bits[:NORM_BITS], 2)).view(np.float32))
    pos, i = NORM_BITS, 0
    out = np.zeros(length, dtype=np.int64)
    while i < length:
        run, pos = omega_decode(bits, pos)
        i += run - 1
        if i >= length:
            break
        sign = -1 if bits[pos] == "1" else 1
        level, pos = omega_decode(bits, pos + 1)
        out[i] = sign * level
        i += 1
    return norm, out


def encoded_bits(signed: torch.Tensor | np.ndarray, bucket: int | None = DEFAULT_BUCKET) -> int:
    """Exact length in bits of ``encode_bucket`` over every group of ``signed`` (one tensor's flattened levels;
    ``bucket=None``: the tensor is one group)."""
    v = np.asarray(signed, dtype=np.int64).reshape(-1)
    n = v.size
    if n == 0:
        return 0
    if bucket is None:
        bucket = n
    nb = -(-n // bucket)
    total = nb * NORM_BITS
    idx = np.flatnonzero(v)
    which = idx // bucket
    if idx.size:
        total += int(omega_length(np.abs(v[idx])).sum()) + idx.size  # levels and signs
        # zeros before each non-zero, counted from the previous non-zero of the same bucket
        prev = np.empty_like(idx)
        prev[0] = which[0] * bucket - 1
        prev[1:] = np.where(which[1:] == which[:-1], idx[:-1], which[1:] * bucket - 1)
        total += int(omega_length(idx - prev).sum())  # run + 1
    # trailing zeros of each bucket
    ends = np.minimum((np.arange(nb) + 1) * bucket, n)
    last = np.arange(nb) * bucket - 1  # buckets without a non-zero: all of it is a trailing run
    if idx.size:
        is_last = np.append(which[1:] != which[:-1], True)  # idx is sorted: the last of each bucket's run
        last[which[is_last]] = idx[is_last]
    trailing = ends - 1 - last
    total += int(omega_length(trailing[trailing > 0] + 1).sum())
    return int(total)


# ---------------------------------------------------------------------------------------------- states


def quantize_state(
    state: Mapping[str, torch.Tensor], bits: int, generator: torch.Generator, bucket: int | None = DEFAULT_BUCKET
) -> tuple[dict[str, torch.Tensor], int]:
    """(Q(state), encoded bytes) of a model state: each floating tensor quantized and encoded on its own, per
    tensor (``bucket=None``) or per ``bucket`` values; the bits of every tensor summed, then rounded up to bytes.

    ``bits >= 32`` sends float32 as is: 4 bytes per value. Integer tensors (none in this simulator's
    models) are sent raw at their element size.
    """
    out: dict[str, torch.Tensor] = {}
    nbits = 0
    for k, t in state.items():
        if not torch.is_floating_point(t) or bits >= 32:
            out[k] = t.clone()
            nbits += t.numel() * t.element_size() * 8
            continue
        norms, signed, _ = quantize_levels(t, bits, generator, bucket)
        out[k] = dequantize_levels(norms, signed, bits, tuple(t.shape), bucket).to(t.dtype)
        nbits += encoded_bits(signed, bucket)
    return out, -(-nbits // 8)
