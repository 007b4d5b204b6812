"""VIZ: the recording a script writes, the file checks, the loopback server, and the page in a real browser."""
import json, os, re, socket, subprocess, sys, urllib.error, urllib.request
import pytest
from baregrad.viz import fileformat, server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = "import baregrad as bg\na=bg.Tensor([1.,2,3])\nprint(((a+1)*2).sum().tolist())\n"

@pytest.fixture(scope="module")
def recording(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("viz") / "rec.json")
  env = {**os.environ, "VIZ": "1", "VIZ_SERVE": "0", "VIZ_PATH": path, "PYTHONPATH": ROOT}
  r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  assert path in r.stderr   # the path is printed
  return path

def test_recording_has_kernel_stages_and_source(recording):
  rec = fileformat.load(recording)
  assert rec["schedules"] and rec["kernels"]
  k = rec["kernels"][0]
  assert [s["name"] for s in k["stages"]][:2] == ["ast", "lower"]
  ops = {n["op"] for n in k["stages"][0]["nodes"]}
  assert {"SINK", "STORE", "ADD", "MUL"} <= ops, ops
  assert k["name"] in k["src"] and k["linear"]

@pytest.mark.parametrize("text,why", [("{not json", "not valid JSON"), ('{"format":"chrome-trace"}', "expected format"),
                                       ('{"format":"baregrad-viz","version":99}', "version 99"),
                                       ('{"format":"baregrad-viz","version":1,"kernels":[{"name":"k"}]}', "kernels[0] is damaged")])
def test_bad_file_refused_with_path_and_reason(tmp_path, text, why):
  p = tmp_path / "bad.json"
  p.write_text(text)
  with pytest.raises(fileformat.RecordingError, match=re.escape(why)) as e: fileformat.load(str(p))
  assert str(p) in str(e.value)

def test_cli_refuses_bad_file(tmp_path):
  p = tmp_path / "bad.json"
  p.write_text("[1,2]")
  r = subprocess.run([sys.executable, "-m", "baregrad.viz", str(p)], env={**os.environ, "PYTHONPATH": ROOT},
                     capture_output=True, text=True, timeout=60)
  assert r.returncode == 2 and str(p) in r.stderr and "not a VIZ recording" in r.stderr

def test_server_loopback_404_and_port_in_use(recording):
  busy = socket.socket()
  busy.bind(("127.0.0.1", 0)); busy.listen()
  try:
    srv = server.serve(recording, port=busy.getsockname()[1], background=True)
    host, port = srv.server_address[:2]
    assert host == "127.0.0.1" and port != busy.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    assert json.loads(urllib.request.urlopen(base + "/recording.json", timeout=10).read())["format"] == "baregrad-viz"
    assert b"baregrad VIZ" in urllib.request.urlopen(base + "/", timeout=10).read()
    for bad in ("/nope", "/../../etc/passwd", "/server.py", "/%2e%2e/fileformat.py"):
      with pytest.raises(urllib.error.HTTPError) as e: urllib.request.urlopen(base + bad, timeout=10)
      assert e.value.code == 404
    srv.shutdown()
  finally: busy.close()

def test_page_in_chromium(recording, tmp_path):
  webdriver = pytest.importorskip("selenium.webdriver")
  from selenium.webdriver.common.by import By
  from selenium.webdriver.support.ui import WebDriverWait
  import shutil
  if not (shutil.which("chromium") and shutil.which("chromedriver")): pytest.skip("chromium/chromedriver not installed")
  srv = server.serve(recording, background=True)
  opts = webdriver.ChromeOptions()
  for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"): opts.add_argument(a)
  opts.binary_location = shutil.which("chromium")
  drv = webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=shutil.which("chromedriver")))
  try:
    drv.set_page_load_timeout(30)
    drv.get(f"http://127.0.0.1:{srv.server_address[1]}/")
    WebDriverWait(drv, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#list .kernel"))
    rec = fileformat.load(recording)
    drv.find_elements(By.CSS_SELECTOR, "#list .kernel")[0].click()
    assert rec["kernels"][0]["name"] in drv.find_element(By.ID, "src").text   # clicking a kernel shows its source
    last = rec["kernels"][0]["stages"][-1]
    ops = [g.get_attribute("data-op") for g in drv.find_elements(By.CSS_SELECTOR, "#dag g.node")]
    assert sorted(ops) == sorted(n["op"] for n in last["nodes"])   # the DAG has the nodes of the recorded graph
    before = len(ops)
    for _ in range(len(rec["kernels"][0]["stages"]) - 1): drv.find_element(By.ID, "prev").click()
    after = len(drv.find_elements(By.CSS_SELECTOR, "#dag g.node"))
    assert after == len(rec["kernels"][0]["stages"][0]["nodes"]) and after != before   # stepping changes the graph
    drv.find_element(By.ID, "next").click()
    assert drv.find_elements(By.CSS_SELECTOR, "#dag rect.changed")   # what the pass changed is highlighted
    png = tmp_path / "shot.png"
    drv.save_screenshot(str(png))
    assert png.stat().st_size > 5000
  finally:
    drv.quit(); srv.shutdown()
