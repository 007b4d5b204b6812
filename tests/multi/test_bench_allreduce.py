"""bench/allreduce.py reports as nccl-tests does: algbw = bytes / time, busbw = algbw * 2(n-1)/n, beside the copy
bandwidth of one device-to-device copy measured in the same run."""
import os, subprocess, sys
from tests.paths import REPO

def test_allreduce_bench_reports_algbw_and_busbw():
  p = subprocess.run([sys.executable, str(REPO / "bench" / "allreduce.py"), "--devices", "CPU:0,CPU:1,CPU:2", "--mib", "0.25", "--reps", "1"],
                     capture_output=True, text=True, timeout=300, cwd=REPO)
  assert p.returncode == 0, p.stdout + p.stderr
  head, *rows = p.stdout.strip().splitlines()
  assert head.split() == ["size", "path", "algo", "time", "ms", "algbw", "GB/s", "busbw", "GB/s", "copy", "GB/s", "busbw/copy"]
  assert [r.split()[1:3] for r in rows] == [["direct", "direct"], ["direct", "ring"]]   # (CPU devices: direct either way)
  for r in rows:
    size, _, _, ms, alg, bus, copy, ratio = r.split()
    assert size == "0.25MiB"
    nbytes = (1 << 18) // 4 * 4   # float32 elements
    assert abs(float(alg) - nbytes / (float(ms) / 1e3) / 1e9) <= 2e-3 * float(alg)   # (4 significant digits printed)
    assert abs(float(bus) - float(alg) * 2 * (3 - 1) / 3) <= 1e-3 * float(bus)
    assert abs(float(ratio) - float(bus) / float(copy)) <= 2e-3 * float(ratio)

def test_allreduce_bench_reports_peer_mapped_and_staged_on_mock_amd():
  env = dict(os.environ, MOCKGPU="1", MOCKGPU_COUNT="2", DEV="AMD", PYTHONPATH=str(REPO))
  p = subprocess.run([sys.executable, str(REPO / "bench" / "allreduce.py"), "--devices", "AMD:0,AMD:1", "--mib", "0.0625", "--reps", "1"],
                     capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
  assert p.returncode == 0, p.stdout + p.stderr
  _, *rows = p.stdout.strip().splitlines()
  assert [r.split()[1:3] for r in rows] == [["peer-mapped", "direct"], ["staged", "direct"]], p.stdout

def test_allreduce_bench_reports_peer_mapped_and_staged_on_mock_nv():
  env = dict(os.environ, MOCKGPU="1", MOCKGPU_COUNT="2", DEV="NV", PYTHONPATH=str(REPO))
  env.pop("MOCKGPU_ARCH", None)
  p = subprocess.run([sys.executable, str(REPO / "bench" / "allreduce.py"), "--devices", "NV:0,NV:1", "--mib", "0.0625", "--reps", "1"],
                     capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
  assert p.returncode == 0, p.stdout + p.stderr
  _, *rows = p.stdout.strip().splitlines()
  assert [r.split()[1:3] for r in rows] == [["peer-mapped", "direct"], ["staged", "direct"]], p.stdout
