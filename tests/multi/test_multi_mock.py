"""Multi-device tensors and collectives on 2-3 mock GPUs (MOCKGPU=1 MOCKGPU_COUNT=n), each kind in its own process
because the mocks are chosen when a device first opens."""
import os, subprocess, sys, textwrap
import pytest
from tests.paths import REPO

SCRIPT = textwrap.dedent('''
  import sys, numpy as np
  from baregrad import Tensor, knobs
  from baregrad.tensor import collectives as C
  kind, n = sys.argv[1], int(sys.argv[2])
  D = [f"{kind}:{i}" for i in range(n)]
  r = np.random.default_rng(0)
  x, w = r.standard_normal((8, 6)).astype(np.float32), r.standard_normal((6, 4)).astype(np.float32)
  np.testing.assert_array_equal(Tensor(x, device=D[0]).shard(D, 0).to(D[-1]).numpy(), x)
  m = Tensor(x, device=D[0]).shard(D, 1)
  np.testing.assert_allclose((m @ Tensor(w, device=D[0]).shard(D, 0)).numpy(), x @ w, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(m.sum(1).numpy(), x.sum(1), rtol=1e-5, atol=1e-5)
  ts = [Tensor(r.standard_normal(64).astype(np.float32), device=d) for d in D]
  for ring in (0, 1 << 40):
    with knobs.Context(RING_MIN_BYTES=ring): out = [o.numpy() for o in C.realize(C.allreduce(ts))]
    np.testing.assert_allclose(out[0], sum(t.numpy() for t in ts), rtol=1e-5, atol=1e-5)
    assert all((o == out[0]).all() for o in out)
  print("ok")
''')

@pytest.mark.parametrize("kind,n", [("NV", 2), ("AMD", 3)])
def test_multi_on_mock_gpus(kind, n):
  env = dict(os.environ, MOCKGPU="1", MOCKGPU_COUNT=str(n), DEV=kind, PYTHONPATH=str(REPO))
  p = subprocess.run([sys.executable, "-c", SCRIPT, kind, str(n)], env=env, capture_output=True, text=True, timeout=300)
  assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stdout + p.stderr

DTYPE_SCRIPT = textwrap.dedent('''
  import sys, numpy as np
  from baregrad import Tensor, dtypes, knobs
  from baregrad.hal.device import Device
  from baregrad.tensor import collectives as C
  kind, n, names = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
  D = [f"{kind}:{i}" for i in range(n)]
  r = np.random.default_rng(1)
  done = []
  for name in names:
    dt = getattr(dtypes, name)
    if not all(Device[d].supports_dtype(dt) for d in D): continue
    ints = r.integers(0, 4, (n, 37))
    ts = [Tensor(ints[i].tolist(), dtype=dt, device=d) for i, d in enumerate(D)]
    host = np.stack([t.numpy() for t in ts])
    for ring in ((0, 1 << 40) if n >= 3 else (1 << 40,)):
      with knobs.Context(RING_MIN_BYTES=ring):
        for op, fn in (("sum", np.sum), ("max", np.max), ("min", np.min)):
          want = np.any(host, axis=0) if dt == dtypes.bool and op == "sum" else fn(host, axis=0)
          out = C.realize(C.allreduce(ts, op))
          for o, d in zip(out, D):
            assert o.device == d
            np.testing.assert_array_equal(o.numpy(), want.astype(o.numpy().dtype), err_msg=f"{name} {op} ring={ring < 1 << 40} on {d}")
    done.append(name)
  # every copy of the collectives went through a peer mapping (the destination's copy engine reading the source's memory)
  paths = {Device[b].peer_links[a].path for a in D for b in D if a != b and a in Device[b].peer_links}
  assert paths == {"peer-mapped"}, paths
  print("done", ",".join(done))
  print("ok")
''')

ALL_DTYPES = "float32,float16,float64,int8,uint8,int16,int32,int64,uint32,bool"

@pytest.mark.parametrize("n,names", [(2, ALL_DTYPES), (3, ALL_DTYPES), (4, "float32,int8,bool")], ids=["2gpus", "3gpus", "4gpus"])
def test_allreduce_every_dtype_over_amd_peer_mappings(n, names):
  """Allreduce (sum, max, min; direct and, on 3+ GPUs, the ring) of every dtype the GPUs support, on n mock AMD GPUs of
  one KFD process whose copies read each other's VRAM through peer mappings."""
  env = dict(os.environ, MOCKGPU="1", MOCKGPU_COUNT=str(n), DEV="AMD", PYTHONPATH=str(REPO))
  env.pop("MOCKGPU_AMD_ARCH", None)
  p = subprocess.run([sys.executable, "-c", DTYPE_SCRIPT, "AMD", str(n), names], env=env, capture_output=True, text=True, timeout=600)
  assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stdout + p.stderr
  done = p.stdout.split("done ")[1].split()[0].split(",")
  assert {"float32", "int8", "bool"} <= set(done), done

@pytest.mark.parametrize("n,names", [(2, ALL_DTYPES), (3, "float32,float16,int8,int32,bool"), (4, "float32,int8")], ids=["2gpus", "3gpus", "4gpus"])
def test_allreduce_every_dtype_over_nv_peer_mappings(n, names):
  """The same on n mock NV GPUs of one kernel: each destination's copy engine reads the source's video memory through
  a UVM peer mapping in its own VA space (drivers/nv/peer.py)."""
  env = dict(os.environ, MOCKGPU="1", MOCKGPU_COUNT=str(n), DEV="NV", PYTHONPATH=str(REPO))
  env.pop("MOCKGPU_ARCH", None)
  p = subprocess.run([sys.executable, "-c", DTYPE_SCRIPT, "NV", str(n), names], env=env, capture_output=True, text=True, timeout=600)
  assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stdout + p.stderr
  done = p.stdout.split("done ")[1].split()[0].split(",")
  assert {"float32", "int8"} <= set(done), done
