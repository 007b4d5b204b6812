"""VIZ: the recording a script writes, the file checks, the loopback server, and the page in a real browser."""
import base64, json, os, re, shutil, socket, subprocess, sys, urllib.error, urllib.request
import pytest
from baregrad.viz import fileformat, record, server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = "import baregrad as bg\na=bg.Tensor([1.,2,3])\nprint(((a+1)*2).sum().tolist())\n"
MATMUL = "import baregrad as bg\nx, w = bg.Tensor.rand(4, 8), bg.Tensor.rand(8, 3)\nprint((x @ w).relu().sum(axis=1).tolist())\n"

def _record(path: str, script: str = SCRIPT, **env: str) -> str:
  env = {**os.environ, "VIZ": "1", "VIZ_SERVE": "0", "VIZ_PATH": path, "PYTHONPATH": ROOT, "TMPDIR": os.path.dirname(path), **env}
  r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  assert path in r.stderr   # the path is printed
  return path

@pytest.fixture(scope="module")
def recording(tmp_path_factory):
  return _record(str(tmp_path_factory.mktemp("viz") / "rec.json"), DEV="CPU")

@pytest.fixture(scope="module")
def nv_recording(tmp_path_factory):
  return _record(str(tmp_path_factory.mktemp("viz") / "nv.json"), MOCKGPU="1", DEV="NV")

def test_recording_has_kernel_stages_and_source(recording):
  rec = fileformat.load(recording)
  assert rec["schedules"] and rec["kernels"]
  k = fileformat.kernel_body(recording, rec, 0)
  assert [s["name"] for s in k["stages"]][:2] == ["ast", "lower"]
  ops = {k["nodes"][i][0] for i in k["stages"][0]["ids"]}
  assert {"SINK", "STORE", "ADD", "MUL"} <= ops, ops
  assert rec["kernels"][0]["name"] in k["src"] and k["linear"]
  # the tensor graph the realize computed, before scheduling: the script's ops over the buffer of a
  [r] = rec["realizes"]
  g = fileformat.realize_body(recording, rec, 0)
  ops = [g["nodes"][i][0] for i in g["stages"][0]["ids"]]
  assert r["outputs"] == 1 and r["n_nodes"] == len(ops) and ops[-1] == "SINK"
  assert {"BUFFER", "ADD", "MUL", "REDUCE_AXIS"} <= set(ops) and ops.count("CONST") == 2

def test_passes_share_one_node_table():
  # a node a pass leaves alone is the same UOp, stored once; a rewritten one gets a new id
  from baregrad.ir.ops import UOp, Ops
  from baregrad.ir.dtype import dtypes
  a = UOp.const(dtypes.int, 3)
  s1 = UOp(Ops.SINK, dtypes.void, (a + 4,))
  s2 = UOp(Ops.SINK, dtypes.void, (a * 4,))
  nodes, stages = record.stage_tables([("one", s1), ("two", s2)])
  assert len(stages[0]["ids"]) == len(stages[1]["ids"]) == 4
  shared = set(stages[0]["ids"]) & set(stages[1]["ids"])
  assert {nodes[i][0] for i in shared} == {"CONST"} and len(nodes) == 6   # 3 and 4 shared; ADD, MUL, two SINKs not
  for row in nodes: assert all(s < nodes.index(row) for s in row[3])     # sources come first

def test_large_tensor_graph_recorded_by_size(tmp_path, monkeypatch):
  from baregrad.ir.ops import UOp
  from baregrad.ir.dtype import dtypes
  monkeypatch.setattr(record, "MAX_GRAPH_NODES", 3)
  rec = record.Recorder()
  x = UOp.const(dtypes.int, 1)
  rec("realize", uops=[x + 2], device="CPU")      # 4 nodes with the SINK: over the limit
  rec("realize", uops=[x], device="CPU")          # 2 nodes: kept
  p = str(tmp_path / "r.json")
  fileformat.save(p, {"kernels": [], "realizes": rec.realizes})
  loaded = fileformat.load(p)
  assert [r["n_nodes"] for r in loaded["realizes"]] == [4, 2]
  assert fileformat.realize_body(p, loaded, 0) == {"nodes": [], "stages": []}
  assert [n[0] for n in fileformat.realize_body(p, loaded, 1)["nodes"]] == ["CONST", "SINK"]

def test_recording_has_timeline_and_disassembly(recording):
  rec = fileformat.load(recording)
  name, k = rec["kernels"][0]["name"], fileformat.kernel_body(recording, rec, 0)
  spans = [e for e in rec["timeline"] if e.get("cat") == "kernel"]
  assert [e["name"] for e in spans] == [name] and spans[0]["dur"] >= 0   # the kernel's device span, by name
  assert {"schedule", "codegen", "compile"} <= {e["name"] for e in rec["timeline"]}
  assert not [f for f in os.listdir(os.path.dirname(recording)) if f.startswith("baregrad-viz-trace")]   # its trace, read, is gone
  pytest.importorskip("capstone")
  srv = server.serve(recording, background=True)   # the server disassembles the recorded binary when the kernel is shown
  try: d = json.loads(_get(f"http://127.0.0.1:{srv.server_address[1]}/kernel/0.json"))["disasm"]
  finally: srv.shutdown()
  assert k["binary"] and f":{name}:" in d and re.search(r"\bret\b", d)   # the kernel's symbol, disassembled to its return

def test_disassembly_only_where_there_is_a_disassembler():
  from baregrad.viz import disasm
  assert disasm.disassemble(b"//\n.version 8.0\n", "k") is None                       # PTX (mock NV): the source is the listing
  gfx942 = bytearray(64)
  gfx942[:4], gfx942[18:20], gfx942[0x30] = b"\x7fELF", (224).to_bytes(2, "little"), 0x4C
  assert disasm.disassemble(bytes(gfx942), "k") is None                                    # CDNA3: no decoder here
  bad = disasm.disassemble(b"\x7fELF" + bytes(14) + (62).to_bytes(2, "little"), "k")    # x86-64 but truncated: says why
  assert bad is not None and bad.startswith("(not disassembled:") and "kernel k" in bad

def test_profile_on_too_keeps_its_trace(tmp_path):
  # PROFILE=1 with VIZ=1: the user's trace file stays (its path printed) and the recording has its timeline too
  trace = tmp_path / "trace.json"
  # (not marked a child of this process: an earlier PROFILE test in this worker set the owner mark in its environment)
  env = {**{k: v for k, v in os.environ.items() if k != "_BAREGRAD_PROFILE_OWNER"}, "VIZ": "1", "VIZ_SERVE": "0", "VIZ_PATH": str(tmp_path / "rec.json"),
         "PYTHONPATH": ROOT, "DEV": "CPU", "PROFILE": "1", "PROFILE_PATH": str(trace)}
  r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  assert f"PROFILE trace written to {trace}" in r.stderr and trace.exists()
  from baregrad.hal import profile
  names = {e["name"] for e in profile.load(str(trace)) if e.get("ph") == "X"}
  rec = fileformat.load(str(tmp_path / "rec.json"))
  assert {e["name"] for e in rec["timeline"] if "ts" in e} == names and rec["kernels"][0]["name"] in names

def test_no_timeline_when_asked(tmp_path):
  # VIZ_TIMELINE=0: PROFILE stays off (no trace written, no timeline); the rest is recorded
  rec = fileformat.load(_record(str(tmp_path / "r.json"), DEV="CPU", VIZ_TIMELINE="0"))
  assert rec["timeline"] == [] and rec["kernels"] and rec["realizes"]
  assert not [f for f in os.listdir(tmp_path) if "trace" in f]

def test_nv_submission_shows_qmd_of_its_kernel(nv_recording):
  rec = fileformat.load(nv_recording)
  name = rec["kernels"][0]["name"]
  execs = [(s, p) for s in rec["submissions"] for p in s["packets"] if p["kind"] == "exec"]
  assert len(execs) == 1, execs
  s, p = execs[0]
  assert s["device"] == "NV" and s["queue"] == "NVComputeQueue" and p["kernel"] == name and p["kernel_index"] == 0
  assert p["text"].startswith("EXEC      qmd=0x".split()[0]) and "SEND_PCAS_A" in p["text"]
  assert f"QMD v04 (HOPPER_COMPUTE_A) of kernel {name}" in p["detail"] and "CTA_THREAD_DIMENSION0" in p["detail"]
  assert "grid=(1, 1, 1)" in p["detail"]   # the QMD read back at submit time: the kernel's launch
  # what each submission wrote to its channel's ring: one GPFIFO entry pointing at its whole pushbuffer
  for sub in rec["submissions"]:
    assert len(sub["ring"]) == 1 and re.match(rf"GPFIFO entry \d+ \((compute|copy) channel\): {sub['nwords']} pushbuffer words at 0x", sub["ring"][0]["text"])
  kinds = [q["kind"] for s in rec["submissions"] for q in s["packets"]]
  assert {"wait", "signal", "copy", "timestamp"} <= set(kinds)
  assert all("not decoded" not in q["text"] for s in rec["submissions"] for q in s["packets"])

def test_launch_packets_link_to_their_kernel_by_program(tmp_path):
  # two different kernels named E_ (the draws of x and of w): each launch links to the kernel it ran, not the first E_
  rec = fileformat.load(_record(str(tmp_path / "mm.json"), DEV="CPU", script=MATMUL))
  names = [k["name"] for k in rec["kernels"]]
  assert len(set(names)) < len(names), names   # the case this is about: names repeat
  ex = [p for s in rec["submissions"] for p in s["packets"] if p["kind"] == "exec"]
  assert {p["kernel_index"] for p in ex} == set(range(len(names))) and all(names[p["kernel_index"]] == p["kernel"] for p in ex)
  # and each kernel span of the timeline, by the timeline value its submission signalled
  spans = [e for e in rec["timeline"] if e.get("cat") == "kernel"]
  assert len(spans) == len(ex) and {e["kernel_index"] for e in spans} == set(range(len(names)))
  assert all(names[e["kernel_index"]] == e["name"] for e in spans)

def test_amd_submission_decoded(tmp_path):
  rec = fileformat.load(_record(str(tmp_path / "amd.json"), MOCKGPU="1", DEV="AMD"))
  by_queue = {s["queue"]: s for s in rec["submissions"]}
  texts = [p["text"] for p in by_queue["GFX11CopyQueue"]["packets"]]
  assert any(t.startswith("COPY_LINEAR") for t in texts) and any(t.startswith("POLL_REGMEM") for t in texts), texts   # SDMA
  ex = [p for s in rec["submissions"] for p in s["packets"] if p["kind"] == "exec"]
  assert len(ex) == 1 and ex[0]["text"].startswith("DISPATCH") and ex[0]["kernel"] == rec["kernels"][0]["name"]   # AQL
  assert any(p["text"].startswith("WAIT_REG_MEM") for s in rec["submissions"] for p in s["packets"])   # PM4
  # the rings: the SDMA ring's words, and the AQL packets (the dispatch, and PM4 runs as indirect buffers with their words)
  assert all(s["ring"][0]["text"].startswith("SDMA ring bytes") for s in rec["submissions"] if s["queue"] == "GFX11CopyQueue")
  aql = [x for s in rec["submissions"] if s["queue"] == "GFX11ComputeQueue" for x in s["ring"]]
  assert sum(": DISPATCH" in x["text"] for x in aql) == 1
  assert any("PM4_IB" in x["text"] and "WAIT_REG_MEM" in x["detail"] for x in aql)
  srv = server.serve(str(tmp_path / "amd.json"), background=True)   # the gfx1100 code object, disassembled when shown
  try: d = json.loads(_get(f"http://127.0.0.1:{srv.server_address[1]}/kernel/0.json"))["disasm"]
  finally: srv.shutdown()
  assert d.startswith(f".text:{rec['kernels'][0]['name']}:") and "global_store_b32" in d and d.rstrip().endswith("s_endpgm")

def _body(**f) -> str: return json.dumps(json.dumps({"src": "", "linear": [], "nodes": [], "stages": [], **f}))
@pytest.mark.parametrize("text,why", [("{not json", "not valid JSON"), ('{"format":"chrome-trace"}', "expected format"),
                                       ('{"format":"baregrad-viz","version":99}', "version 99"),
                                       ('{"format":"baregrad-viz","version":2,"kernels":[{"name":"k"}]}', "kernels[0] is damaged"),
                                       ('{"format":"baregrad-viz","version":2,"kernels":[{"name":"k","body":"{"}]}', "kernels[0].body is damaged"),
                                       ('{"format":"baregrad-viz","version":2,"kernels":[{"name":"k","body":' + _body(src=1) + '}]}',
                                        "expected field 'src' of type str"),
                                       ('{"format":"baregrad-viz","version":2,"kernels":[{"name":"k","body":' + _body(nodes=[["SINK", "void", "None", [0]]])
                                        + '}]}', "kernels[0].nodes[0] is damaged"),
                                       ('{"format":"baregrad-viz","version":2,"kernels":[{"name":"k","body":' + _body(stages=[{"name": "ast", "ids": [3]}])
                                        + '}]}', "not in its node table"),
                                       ('{"format":"baregrad-viz","version":2,"kernels":[],"submissions":[{}]}', "submissions[0] is damaged"),
                                       ('{"format":"baregrad-viz","version":2,"kernels":[],"realizes":[{"body":"{\\"nodes\\":[[\\"A\\",\\"v\\",\\"\\",[1]]],'
                                        '\\"stages\\":[]}"}]}', "realizes[0].nodes[0] is damaged")])
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

def _damage_first_kernel(recording: str, p) -> dict:
  rec = json.loads(open(recording).read())
  rec["kernels"][0]["body"] = rec["kernels"][0]["body"].replace('"nodes":[[', '"nodes":[7,[', 1)
  p.write_text(json.dumps(rec))
  return rec

def test_damaged_kernel_body_refused_when_shown_and_by_check(recording, tmp_path):
  p = tmp_path / "damaged.json"
  rec = _damage_first_kernel(recording, p)
  srv = server.serve(str(p), background=True)   # opens: the listing is fine
  try:
    base = f"http://127.0.0.1:{srv.server_address[1]}"
    assert json.loads(_get(base + "/index.json"))["kernels"][0]["name"] == rec["kernels"][0]["name"]
    with pytest.raises(urllib.error.HTTPError) as e: urllib.request.urlopen(base + "/kernel/0.json", timeout=10)
    msg = e.value.read().decode()
    assert e.value.code == 500 and f"{p}: kernels[0].nodes[0] is damaged" in msg, msg   # the path and what is wrong
  finally: srv.shutdown()
  r = subprocess.run([sys.executable, "-m", "baregrad.viz", "--check", str(p)], env={**os.environ, "PYTHONPATH": ROOT},
                     capture_output=True, text=True, timeout=60)
  assert r.returncode == 2 and f"{p}: kernels[0].nodes[0] is damaged" in r.stderr

def _get(url: str) -> bytes: return urllib.request.urlopen(url, timeout=10).read()

def test_server_loopback_lazy_paths_404_and_port_in_use(nv_recording):
  busy = socket.socket()
  busy.bind(("127.0.0.1", 0)); busy.listen()
  try:
    srv = server.serve(nv_recording, port=busy.getsockname()[1], background=True)
    host, port = srv.server_address[:2]
    assert host == "127.0.0.1" and port != busy.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    rec = fileformat.load(nv_recording)
    idx = json.loads(_get(base + "/index.json"))
    assert [k["name"] for k in idx["kernels"]] == [k["name"] for k in rec["kernels"]] and "body" not in idx["kernels"][0]
    assert all("detail" not in p for s in idx["submissions"] for p in s["packets"])   # the list is light; details on demand
    k0 = json.loads(_get(base + "/kernel/0.json"))
    assert k0["src"] == fileformat.kernel_body(nv_recording, rec, 0)["src"] and k0["name"] == rec["kernels"][0]["name"]
    assert json.loads(_get(base + "/submission/0.json")) == rec["submissions"][0]
    assert json.loads(_get(base + "/recording.json"))["format"] == "baregrad-viz"
    assert b"baregrad VIZ" in _get(base + "/")
    with open(server.VENDOR["/vendor/dagre.min.js"], "rb") as f: assert _get(base + "/vendor/dagre.min.js") == f.read()
    for bad in ("/nope", "/../../etc/passwd", "/server.py", "/%2e%2e/fileformat.py", "/vendor/LICENSE.dagre", "/vendor/",
                f"/kernel/{len(rec['kernels'])}.json", "/kernel/-1.json", "/kernel/0.json/../../record.py", "/submission/99999.json"):
      with pytest.raises(urllib.error.HTTPError) as e: urllib.request.urlopen(base + bad, timeout=10)
      assert e.value.code == 404, bad
    srv.shutdown()
  finally: busy.close()

def test_vendored_layout_library_has_its_license():
  d = os.path.join(os.path.dirname(server.__file__), "vendor")
  with open(os.path.join(d, "LICENSE.dagre")) as f: assert "Permission is hereby granted" in f.read()   # MIT
  with open(server.VENDOR["/vendor/dagre.min.js"]) as f: assert 're="3.1.3"' in f.read()   # the version README.md names
  with open(os.path.join(d, "README.md")) as f: assert "3.1.3" in f.read()

@pytest.fixture
def browser():
  webdriver = pytest.importorskip("selenium.webdriver")
  if not (shutil.which("chromium") and shutil.which("chromedriver")): pytest.skip("chromium/chromedriver not installed")
  opts = webdriver.ChromeOptions()
  for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"): opts.add_argument(a)
  opts.binary_location = shutil.which("chromium")
  drv = webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=shutil.which("chromedriver")))
  drv.set_page_load_timeout(30)
  try: yield drv
  finally: drv.quit()

def test_page_in_chromium(nv_recording, browser, tmp_path):
  from selenium.webdriver.common.by import By
  from selenium.webdriver.support.ui import WebDriverWait
  drv, wait = browser, WebDriverWait(browser, 20)
  srv = server.serve(nv_recording, background=True)
  try:
    drv.get(f"http://127.0.0.1:{srv.server_address[1]}/")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#list .kernel"))
    rec = fileformat.load(nv_recording)
    k = {**rec["kernels"][0], **fileformat.kernel_body(nv_recording, rec, 0)}
    drv.find_elements(By.CSS_SELECTOR, "#list .kernel")[0].click()
    wait.until(lambda d: k["name"] in d.find_element(By.ID, "src").text)   # clicking a kernel shows its source
    assert drv.find_elements(By.CSS_SELECTOR, "#src span.kw")              # highlighted
    last = [k["nodes"][i] for i in k["stages"][-1]["ids"]]
    nodes = drv.find_elements(By.CSS_SELECTOR, "#dag g.node")
    assert sorted(g.get_attribute("data-op") for g in nodes) == sorted(n[0] for n in last)   # the DAG has the recorded nodes
    # laid out by dagre: one rank per depth at least, and no two nodes on the same spot
    ys = {round(float(g.find_element(By.TAG_NAME, "rect").get_attribute("y"))) for g in nodes}
    spots = {(g.find_element(By.TAG_NAME, "rect").get_attribute("x"), g.find_element(By.TAG_NAME, "rect").get_attribute("y")) for g in nodes}
    assert len(ys) >= 4 and len(spots) == len(nodes)
    assert len(drv.find_elements(By.CSS_SELECTOR, "#dag path")) == sum(len(n[3]) for n in last)   # an edge per source
    before = sorted(g.get_attribute("data-id") for g in nodes)
    for _ in range(len(k["stages"]) - 1): drv.find_element(By.ID, "prev").click()
    first = sorted(g.get_attribute("data-id") for g in drv.find_elements(By.CSS_SELECTOR, "#dag g.node"))
    assert first == sorted(str(i) for i in k["stages"][0]["ids"]) and first != before   # stepping changes the graph
    assert not drv.find_elements(By.CSS_SELECTOR, "#dag rect.changed")   # the first pass has nothing before it
    drv.find_element(By.ID, "next").click()
    changed = {g.get_attribute("data-id") for g in drv.find_elements(By.CSS_SELECTOR, "#dag g.changed")}
    assert changed == {str(i) for i in set(k["stages"][1]["ids"]) - set(k["stages"][0]["ids"])} and changed   # what the pass made
    # the command-stream view: the exec packet of the kernel, clicked, shows its QMD
    drv.find_element(By.ID, "tab-streams").click()
    ex = [p for p in drv.find_elements(By.CSS_SELECTOR, "#subs .packet") if p.find_elements(By.CSS_SELECTOR, "a.klink")]
    assert len(ex) == 1 and ex[0].find_element(By.CSS_SELECTOR, "a.klink").text == k["name"]
    assert drv.find_elements(By.CSS_SELECTOR, "#launches .packet")   # the kernel view listed the packet that launched it
    ex[0].click()
    wait.until(lambda d: "QMD v04" in d.find_element(By.ID, "pkt").text)
    assert f"of kernel {k['name']}" in drv.find_element(By.ID, "pkt").text and "CTA_THREAD_DIMENSION0" in drv.find_element(By.ID, "pkt").text
    ring = ex[0].find_element(By.XPATH, "..").find_elements(By.CSS_SELECTOR, ".packet.ring")   # the submission's GPFIFO entry
    assert len(ring) == 1 and ring[0].text.startswith("GPFIFO entry")
    ring[0].click()
    wait.until(lambda d: "GP_ENTRY1" in d.find_element(By.ID, "pkt").text)
    # the tensor graphs: the realize, clicked, drawn with the recorded nodes
    drv.find_element(By.ID, "tab-graphs").click()
    drv.find_elements(By.CSS_SELECTOR, "#realizes .realize")[0].click()
    g = fileformat.realize_body(nv_recording, rec, 0)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#tdag g.node"))
    assert sorted(x.get_attribute("data-id") for x in drv.find_elements(By.CSS_SELECTOR, "#tdag g.node")) == sorted(str(i) for i in g["stages"][0]["ids"])
    # the timeline: the kernel's span, clicked, opens the kernel
    drv.find_element(By.ID, "tab-timeline").click()
    spans = drv.find_elements(By.CSS_SELECTOR, "#tl rect.kernel")
    assert [s.get_attribute("data-name") for s in spans] == [k["name"]]
    spans[0].click()
    assert drv.find_element(By.ID, "kview").is_displayed() and drv.find_element(By.ID, "kname").text == k["name"]
    png = tmp_path / "shot.png"
    drv.save_screenshot(str(png))
    # not blank: decode the PNG in the browser and count its distinct colours and how many pixels are not background
    b64 = drv.get_screenshot_as_base64()
    colours, inked = drv.execute_async_script("""const done=arguments[1],im=new Image();im.onload=()=>{const c=document.createElement('canvas');
      c.width=im.width;c.height=im.height;const x=c.getContext('2d');x.drawImage(im,0,0);const d=x.getImageData(0,0,c.width,c.height).data,seen=new Set();
      let ink=0;for(let i=0;i<d.length;i+=4){seen.add((d[i]<<16)|(d[i+1]<<8)|d[i+2]);if(d[i]+d[i+1]+d[i+2]<600)ink++}done([seen.size,ink])};
      im.src='data:image/png;base64,'+arguments[0];""", b64)
    assert colours > 8 and inked > 2000, (colours, inked)
    with open(tmp_path / "shot.png", "wb") as f: f.write(base64.b64decode(b64))
  finally: srv.shutdown()

def test_page_names_a_damaged_kernel(recording, browser, tmp_path):
  from selenium.webdriver.common.by import By
  from selenium.webdriver.support.ui import WebDriverWait
  p = tmp_path / "damaged.json"
  _damage_first_kernel(recording, p)
  srv = server.serve(str(p), background=True)
  try:
    browser.get(f"http://127.0.0.1:{srv.server_address[1]}/")   # the page opens kernel 0 first: its body is damaged
    WebDriverWait(browser, 20).until(lambda d: "cannot show this kernel" in d.find_element(By.ID, "kinfo").text)
    assert f"{p}: kernels[0].nodes[0] is damaged" in browser.find_element(By.ID, "kinfo").text
    assert not browser.find_elements(By.CSS_SELECTOR, "#dag g.node")
  finally: srv.shutdown()
