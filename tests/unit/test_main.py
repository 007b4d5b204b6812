"""`python -m baregrad`: versions, devices and why they do or do not work, compilers, cache; `--check`; __version__."""
from tests.paths import REPO
import os, subprocess, sys, tomllib
import baregrad

ROOT = str(REPO)

def run(*args: str, **env: str) -> subprocess.CompletedProcess:
  e = {k: v for k, v in os.environ.items() if k not in ("DEV", "MOCKGPU", "MOCKGPU_ARCH", "MOCKGPU_COUNT", "DEBUG", "PROFILE")}
  e.update(PYTHONPATH=ROOT + os.pathsep + e.get("PYTHONPATH", ""), **env)
  return subprocess.run([sys.executable, "-m", "baregrad", *args], capture_output=True, text=True, env=e, cwd=ROOT, timeout=300)

def pyproject() -> dict:
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f: return tomllib.load(f)

def device_line(out: str, name: str) -> str:
  return next(l for l in out.splitlines() if l.strip().split(" ")[0] == name)

def test_version_comes_from_pyproject():
  assert baregrad.__version__ == pyproject()["project"]["version"]

def test_console_script_runs_main():
  assert pyproject()["project"]["scripts"]["baregrad"] == "baregrad.__main__:main"
  from baregrad.__main__ import main
  assert callable(main)

def test_report_names_every_device_and_why():
  r = run()
  assert r.returncode == 0, r.stderr
  out = r.stdout
  assert out.splitlines()[0].startswith(f"baregrad {baregrad.__version__} ")
  assert "Python " in out and "numpy " in out and "llvmlite " in out
  from baregrad.hal import KNOWN_DEVICES
  for name in KNOWN_DEVICES: device_line(out, name)  # each one is reported
  assert " works " in device_line(out, "CPU")
  nv = device_line(out, "NV")
  # the driver's own reason (the same test on a machine with an NVIDIA driver sees it work)
  assert " works " in nv if os.path.exists("/dev/nvidiactl") else "/dev/nvidiactl" in nv
  assert "LLVM: llvmlite " in out and "ptxas: " in out and "C compiler: " in out
  assert "compile cache: " in out

def test_check_runs_on_cpu_and_the_mock_gpu():
  r = run("--check", "CPU", "NV", MOCKGPU="1")
  assert r.returncode == 0, r.stdout + r.stderr
  assert "MOCK GPU" in device_line(r.stdout, "NV")
  checks = r.stdout.split("check:")[1]
  assert " ok " in device_line(checks, "CPU") and "= 288" in device_line(checks, "CPU")
  assert " ok " in device_line(checks, "NV") and "= 288" in device_line(checks, "NV")

def test_check_reports_a_failure():
  # a C compiler that does not exist: the CPU:C device opens, its check fails, the exit status says so
  r = run("--check", "CPU:C", CC="/nonexistent/cc", BAREGRAD_NOCACHE="1")
  assert r.returncode == 1, r.stdout + r.stderr
  line = device_line(r.stdout.split("check:")[1], "CPU:C")
  assert " FAIL " in line and "/nonexistent/cc" in line

def test_unknown_device_name():
  r = run("NOPE")
  assert "unknown device" in device_line(r.stdout, "NOPE")
