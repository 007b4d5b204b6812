"""Multi-device tensors and collectives on two handles of one QCOM GPU (the mock Adreno, MOCKGPU=1) and of one OpenCL
device (CL:0, CL:1): shard/gather, a sharded matmul against one device, allreduce sum of float32, int32 and float16.
Each kind runs in its own process (the mock is chosen when a device first opens). Copies between the handles go
through the host: KGSL and OpenCL give no queued device-to-device copy here."""
import os, subprocess, sys, textwrap
import pytest
from tests.paths import REPO

SCRIPT = textwrap.dedent('''
  import ctypes, sys, numpy as np
  from baregrad import Tensor, dtypes, knobs
  from baregrad.hal.device import Device
  from baregrad.tensor import collectives as C
  D = sys.argv[1].split(",")
  r = np.random.default_rng(0)
  x, w = r.standard_normal((6, 8)).astype(np.float32), r.standard_normal((8, 4)).astype(np.float32)
  for dim in (0, 1):
    m = Tensor(x, device=D[0]).shard(D, dim)
    assert [p.device for p in m.parts] == D and m.shape == x.shape
    for d in D: np.testing.assert_array_equal(m.to(d).numpy(), x)
  one = (Tensor(x, device=D[0]) @ Tensor(w, device=D[0])).numpy()
  out = Tensor(x, device=D[0]).shard(D, 1) @ Tensor(w, device=D[0]).shard(D, 0)   # contracts the split axis: allreduce
  assert out.axis is None
  np.testing.assert_allclose(out.numpy(), one, rtol=1e-5, atol=1e-5)
  out = Tensor(x, device=D[0]).shard(D, 0) @ Tensor(w, device=D[0]).to(D)
  assert out.axis == 0
  np.testing.assert_allclose(out.numpy(), one, rtol=1e-5, atol=1e-5)
  done = []
  for name in ("float32", "int32", "float16"):
    dt = getattr(dtypes, name)
    if not all(Device[d].supports_dtype(dt) for d in D): continue
    ints = r.integers(-8, 8, (len(D), 33))
    ts = [Tensor(ints[i].tolist(), dtype=dt, device=d) for i, d in enumerate(D)]
    res = [o.numpy() for o in C.realize(C.allreduce(ts, "sum"))]
    for o, d in zip(C.allreduce(ts, "sum"), D): assert o.device == d
    np.testing.assert_array_equal(res[0], ints.sum(0).astype(res[0].dtype), err_msg=name)
    assert all((o == res[0]).all() for o in res), name
    done.append(name)
  if D[0].startswith("QCOM"):   # two files of the one KGSL GPU: one port, each its own file and context
    a, b = Device[D[0]], Device[D[1]]
    assert a.kgsl.port is b.kgsl.port and a.kgsl.fd != b.kgsl.fd and a.ctx != b.ctx, (a.kgsl.fd, b.kgsl.fd, a.ctx, b.ctx)
  if D[0].startswith("CL"):     # each handle its own context and queue
    a, b = Device[D[0]], Device[D[1]]
    addr = lambda p: ctypes.cast(p, ctypes.c_void_p).value  # noqa: E731
    assert a is not b and addr(a.ctx) != addr(b.ctx) and addr(a.queue) != addr(b.queue)
  print("done", ",".join(done))
  print("ok")
''')

def _run(devices: str, timeout: int = 300, **env: str) -> str:
  p = subprocess.run([sys.executable, "-c", SCRIPT, devices], env=dict(os.environ, PYTHONPATH=str(REPO), **env),
                     capture_output=True, text=True, timeout=timeout)
  assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stdout + p.stderr
  return p.stdout.split("done ")[1].split()[0]

def test_two_qcom_handles_of_one_mock_adreno():
  pytest.importorskip("tinymesa")
  done = _run("QCOM:0,QCOM:1", MOCKGPU="1", DEV="QCOM")
  assert done.split(",") == ["float32", "int32", "float16"], done

def test_two_cl_handles_of_one_opencl_device():
  """CL:0 and CL:1 with CL_SHARE_DEVICE=1: two contexts and queues on the one OpenCL device PoCL lists (or two
  devices where OpenCL lists two)."""
  from baregrad.hal import DeviceUnavailable
  try:
    from baregrad.drivers.cl import list_devices
    list_devices()
  except (DeviceUnavailable, ImportError, OSError) as e: pytest.skip(f"no OpenCL ICD or device here: {e}")
  done = _run("CL:0,CL:1", timeout=600, CL_SHARE_DEVICE="1", DEV="CL")
  assert done.split(",")[:2] == ["float32", "int32"], done

@pytest.mark.parametrize("devices,named", [
  (["QCOM:0", "NV:0"], r"QCOM:0 \(QCOM\), NV:0 \(NV\)"), (["CL:0", "CPU:1"], r"CL:0 \(CL\), CPU:1 \(CPU\)"),
  (["QCOM:0", "QCOM:1", "AMD:0"], r"QCOM:1 \(QCOM\), AMD:0 \(AMD\)"), (["CL:1", "NV:1"], r"CL:1 \(CL\), NV:1 \(NV\)")])
def test_mixes_that_cannot_exchange_are_refused_by_name(devices, named):
  """A device list mixing kinds is refused before any device opens (none of these need to exist), naming each."""
  import numpy as np
  from baregrad import Tensor
  from baregrad.tensor import collectives as C
  from baregrad.tensor.multi import MultiTensor
  x = Tensor(np.arange(8, dtype=np.float32))
  with pytest.raises(ValueError, match=r"mixes kinds that cannot exchange: .*" + named): x.shard(devices)
  with pytest.raises(ValueError, match=named): x.to(devices)
  with pytest.raises(ValueError, match=named): C.broadcast(x, devices)
  with pytest.raises(ValueError, match=named): MultiTensor.replicate(x, devices)
