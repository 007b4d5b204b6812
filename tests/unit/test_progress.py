"""Progress bars: drawn on a terminal, silent on a pipe; short work prints nothing; hooked into compiles and BEAM."""
import io, time
import numpy as np
import pytest
from baregrad.helpers import Progress

class Tty(io.StringIO):
  def isatty(self) -> bool: return True

@pytest.fixture(autouse=True)
def no_force(monkeypatch): monkeypatch.delenv("PROGRESS", raising=False)

def test_terminal_gets_a_bar():
  out = Tty()
  for _ in Progress(range(10), desc="train", stream=out): pass
  s = out.getvalue()
  assert s.startswith("\rtrain:  ") and "10/10" in s and "100%" in s and s.endswith("\n")

def test_pipe_gets_nothing():
  out = io.StringIO()  # not a terminal
  with Progress(total=5, desc="x", stream=out) as b:
    for _ in range(5): b.update(1, "note")
  assert out.getvalue() == ""

def test_progress_env_forces_it(monkeypatch):
  monkeypatch.setenv("PROGRESS", "1")
  out = io.StringIO()
  with Progress(total=2, stream=out) as b: b.update(2)
  assert "2/2" in out.getvalue()
  monkeypatch.setenv("PROGRESS", "0")
  out = Tty()
  with Progress(total=2, stream=out) as b: b.update(2)
  assert out.getvalue() == ""

def test_short_work_prints_nothing_long_work_shows():
  out = Tty()
  b = Progress(total=3, desc="compile", delay=0.2, stream=out)
  for _ in range(3):
    with b.step(): pass  # microseconds of work in all: under the delay
  b.close()
  assert out.getvalue() == ""
  b = Progress(total=3, desc="compile", delay=0.05, stream=out)
  for _ in range(3):
    with b.step(): time.sleep(0.03)  # 90 ms of work: over it
  b.close()
  assert "compile: " in out.getvalue() and "3/3" in out.getvalue()

def test_bytes_and_unknown_total():
  out = Tty()
  with Progress(desc="download", unit="B", stream=out) as b: b.update(3 << 20, "f.gz")
  s = out.getvalue()
  assert s.startswith("\rdownload: 3.0 MiB [") and "iB/s]" in s and "f.gz" in s and "%" not in s

def test_schedule_compiles_show_a_bar(monkeypatch, capfd):
  import baregrad.engine.realize as realize
  from baregrad import Tensor
  class Now(Progress):  # the schedule's bar with no delay, forced on
    def __init__(self, *a, **kw): super().__init__(*a, **{**kw, "delay": 0.0})
  monkeypatch.setattr(realize, "Progress", Now)
  monkeypatch.setenv("PROGRESS", "1")
  c = 1 + time.time_ns() % 991 / 1000  # fresh kernels
  x = Tensor(np.ones((4, 4), np.float32))
  (x * c).exp().sum(0).realize()
  assert "compile: " in capfd.readouterr().err

def test_beam_shows_candidates(monkeypatch, capfd, tmp_path):
  from baregrad.engine.search import beam_search
  from baregrad import Tensor
  monkeypatch.setenv("PROGRESS", "1")
  monkeypatch.setenv("BAREGRAD_CACHE", str(tmp_path))  # nothing cached: the search runs
  t = Tensor(np.ones((8, 8), np.float32)).sum(1) * (1 + time.time_ns() % 997 / 1000)
  import baregrad.engine.search as search
  class Now(Progress):
    def __init__(self, *a, **kw): super().__init__(*a, **{**kw, "delay": 0.0})
  monkeypatch.setattr(search, "Progress", Now)
  beam_search(t.schedule()[-1].ast, "CPU", 1, rounds=1)
  err = capfd.readouterr().err
  assert "BEAM 1: " in err and "candidates/s" in err and "best " in err
