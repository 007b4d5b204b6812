"""baregrad.distributed on 2 MPI processes on localhost (mpirun, Open MPI): training equals one process on the global
batch, shape disagreement names each rank's, a rank that never arrives makes the other raise within DIST_TIMEOUT_S."""
import os, shutil, subprocess, sys, textwrap, time
import pytest
from tests.paths import REPO

pytest.importorskip("mpi4py")
if shutil.which("mpirun") is None: pytest.skip("mpirun (openmpi-bin) is not installed", allow_module_level=True)

def mpirun(args, env=None, timeout=240):
  e = dict(os.environ, PYTHONPATH=str(REPO), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **(env or {}))
  return subprocess.run(["mpirun", "-np", "2", "--oversubscribe", sys.executable, *args], env=e, capture_output=True, text=True, timeout=timeout)

def script(tmp_path, body):
  p = tmp_path / "prog.py"
  p.write_text(textwrap.dedent(body))
  return str(p)

@pytest.mark.parametrize("bucket_kib", ["4096", "1"], ids=["one_bucket", "four_buckets"])
def test_ddp_matches_one_process(bucket_kib):
  p = mpirun([str(REPO / "examples" / "mnist_ddp.py"), "--check", "--steps", "4", "--bucket-kib", bucket_kib])
  assert p.returncode == 0, p.stdout + p.stderr
  assert "vs one process on the global batch" in p.stdout

def test_ddp_exchange_starts_during_backward(tmp_path):
  # each bucket's allreduce is started inside backward(), before the next bucket's gradients are computed, last layer
  # first; step() only waits for them
  p = mpirun([script(tmp_path, '''
    import numpy as np
    import baregrad.nn as nn
    from baregrad import Tensor, distributed as dist
    from baregrad.nn import optim
    dist.init()
    Tensor.manual_seed(0)
    l1, l2 = nn.Linear(6, 5), nn.Linear(5, 3)
    opt = dist.DistributedOptimizer(optim.SGD([l1.weight, l1.bias, l2.weight, l2.bias], lr=0.1), bucket_bytes=80)
    x = Tensor(np.full((4, 6), dist.rank() + 1.0, np.float32))
    loss = l2(l1(x).relu()).sum()
    opt.zero_grad(); loss.backward()
    assert [[p.shape for p in b] for b in opt.buckets()] == [[(3,), (3, 5)], [(5,)], [(5, 6)]], opt.buckets()
    assert opt.events == [("ready", 0), ("start", 0), ("ready", 1), ("start", 1), ("ready", 2), ("start", 2)], opt.events
    assert len(opt._pending) == 3   # in flight when backward() returns
    local = l1.weight.grad.numpy()
    opt.step()
    assert opt.events[6:] == [("done", 0), ("done", 1), ("done", 2)], opt.events
    np.testing.assert_allclose(l1.weight.grad.numpy(), dist.allreduce(Tensor(local), "mean").numpy(), rtol=1e-6)
    print("ok", dist.rank())
  ''')])
  assert p.returncode == 0 and p.stdout.count("ok") == 2, p.stdout + p.stderr

def test_collectives_on_tensors(tmp_path):
  p = mpirun([script(tmp_path, '''
    import numpy as np
    from baregrad import Tensor, dtypes, distributed as dist
    dist.init(); r, n = dist.rank(), dist.world_size()
    for dt in (dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16, dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64):
      t = Tensor([r + 1, 2 * r, 5], dtype=dt)
      assert dist.allreduce(t).tolist() == [3, 2, 10], dist.allreduce(t).tolist()
      assert dist.allreduce(t, "max").tolist() == [2, 2, 5]
      assert dist.broadcast(t, src=1).tolist() == [2, 2, 5]
    b = Tensor([r == 1, False, True], dtype=dtypes.bool)
    assert dist.allreduce(b).tolist() == [True, False, True] and dist.allreduce(b).dtype == dtypes.bool
    dist.barrier()
    print("ok", r)
  ''')])
  assert p.returncode == 0 and p.stdout.count("ok") == 2, p.stdout + p.stderr

def test_shape_disagreement_names_each_rank(tmp_path):
  p = mpirun([script(tmp_path, '''
    from baregrad import Tensor, distributed as dist
    dist.init()
    try: dist.allreduce(Tensor.ones(3 + dist.rank()))
    except ValueError as e: print("ERR", e)
  ''')])
  assert "rank 0: (3,) dtypes.float, rank 1: (4,) dtypes.float" in p.stdout, p.stdout + p.stderr

def test_ddp_bucket_layouts_disagreeing_name_each_rank(tmp_path):
  p = mpirun([script(tmp_path, '''
    import baregrad.nn as nn
    from baregrad import Tensor, distributed as dist
    from baregrad.nn import optim
    dist.init()
    lin = nn.Linear(4, 3 + dist.rank())   # rank 1's model is larger
    opt = dist.DistributedOptimizer(optim.SGD([lin.weight, lin.bias], lr=0.1))
    try: lin(Tensor.ones(2, 4)).sum().backward()
    except ValueError as e: print("ERR", e)
  ''')])
  assert "gradient buckets disagree across ranks: rank 0: 1 buckets" in p.stdout and "15 elements, rank 1: 1 buckets" in p.stdout, p.stdout + p.stderr

def test_missing_rank_raises_within_timeout(tmp_path):
  t0 = time.monotonic()
  p = mpirun([script(tmp_path, '''
    import os, sys, time
    from baregrad import Tensor, distributed as dist
    dist.init()
    if dist.rank() == 1: time.sleep(120)   # never reaches the allreduce
    try: dist.allreduce(Tensor.ones(4))
    except TimeoutError as e: print("TIMEOUT", e, flush=True); os._exit(3)
  ''')], env={"DIST_TIMEOUT_S": "2"}, timeout=100)
  assert "TIMEOUT" in p.stdout and "did not complete within DIST_TIMEOUT_S=2.0 s" in p.stdout, p.stdout + p.stderr
  assert time.monotonic() - t0 < 60

def test_dead_rank_ends_the_job(tmp_path):
  # a rank that dies (exits without finalizing) ends the job: mpirun stops the others, or their wait times out;
  # nobody hangs and nobody completes the allreduce alone
  t0 = time.monotonic()
  p = mpirun([script(tmp_path, '''
    import os
    from baregrad import Tensor, distributed as dist
    dist.init()
    if dist.rank() == 1: os._exit(0)   # dies
    try: dist.allreduce(Tensor.ones(4))
    except TimeoutError as e: print("TIMEOUT", e, flush=True); os._exit(3)
    print("COMPLETED", flush=True)
  ''')], env={"DIST_TIMEOUT_S": "5"}, timeout=100)
  assert p.returncode != 0 and "COMPLETED" not in p.stdout, p.stdout + p.stderr
  assert "TIMEOUT" in p.stdout or "exiting improperly" in p.stdout + p.stderr, p.stdout + p.stderr
  assert time.monotonic() - t0 < 60

def test_distributed_step_matches_one_process(tmp_path):
  """DistributedStep (two jit replays around the host allreduce): 2 ranks, each half of every global batch, train to
  the weights one process reaches on the global batch (to float tolerance), equal on both ranks; the replays were
  captured once each; a rank whose gradient layout differs is named with the other's."""
  p = mpirun([script(tmp_path, '''
    import numpy as np
    import baregrad.nn as nn
    from baregrad import Tensor, distributed as dist
    from baregrad.nn import optim
    dist.init(); r, n = dist.rank(), dist.world_size()
    def make():
      Tensor.manual_seed(0)
      return nn.Linear(6, 8), nn.Linear(8, 3)
    def loss_of(m, x, y): return nn.cross_entropy(m[1](m[0](Tensor(x)).relu()), Tensor(y))
    mine, ref = make(), make()
    step = dist.DistributedStep(optim.SGD(nn.get_parameters(list(mine)), lr=0.1, momentum=0.9), lambda x, y: loss_of(mine, x, y))
    ref_opt = optim.SGD(nn.get_parameters(list(ref)), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    for _ in range(5):
      x, y = rng.standard_normal((8, 6)).astype(np.float32), rng.integers(0, 3, 8).astype(np.int32)
      step(x[r * 4:(r + 1) * 4], y[r * 4:(r + 1) * 4])
      loss = loss_of(ref, x, y); ref_opt.zero_grad(); loss.backward(); ref_opt.step()
    for a, b in zip(nn.get_parameters(list(mine)), nn.get_parameters(list(ref))):
      np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
      np.testing.assert_array_equal(dist.broadcast(a, src=0).numpy(), a.numpy())   # every rank holds the same weights
    assert len(step._grads.captured) == 1 and len(step._update.captured) == 1 and not step._grads.eager_only
    odd = nn.Linear(4, 3 + r)
    try: dist.DistributedStep(optim.SGD(nn.get_parameters(odd), lr=0.1), lambda x: odd(Tensor(x)).sum())(np.ones((2, 4), np.float32))
    except ValueError as e: print("ERR", e)
    print("ok", r)
  ''')])
  assert p.returncode == 0 and p.stdout.count("ok") == 2, p.stdout + p.stderr
  assert "gradient buffers disagree across ranks: rank 0: float:2:15, rank 1: float:2:20" in p.stdout, p.stdout + p.stderr

def test_ranks_on_one_host_share_its_cores(tmp_path):
  """Without CPU_THREADS, init() gives each of the 2 local ranks half the cores (at least one) for its CPU devices;
  a CPU_THREADS the user set is kept."""
  body = '''
    import os
    from baregrad import Tensor, distributed as dist
    from baregrad.hal import Device
    dist.init()
    (Tensor.ones(4) + 1).realize()
    print("threads", Device["CPU"].threads, os.cpu_count())
  '''
  env = {k: v for k, v in os.environ.items() if k != "CPU_THREADS"}
  p = subprocess.run(["mpirun", "-np", "2", "--oversubscribe", sys.executable, script(tmp_path, body)], capture_output=True, text=True, timeout=240,
                     env=dict(env, PYTHONPATH=str(REPO), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
  lines = [l.split() for l in p.stdout.splitlines() if l.startswith("threads")]
  assert p.returncode == 0 and len(lines) == 2, p.stdout + p.stderr
  assert all(int(t) == max(1, int(c) // 2) for _, t, c in lines), lines
  p = mpirun([script(tmp_path, body)], env={"CPU_THREADS": "3"})
  assert p.stdout.count("threads 3 ") == 2, p.stdout + p.stderr
