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
