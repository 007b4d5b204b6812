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
