"""Host waits on the CPU device: the timeout counts time the queues are blocked or idle, not time they run native code
(a long kernel or chain is not a hang), and a wait on a signal no queue will write still times out."""
import threading
from baregrad.hal import Device
from baregrad.hcq.signal import HCQSignal

def test_a_running_queue_outlives_the_timeout():
  dev = Device["CPU"]
  eng = next(iter(dev.engines.values()))
  sig = HCQSignal(dev)
  old = eng.state
  eng.state = ("exec", 0, 1)   # as the worker marks a kernel it runs
  def finish() -> None:
    eng.state = old
    sig.value = 1
  t = threading.Timer(0.3, finish)
  t.start()
  try: assert dev._wait_signal(sig, 1, 0.05) is True   # (six times its timeout: the queue was running all along)
  finally: t.join(); eng.state = old

def test_a_blocked_wait_still_times_out():
  dev = Device["CPU"]
  assert dev._wait_signal(HCQSignal(dev), 1, 0.05) is False
