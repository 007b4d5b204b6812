"""Fuzzing the file readers (issue 31, item 8): valid safetensors, idx (plain and .gz) and CIFAR-10 pickle files are
mutated (byte flips, truncations, appended bytes, header JSON fields replaced or dropped, sizes and offsets moved,
length prefixes changed) and read. Each read either loads (every tensor or array then fully readable) or raises the
format's one error type, SafetensorsError / DatasetFormatError (both ValueErrors), naming the file; anything else (a
TypeError, an EOFError, a NumPy error, a crash) fails. Valid files still load equal.

Normal suite: derandomized, few examples (a few seconds). A fuzz run: BAREGRAD_FUZZ=<examples per test> draws new
random examples each run (e.g. BAREGRAD_FUZZ=2000 python3 -m pytest tests/frontend/test_fuzz_readers.py)."""
from __future__ import annotations
import atexit, functools, gc, gzip, json, os, pickle, shutil, struct, tempfile
import numpy as np
from hypothesis import given, settings, strategies as st, HealthCheck
from baregrad import Tensor, dtypes, knobs
from baregrad.nn.state import safe_save, safe_load, SafetensorsError
from baregrad.datasets import read_idx, write_idx, DatasetFormatError
from baregrad.datasets import cifar10

N = knobs.read("BAREGRAD_FUZZ")
FUZZ = settings(max_examples=N or 200, deadline=None, derandomize=not N, database=None, suppress_health_check=list(HealthCheck))
DIR = tempfile.mkdtemp(prefix="bg-fuzz-")   # one folder for the module (hypothesis runs many examples per test)
atexit.register(shutil.rmtree, DIR, ignore_errors=True)

# ---- mutations of bytes
@st.composite
def mutated(draw, data: bytes) -> bytes:
  """data changed by one to three of: flipped bytes, a truncation, appended bytes, a removed or inserted run."""
  for _ in range(draw(st.integers(1, 3))):
    kind = draw(st.sampled_from(["flip", "flip", "truncate", "append", "cut", "insert", "int"]))
    n = len(data)
    if kind == "flip" and n:
      i = draw(st.integers(0, n - 1))
      data = data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
    elif kind == "truncate": data = data[:draw(st.integers(0, n))]
    elif kind == "append": data = data + draw(st.binary(min_size=1, max_size=16))
    elif kind == "cut" and n:
      i = draw(st.integers(0, n - 1))
      data = data[:i] + data[i + draw(st.integers(1, 16)):]
    elif kind == "insert":
      i = draw(st.integers(0, n))
      data = data[:i] + draw(st.binary(min_size=1, max_size=16)) + data[i:]
    elif kind == "int" and n >= 8:   # a length- or size-like field overwritten with an edge value
      i = draw(st.integers(0, n - 4))
      v = draw(st.sampled_from([0, 1, 255, 65536, 2**31 - 1, 2**31, 2**32 - 1]))
      data = data[:i] + struct.pack(draw(st.sampled_from(["<I", ">I"])), v) + data[i + 4:]
  return data

def write(name: str, data: bytes) -> str:
  p = os.path.join(DIR, name)
  with open(p, "wb") as f: f.write(data)
  return p

# ---- safetensors
def st_tensors() -> dict[str, Tensor]:
  rng = np.random.default_rng(1)
  return {"w": Tensor(rng.standard_normal((3, 4)).astype(np.float32)), "i": Tensor(np.array([-3, 7, 9], np.int16)),
          "m": Tensor(np.array([True, False, True])), "e": Tensor(np.zeros((0, 2), np.float32)),
          "b": Tensor(np.array([1.0, -2.5], np.float32)).cast(dtypes.bfloat16), "s": Tensor(np.array(5, np.int64)).reshape(()),
          "u": Tensor(np.arange(5, dtype=np.uint8))}

ST_PATH = os.path.join(DIR, "base.safetensors")

@functools.cache
def st_base() -> bytes:
  """The valid file every safetensors mutation starts from; made on first use, not at import (collecting the tests
  must not create tensors: their buffers would be freed during other modules' tests, which count memory)."""
  safe_save(st_tensors(), ST_PATH, metadata={"k": "v"})
  gc.collect()
  with open(ST_PATH, "rb") as f: return f.read()

def split(data: bytes) -> tuple[dict, bytes]:
  n = struct.unpack("<Q", data[:8])[0]
  return json.loads(data[8:8 + n]), data[8 + n:]

def join(header: dict, body: bytes, pad: int = 0) -> bytes:
  h = json.dumps(header).encode() + b" " * pad
  return struct.pack("<Q", len(h)) + h + body

json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=8)
                           | st.sampled_from([0, 1, -1, 2**31, 2**63, "F32", "U8", "BOOL", "BF16", "C64", [0, 0], [0, 8], [-1], [2**40]]),
                           lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=8)

@st.composite
def st_header_mutation(draw) -> bytes:
  header, body = split(st_base())
  names = [k for k in header if k != "__metadata__"]
  for _ in range(draw(st.integers(1, 3))):
    kind = draw(st.sampled_from(["field", "field", "offsets", "shape", "drop", "add", "entry", "meta", "body", "lenprefix"]))
    k = draw(st.sampled_from(names))
    if kind == "field" and isinstance(header[k], dict): header[k][draw(st.sampled_from(["dtype", "shape", "data_offsets"]))] = draw(json_values)
    elif kind == "offsets" and isinstance(header[k], dict):
      offs = header[k].get("data_offsets")
      if isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) for o in offs):
        header[k]["data_offsets"] = [offs[0] + draw(st.integers(-16, 16)), offs[1] + draw(st.integers(-16, 16))]
    elif kind == "shape" and isinstance(header[k], dict):
      header[k]["shape"] = draw(st.lists(st.sampled_from([0, 1, 2, 3, 4, 12, -1, 2**31, 2**62]), max_size=4))
    elif kind == "drop" and isinstance(header[k], dict) and header[k]:
      header[k].pop(draw(st.sampled_from(sorted(header[k]))))
    elif kind == "add": header[draw(st.text(max_size=4))] = draw(json_values)
    elif kind == "entry": header[k] = draw(json_values)
    elif kind == "meta": header["__metadata__"] = draw(json_values)
    elif kind == "body": body = draw(mutated(body))
  data = join(header, body, pad=draw(st.integers(0, 9)))
  if draw(st.booleans()):   # a length prefix that lies
    data = struct.pack("<Q", max(0, struct.unpack("<Q", data[:8])[0] + draw(st.integers(-20, 20)))) + data[8:]
  return data

def check_safetensors(data: bytes) -> None:
  p = write("fuzz.safetensors", data)
  try: out = safe_load(p)
  except SafetensorsError as e:
    assert str(e).startswith(p), str(e)
    return
  for k, t in out.items():   # what loads is whole: every tensor readable, of the size the header promised
    a = t.numpy()
    assert a.shape == t.shape, k

@FUZZ
@given(st.data())
def test_safetensors_byte_mutations(data):
  check_safetensors(data.draw(mutated(st_base())))

@FUZZ
@given(st_header_mutation())
def test_safetensors_header_mutations(data):
  check_safetensors(data)

ST_DTYPES = [(dtypes.float32, np.float32), (dtypes.float16, np.float16), (dtypes.int8, np.int8), (dtypes.uint16, np.uint16),
             (dtypes.int32, np.int32), (dtypes.int64, np.int64), (dtypes.float64, np.float64), (dtypes.bool, np.bool_)]

@FUZZ
@given(st.lists(st.tuples(st.sampled_from(range(len(ST_DTYPES))), st.lists(st.integers(0, 4), max_size=3)), min_size=0, max_size=4),
       st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2))
def test_safetensors_valid_files_load_equal(specs, meta):
  rng = np.random.default_rng(len(specs))
  ref = {}
  for i, (di, shape) in enumerate(specs):
    npd = ST_DTYPES[di][1]
    ref[f"t{i}"] = np.asarray(rng.random(shape) > 0.5 if npd is np.bool_ else (rng.standard_normal(shape) * 100).astype(npd))   # 0-d: an array
  p = os.path.join(DIR, "valid.safetensors")
  safe_save({k: Tensor(a).reshape(a.shape) for k, a in ref.items()}, p, metadata=meta or None)
  out = safe_load(p)
  assert list(out) == list(ref)
  for k, a in ref.items():
    assert out[k].shape == a.shape
    np.testing.assert_array_equal(out[k].numpy(), a)

def test_the_base_file_loads():
  st_base()
  out, ref = safe_load(ST_PATH), st_tensors()
  for k, t in ref.items(): np.testing.assert_array_equal(out[k].numpy() if k != "b" else out[k].float().numpy(), t.numpy() if k != "b" else t.float().numpy())

# ---- idx, plain and gzip
IDX_ARRAYS = {"u8": np.random.default_rng(2).integers(0, 256, (3, 4, 5), dtype=np.uint8), "i16": np.arange(-6, 6, dtype=np.int16).reshape(3, 4),
              "f32": np.linspace(-1, 1, 7, dtype=np.float32), "f64": np.array([], np.float64).reshape(0, 3)}
IDX_BASE = {}
for _k, _a in IDX_ARRAYS.items():
  for _gz in (False, True):
    write_idx(_p := os.path.join(DIR, f"base-{_k}" + (".gz" if _gz else "")), _a)
    with open(_p, "rb") as _f: IDX_BASE[(_k, _gz)] = _f.read()

def check_idx(data: bytes, gz: bool) -> None:
  p = write("fuzz-idx" + (".gz" if gz else ""), data)
  try: a = read_idx(p)
  except DatasetFormatError as e:
    assert str(e).startswith(p), str(e)
    return
  assert a.size == int(np.prod(a.shape)) and a.tobytes() is not None

@FUZZ
@given(st.sampled_from(sorted(IDX_BASE)), st.data())
def test_idx_file_mutations(which, data):
  """The file as stored mutated: for .gz that is the compressed bytes (CRC, lengths, deflate stream)."""
  check_idx(data.draw(mutated(IDX_BASE[which])), which[1])

@FUZZ
@given(st.sampled_from(sorted(IDX_ARRAYS)), st.booleans(), st.data())
def test_idx_content_mutations(which, gz, data):
  """The idx bytes mutated, then (for .gz) compressed soundly: the header and sizes are what the reader must check."""
  raw = IDX_BASE[(which, False)]
  if data.draw(st.booleans()):   # the header's fields: type code, dimension count, sizes
    code = data.draw(st.sampled_from([0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E, 0x00, 0x0A, 0xFF]))
    dims = data.draw(st.lists(st.sampled_from([0, 1, 2, 3, 4, 5, 7, 12, 2**16, 2**31, 2**32 - 1]), max_size=5))
    body = raw[4 + 4 * raw[3]:]
    raw = struct.pack(">HBB", 0, code, len(dims)) + struct.pack(f">{len(dims)}I", *dims) + body
  raw = data.draw(mutated(raw)) if data.draw(st.booleans()) else raw
  check_idx(gzip.compress(raw) if gz else raw, gz)

@FUZZ
@given(st.sampled_from(sorted(IDX_ARRAYS)), st.booleans())
def test_idx_valid_files_load_equal(which, gz):
  p = os.path.join(DIR, "valid-idx" + (".gz" if gz else ""))
  write_idx(p, IDX_ARRAYS[which])
  np.testing.assert_array_equal(read_idx(p), IDX_ARRAYS[which])

# ---- CIFAR-10 batch pickles (read by a restricted unpickler)
CIFAR_BASE = pickle.dumps({b"batch_label": b"b", b"labels": [1, 2, 3], b"data": np.arange(3 * 3072, dtype=np.uint8).reshape(3, 3072)})

CIFAR_DIR = os.path.join(DIR, "cifar")
os.makedirs(CIFAR_DIR)
for _n in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
  with open(os.path.join(CIFAR_DIR, _n), "wb") as _f: _f.write(CIFAR_BASE)

@FUZZ
@given(st.data())
def test_cifar_pickle_mutations(data):
  """One batch of a CIFAR-10 folder mutated: the dataset loads (then every value is a byte, every label 0..9) or
  raises DatasetFormatError naming that batch."""
  p = os.path.join(CIFAR_DIR, "data_batch_2")
  with open(p, "wb") as f: f.write(data.draw(mutated(CIFAR_BASE)))
  try: d = cifar10(CIFAR_DIR)
  except DatasetFormatError as e:
    assert "data_batch_2" in str(e), str(e)
    return
  assert d.x_train.shape[1:] == (3, 32, 32) and d.y_train.numpy().max() <= 9
