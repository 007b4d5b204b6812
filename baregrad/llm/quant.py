"""Quantized weights that stay quantized in device memory: GGUF's block formats read with Tensor ops.

A weight of shape (rows, cols) in a block format is kept as its raw bytes, a uint8 tensor (rows, blocks, block_bytes),
exactly as the file stores it. `dequantize` builds the float value of every element from those bytes lazily (byte
loads, shifts, masks, a half-precision scale assembled from two bytes); `linear` multiplies by it, so the expression
fuses into the matmul's loads and no full-size float copy of the weight is ever made. The layouts (ggml's, as the GGUF
files written by llama.cpp and the `gguf` package hold them):

  Q8_0  32 values in 34 bytes: d (f16), 32 x int8;                 w = d * q
  Q4_0  32 values in 18 bytes: d (f16), 16 bytes of nibbles;       w = d * (nibble - 8), low nibbles are values 0-15
  Q4_K  256 values in 144 bytes: d, dmin (f16), 12 bytes of 6-bit scales and mins for 8 sub-blocks of 32, 128 bytes of
        nibbles (each 32 bytes: low nibbles one sub-block, high nibbles the next);  w = d * sc * q - dmin * m
  Q6_K  256 values in 210 bytes: 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 int8 scales, d (f16);
        w = d * scale * (q - 32), q six bits
F32, F16 and BF16 weights are plain tensors of that dtype."""
from __future__ import annotations
from dataclasses import dataclass, field
from baregrad.ir.dtype import dtypes
from baregrad.tensor.tensor import Tensor

# values per block and bytes per block (ggml's block sizes)
BLOCKS: dict[str, tuple[int, int]] = {"Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_K": (256, 144), "Q6_K": (256, 210)}

@dataclass
class QuantizedWeight:
  """A (rows, cols) weight kept as raw blocks: `raw` is uint8 (rows, cols // block, block_bytes) on its device.
  The blocks' scales (one to sixteen floats per block: 1/32 to 1/16 of the values) are decoded once, on first use, and
  kept beside them (`scales`), so a matmul's inner loop decodes only the quantized values."""
  kind: str
  raw: Tensor
  shape: tuple[int, int]
  _scales: tuple[Tensor, ...] | None = field(default=None, repr=False)
  @property
  def device(self) -> str: return self.raw.device
  @property
  def nbytes(self) -> int: return self.raw.numel() * self.raw.dtype.itemsize
  def scales(self) -> tuple[Tensor, ...]:
    if self._scales is None: self._scales = tuple(t.contiguous().realize() for t in _block_scales(self))
    return self._scales

def _half(b: Tensor) -> Tensor:
  """A float16 from its two little-endian bytes (b: (..., 2) uint8), as float32 (..., 1)."""
  u = b[..., 0:1].cast(dtypes.uint16) + b[..., 1:2].cast(dtypes.uint16) * 256
  return u.bitcast(dtypes.float16).float()

def _int(b: Tensor) -> Tensor: return b.cast(dtypes.int32)

def _block_scales(w: QuantizedWeight) -> tuple[Tensor, ...]:
  """The float scales (and mins) of each block or sub-block, decoded from the raw bytes."""
  raw = w.raw
  r = w.shape[0]
  if w.kind in ("Q8_0", "Q4_0"): return (_half(raw[..., 0:2]),)                 # (r, nb, 1)
  if w.kind == "Q4_K":
    d, dmin = _half(raw[..., 0:2]), _half(raw[..., 2:4])                        # (r, nb, 1)
    sc = _int(raw[..., 4:16])                                                  # (r, nb, 12)
    # the 6-bit scale and min of sub-block j: j < 4 in the low six bits of bytes j and j + 4; j >= 4 split between the
    # nibbles of byte j + 4 and the top two bits of bytes j - 4 and j
    lo_s, lo_m = sc[..., 0:4] & 63, sc[..., 4:8] & 63
    hi_s = (sc[..., 8:12] & 15) | ((sc[..., 0:4] >> 6) << 4)
    hi_m = (sc[..., 8:12] >> 4) | ((sc[..., 4:8] >> 6) << 4)
    return ((lo_s.cat(hi_s, dim=-1).float() * d).unsqueeze(-1), (lo_m.cat(hi_m, dim=-1).float() * dmin).unsqueeze(-1))   # (r, nb, 8, 1)
  if w.kind == "Q6_K":
    scales = raw[..., 192:208].bitcast(dtypes.int8).float().reshape(r, -1, 2, 4, 2, 1)   # (half n, group g, l // 16)
    return (scales * _half(raw[..., 208:210]).reshape(r, -1, 1, 1, 1, 1),)
  raise ValueError(f"dequantize: no layout for {w.kind!r}; known: {sorted(BLOCKS)}")

def dequantize(w: QuantizedWeight) -> Tensor:
  """The float32 (rows, cols) value of a quantized weight, as a lazy expression over its raw bytes (and its decoded
  block scales)."""
  r, k = w.shape
  raw = w.raw
  sc = w.scales()
  if w.kind == "Q8_0": return (sc[0] * raw[..., 2:34].bitcast(dtypes.int8).float()).reshape(r, k)
  if w.kind == "Q4_0":
    qs = _int(raw[..., 2:18])                                                  # (r, nb, 16): low nibbles 0-15, high 16-31
    return (sc[0] * ((qs & 15) - 8).cat((qs >> 4) - 8, dim=-1).float()).reshape(r, k)
  if w.kind == "Q4_K":
    qs = _int(raw[..., 16:144]).reshape(r, -1, 4, 32)                          # (r, nb, 4 pairs, 32 bytes)
    q = (qs & 15).unsqueeze(3).cat((qs >> 4).unsqueeze(3), dim=3)              # (r, nb, 4, 2, 32): sub-block 2p + h
    return (q.reshape(r, -1, 8, 32).float() * sc[0] - sc[1]).reshape(r, k)
  if w.kind == "Q6_K":
    ql = _int(raw[..., 0:128]).reshape(r, -1, 2, 64)                           # (r, nb, half n, 64)
    qh = _int(raw[..., 128:192]).reshape(r, -1, 2, 1, 32)                      # (r, nb, n, 1, 32)
    # within half n, value 32 * g + l (g = 0..3, l = 0..31): low four bits from ql[32 * (g % 2) + l] (low nibble for
    # g < 2, high for g >= 2), high two bits from qh[l] at bit 2 * g; scale index 2 * g + l // 16
    l0, l1 = ql[..., 0:32].unsqueeze(3), ql[..., 32:64].unsqueeze(3)
    low4 = (l0 & 15).cat(l1 & 15, l0 >> 4, l1 >> 4, dim=3)                     # (r, nb, n, 4, 32)
    high2 = ((qh >> 0) & 3).cat((qh >> 2) & 3, (qh >> 4) & 3, (qh >> 6) & 3, dim=3)
    q = ((low4 | (high2 << 4)) - 32).float().reshape(r, -1, 2, 4, 2, 16)
    return (q * sc[0]).reshape(r, k)
  raise ValueError(f"dequantize: no layout for {w.kind!r}; known: {sorted(BLOCKS)}")

# rows of x from which a quantized matmul decodes its weight once per chunk of output rows into a transient float
# buffer (at most CHUNK_BYTES) instead of inside the matmul's loads, where every row tile of x would decode it again (a
# 128-token prefill through a 32000 x 768 Q8_0 output layer took over 30 s fused); llama.cpp likewise dequantizes
# tiles for prompt processing. A decode step (one row) keeps the decode inside the matmul
CHUNK_ROWS, CHUNK_BYTES = 8, 8 << 20

def linear(x: Tensor, w: Tensor | QuantizedWeight, bias: Tensor | None = None) -> Tensor:
  """x @ w.T (+ bias) for a weight of shape (out, in), plain or quantized (dequantized inside the matmul's loads; for
  many rows of x, chunk by chunk of the weight's rows)."""
  if not isinstance(w, QuantizedWeight): y = x.matmul(w.T)
  elif x.numel() // x.shape[-1] < CHUNK_ROWS: y = x.matmul(dequantize(w).T)
  else:
    n, k = w.shape
    step = max(1, CHUNK_BYTES // (4 * k))
    deq = dequantize(w)
    parts = [x.matmul(deq[i:i + step].contiguous().T) for i in range(0, n, step)]
    y = parts[0].cat(*parts[1:], dim=-1) if len(parts) > 1 else parts[0]
  return y + bias if bias is not None else y
