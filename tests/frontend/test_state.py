"""State dicts (names, round trips, error messages) and the safetensors format."""
import json, struct
import numpy as np
import pytest
import baregrad.nn as nn
from baregrad import Tensor, dtypes
from baregrad.nn.state import safe_save, safe_load, safe_header, safe_load_metadata, SafetensorsError

class Block:
  def __init__(self):
    self.conv = nn.Conv2d(2, 3, 3)
    self.bn = nn.BatchNorm2d(3)
    self.layers = [nn.Linear(3, 4), nn.Linear(4, 2, bias=False)]
    self.heads = {"a": nn.Linear(2, 2)}
    self._cache = Tensor.ones(2)  # private: not state

def test_state_dict_names():
  keys = list(nn.get_state_dict(Block()))
  assert keys == ["conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked",
                  "layers.0.weight", "layers.0.bias", "layers.1.weight", "heads.a.weight", "heads.a.bias"]
  assert list(nn.get_state_dict(nn.Linear(2, 2), prefix="fc")) == ["fc.weight", "fc.bias"]

def test_parameters_are_trainable_tensors_once():
  b = Block()
  b.alias = b.layers[0]  # the same module twice: its parameters once
  ps = nn.get_parameters(b)
  assert len(ps) == 9 and all(p.requires_grad for p in ps)
  assert len({id(p) for p in ps}) == len(ps)

def test_torch_names_match():
  torch = pytest.importorskip("torch")
  tm = torch.nn.BatchNorm2d(3)
  assert list(nn.get_state_dict(nn.BatchNorm2d(3))) == list(tm.state_dict())

def test_round_trip_through_state_dict():
  a, b = Block(), Block()
  sd = {k: v.numpy() for k, v in nn.get_state_dict(a).items()}
  res = nn.load_state_dict(b, sd)
  assert res == {"missing_keys": [], "unexpected_keys": []}
  for k, v in nn.get_state_dict(b).items(): np.testing.assert_array_equal(v.numpy(), sd[k])
  assert nn.get_state_dict(b)["conv.weight"].requires_grad  # still a parameter

def test_load_errors_name_the_keys():
  sd = {k: v for k, v in nn.get_state_dict(Block()).items()}
  del sd["bn.running_var"]
  sd["extra.weight"] = Tensor.ones(2)
  with pytest.raises(KeyError) as e: nn.load_state_dict(Block(), sd)
  msg = str(e.value)
  assert "missing keys: bn.running_var" in msg and "unexpected keys: extra.weight" in msg
  res = nn.load_state_dict(Block(), sd, strict=False)
  assert res == {"missing_keys": ["bn.running_var"], "unexpected_keys": ["extra.weight"]}

def test_load_shape_mismatch_is_named():
  sd = dict(nn.get_state_dict(nn.Linear(3, 4)))
  sd["weight"] = Tensor.ones(4, 5)
  with pytest.raises(ValueError, match=r"weight: checkpoint has shape \(4, 5\), model has \(4, 3\)"): nn.load_state_dict(nn.Linear(3, 4), sd)

DTYPES = [(dtypes.float32, np.float32), (dtypes.float16, np.float16), (dtypes.float64, np.float64), (dtypes.int8, np.int8),
          (dtypes.int16, np.int16), (dtypes.int32, np.int32), (dtypes.int64, np.int64), (dtypes.uint8, np.uint8), (dtypes.bool, np.bool_)]

def test_safetensors_round_trip(tmp_path):
  rng = np.random.default_rng(0)
  sd, ref = {}, {}
  for d, npd in DTYPES:
    a = (rng.standard_normal((3, 5)) * 50).astype(npd) if npd != np.bool_ else rng.random((3, 5)) > 0.5
    sd[f"t.{npd.__name__}"], ref[f"t.{npd.__name__}"] = Tensor(a), a
  bf = np.array([1.0, -2.5, 3.140625, 0.0], np.float32)  # exact in bfloat16
  sd["t.bf16"] = Tensor(bf).cast(dtypes.bfloat16)
  sd["scalar"] = Tensor(np.array(7, np.int64)).reshape(())
  sd["empty"] = Tensor(np.zeros((0, 4), np.float32))
  p = tmp_path / "m.safetensors"
  safe_save(sd, p, metadata={"format": "pt", "note": "hi"})
  raw = p.read_bytes()
  n = struct.unpack("<Q", raw[:8])[0]
  assert n % 8 == 0 and json.loads(raw[8:8 + n])["t.float32"]["dtype"] == "F32"
  assert safe_load_metadata(p) == {"format": "pt", "note": "hi"}
  out = safe_load(p)
  assert list(out) == list(sd)
  for k, a in ref.items():
    assert out[k].dtype == sd[k].dtype and out[k].shape == a.shape
    np.testing.assert_array_equal(out[k].numpy(), a)
  assert out["t.bf16"].dtype == dtypes.bfloat16 and np.array_equal(out["t.bf16"].numpy(), bf)
  assert out["scalar"].shape == () and out["scalar"].item() == 7
  assert out["empty"].shape == (0, 4)

def test_model_save_load(tmp_path):
  a, b = Block(), Block()
  safe_save(nn.get_state_dict(a), tmp_path / "b.safetensors")
  nn.load_state_dict(b, safe_load(tmp_path / "b.safetensors"))
  for (k, x), y in zip(nn.get_state_dict(a).items(), nn.get_state_dict(b).values()): np.testing.assert_array_equal(x.numpy(), y.numpy(), err_msg=k)

def _hand_written(path, tensors: dict, metadata=None):
  header, blobs, off = {}, [], 0
  if metadata: header["__metadata__"] = metadata
  for k, (code, a) in tensors.items():
    b = a.astype(a.dtype.newbyteorder("<")).tobytes()
    header[k] = {"dtype": code, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b); off += len(b)
  h = json.dumps(header).encode()
  path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))

def test_reads_file_from_official_writer_or_by_hand(tmp_path):
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  b = np.array([[1, -2], [3, 4]], np.int64)
  p = tmp_path / "ext.safetensors"
  try:
    from safetensors.numpy import save_file
    save_file({"a": a, "b": b}, str(p), metadata={"k": "v"})
  except ImportError:
    _hand_written(p, {"a": ("F32", a), "b": ("I64", b)}, {"k": "v"})  # header not padded to 8: readers must not care
  out = safe_load(p)
  np.testing.assert_array_equal(out["a"].numpy(), a)
  np.testing.assert_array_equal(out["b"].numpy(), b)
  assert safe_load_metadata(p) == {"k": "v"}

def test_hand_written_unpadded_header(tmp_path):
  a = np.arange(6, dtype=np.int16).reshape(2, 3)
  _hand_written(tmp_path / "h.safetensors", {"x": ("I16", a)})
  np.testing.assert_array_equal(safe_load(tmp_path / "h.safetensors")["x"].numpy(), a)

def test_official_reader_reads_ours(tmp_path):
  st = pytest.importorskip("safetensors.numpy")
  safe_save({"w": Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)), "i": Tensor(np.array([1, 2], np.int32))}, tmp_path / "o.safetensors",
            metadata={"m": "1"})
  out = st.load_file(str(tmp_path / "o.safetensors"))
  np.testing.assert_array_equal(out["w"], np.arange(6, dtype=np.float32).reshape(2, 3))
  assert out["i"].dtype == np.int32

def test_corrupt_files_are_named(tmp_path):
  p = tmp_path / "bad.safetensors"
  p.write_bytes(b"\x01\x00")
  with pytest.raises(SafetensorsError, match="too short"): safe_header(p)
  p.write_bytes(struct.pack("<Q", 1000) + b"{}")
  with pytest.raises(SafetensorsError, match="runs past"): safe_header(p)
  h = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
  p.write_bytes(struct.pack("<Q", len(h)) + h + b"\0" * 8)
  with pytest.raises(SafetensorsError, match="'x'.*data_offsets"): safe_load(p)
  h = json.dumps({"x": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}).encode()
  p.write_bytes(struct.pack("<Q", len(h)) + h + b"\0" * 8)
  with pytest.raises(SafetensorsError, match="unsupported dtype 'C64'"): safe_load(p)

# ---- issue 31: every header field checked, errors name the file and the tensor; failed saves leave nothing behind
def _raw_file(p, header, data: bytes = b"") -> None:
  h = header if isinstance(header, bytes) else json.dumps(header).encode()
  p.write_bytes(struct.pack("<Q", len(h)) + h + data)

def _one(**kw):
  return {"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], **kw}}

@pytest.mark.parametrize("header,data,pat", [
  (_one(shape=[-2]), b"\0" * 8, r"tensor 'x' has shape \[-2\]; expected a list of non-negative integers"),
  (_one(shape=[2**40, 2**40]), b"\0" * 8, r"tensor 'x' has shape .*fewer than 2\*\*63 bytes"),
  (_one(shape=[0, 2**70], data_offsets=[0, 0]), b"", r"tensor 'x' has shape .*fewer than 2\*\*63 bytes"),
  (_one(shape=[0] * 65, data_offsets=[0, 0]), b"", r"tensor 'x' has shape .*at most 64 dimensions"),
  (_one(shape=[True, 1]), b"\0" * 8, r"tensor 'x' has shape \[true, 1\]; expected a list of non-negative integers"),
  (_one(shape=2), b"\0" * 8, r"tensor 'x' has shape 2; expected a list"),
  (_one(shape=[2.0]), b"\0" * 8, r"tensor 'x' has shape \[2.0\]"),
  (_one(dtype=["F32"]), b"\0" * 8, r"tensor 'x' has unsupported dtype \[\"F32\"\]; expected one of BOOL, U8"),
  (_one(dtype=None), b"\0" * 8, r"tensor 'x' has unsupported dtype null"),
  (_one(data_offsets=["0", "8"]), b"\0" * 8, r"tensor 'x' has data_offsets \[\"0\", \"8\"\]; expected \[begin, end\], two integers"),
  (_one(data_offsets=[0, 4, 8]), b"\0" * 8, r"tensor 'x' has data_offsets \[0, 4, 8\]"),
  (_one(data_offsets=[8, 0]), b"\0" * 8, r"tensor 'x' .*data_offsets \[8, 0\]; expected an end - begin of 8"),
  (_one(data_offsets=[-8, 0]), b"\0" * 8, r"tensor 'x' .*data_offsets \[-8, 0\]"),
  (_one(data_offsets=[0, 2**64 + 8]), b"\0" * 8, r"tensor 'x' .*data_offsets \[0, 18446744073709551624\]"),
  ({"x": [1, 2]}, b"", r"tensor 'x' is \[1, 2\]; expected an object with dtype, shape and data_offsets"),
  ({"x": {"dtype": "F32", "shape": [1]}}, b"", r"tensor 'x' is .*expected an object with dtype, shape and data_offsets"),
  ({"__metadata__": {"a": 1}}, b"", r"__metadata__ is \{\"a\": 1\}; expected an object of strings"),
  ({"__metadata__": "a"}, b"", r"__metadata__ is 'a'"),
  ([1, 2], b"", r"header is a JSON list; expected an object"),
  (b'{"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "x": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}}',
   b"\0" * 8, r"the name 'x' appears twice"),
  (b"\xff\xfe{}", b"", r"not valid UTF-8 JSON"),
  (b"[" * 50000, b"", r"not valid UTF-8 JSON"),
  (b'{"x": 1' + b"1" * 5000 + b"}", b"", r"not valid UTF-8 JSON"),
  ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}},
   b"\0" * 8, r"tensors 'a' and 'b' overlap \(bytes \[4, 8\) of the data section\)"),
  ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8, r"bytes \[0, 4\) of the data section belong to no tensor \(before 'a'\)"),
  (_one(), b"\0" * 12, r"the data section has 12 bytes but the tensors end at 8"),
])
def test_malformed_header_names_file_tensor_and_expectation(tmp_path, header, data, pat):
  p = tmp_path / "bad.safetensors"
  _raw_file(p, header, data)
  for read in (safe_header, safe_load, safe_load_metadata):
    with pytest.raises(SafetensorsError, match=pat) as e: read(p)
    assert str(e.value).startswith(str(p)), str(e.value)

def test_header_size_is_bounded(tmp_path, monkeypatch):
  from baregrad.tensor.nn import state
  p = tmp_path / "big.safetensors"
  _raw_file(p, b"{}" + b" " * 98)
  safe_header(p)
  monkeypatch.setattr(state, "MAX_HEADER", 64)
  with pytest.raises(SafetensorsError, match=rf"{p}: header length 100 exceeds the format's limit of 64 bytes"): safe_header(p)

def test_bool_bytes_are_zero_or_one(tmp_path):
  p = tmp_path / "b.safetensors"
  _raw_file(p, {"m": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}}, b"\x01\x00\x07")
  with pytest.raises(SafetensorsError, match=r"tensor 'm' \(BOOL\) holds byte 7 at element 2; expected 0 or 1"): safe_load(p)
  _raw_file(p, {"m": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}}, b"\x01\x00\x01")
  assert safe_load(p)["m"].numpy().tolist() == [True, False, True]

def test_zero_sized_and_out_of_order_tensors_still_load(tmp_path):
  """What the format allows stays allowed: empty tensors (any offset inside the section), tensors stored in another
  order than the header lists them."""
  p = tmp_path / "ok.safetensors"
  _raw_file(p, {"b": {"dtype": "I16", "shape": [2], "data_offsets": [4, 8]}, "e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [4, 4]},
                "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}, bytes([1, 2, 3, 4, 5, 0, 6, 0]))
  out = safe_load(p)
  assert out["a"].numpy().tolist() == [1, 2, 3, 4] and out["b"].numpy().tolist() == [5, 6] and out["e"].shape == (0, 3)

def test_failed_save_keeps_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
  """A full disk (the write raises ENOSPC, as it would on a full file system) or an interrupt mid-save: the old file
  is intact, no temporary file remains, and the error names the file."""
  import errno, os
  from baregrad.tensor.nn import state
  p = tmp_path / "m.safetensors"
  safe_save({"w": Tensor(np.arange(4, dtype=np.float32))}, p)
  old = p.read_bytes()
  real = os.fdopen
  class Full:
    def __init__(self, f): self.f, self.n = f, 0
    def __enter__(self): return self
    def __exit__(self, *a): self.f.close()
    def write(self, b):
      self.n += 1
      if self.n > 2: raise OSError(errno.ENOSPC, "No space left on device")
      return self.f.write(b)
    def __getattr__(self, k): return getattr(self.f, k)
  monkeypatch.setattr(state.os, "fdopen", lambda fd, *a, **k: Full(real(fd, *a, **k)))
  with pytest.raises(OSError, match=rf"No space left on device: '{p}'") as e:
    safe_save({"w": Tensor(np.arange(1000, dtype=np.float32))}, p)
  assert e.value.errno == errno.ENOSPC
  monkeypatch.undo()
  assert p.read_bytes() == old and os.listdir(tmp_path) == ["m.safetensors"]
  monkeypatch.setattr(state.os, "fsync", lambda fd: (_ for _ in ()).throw(KeyboardInterrupt()))
  with pytest.raises(KeyboardInterrupt): safe_save({"w": Tensor(np.arange(1000, dtype=np.float32))}, p)
  assert p.read_bytes() == old and os.listdir(tmp_path) == ["m.safetensors"]

def test_saved_file_gets_ordinary_permissions(tmp_path):
  import os
  um = os.umask(0o022); os.umask(um)
  safe_save({"w": Tensor(np.arange(4, dtype=np.float32))}, tmp_path / "m.safetensors")
  assert os.stat(tmp_path / "m.safetensors").st_mode & 0o777 == 0o666 & ~um
