"""VIZ command streams: what each HCQ submission put on the device, packet by packet, in words.

capture() runs at submit time and only copies (the queue's words, its command boundaries, the kernel each exec
launches and, on NV, the QMD the exec points at), so recording stays cheap; decode() turns a capture into packets with
the drivers' own decoders (the ones the mock GPUs execute with): NV pushbuffer methods and QMDs
(baregrad/drivers/nv/hw.py), AMD PM4, AQL and SDMA packets (baregrad/drivers/amd/hw.py), the CPU queue's commands
(baregrad/drivers/cpu_encoding.py)."""
from __future__ import annotations
import ctypes, re
from typing import Any

QMD_BYTES = 0x180   # the QMD NVArgsState writes at qmd_cpu (baregrad/drivers/nv/program.py)

def _vendor(q: Any) -> str:
  mod = type(q).__module__
  return "nv" if mod.startswith("baregrad.drivers.nv") else "amd" if mod.startswith("baregrad.drivers.amd") else \
    "cpu" if mod.startswith("baregrad.drivers.cpu") else "other"

def capture(q: Any, dev: Any, program_kernel: dict[Any, int] | None = None) -> dict[str, Any]:
  """A copy of what queue q submits to dev now (its words are patched and resubmitted later by replays).
  program_kernel maps a program object to the index of its kernel in the recording."""
  vendor = _vendor(q)
  cmds = []
  for i, c in enumerate(q.cmds):
    e: dict[str, Any] = {"kind": c.kind, "start": c.start, "n": c.nwords}
    if c.kind == "exec" and (prg := q._refs.get((i, "prg"))) is not None:
      e["kernel"] = getattr(prg, "name", None)
      if program_kernel is not None and (ki := program_kernel.get(prg)) is not None: e["kernel_index"] = ki
      args = q._refs.get((i, "args"))
      if vendor == "nv" and args is not None and getattr(args, "qmd_cpu", None):
        e["qmd"] = ctypes.string_at(args.qmd_cpu, QMD_BYTES)
    cmds.append(e)
  info: dict[str, Any] = {}
  if vendor == "nv": info = {"compute_class": getattr(dev, "compute_class", None), "dma_class": getattr(dev, "dma_class", None)}
  elif vendor == "amd":
    from baregrad.drivers.amd.queues import AMDCopyQueue
    info = {"family": getattr(q, "family", "gfx11"), "sdma": isinstance(q, AMDCopyQueue)}
  return {"device": getattr(dev, "device", str(dev)), "queue": type(q).__name__, "engine": getattr(q, "engine", ""), "vendor": vendor,
          "info": info, "words": q.words.tobytes(), "cmds": cmds}

def decode(cap: dict[str, Any]) -> dict[str, Any]:
  """A capture as the recording stores it: {device, queue, engine, packets: [{kind, text, detail, kernel?, kernel_index?}]}, where
  text is the command in one line of words and detail its packets (methods, PM4/AQL/SDMA fields, the QMD)."""
  from array import array
  words = array("I")
  words.frombytes(cap["words"])
  packets = []
  for c in cap["cmds"]:
    w = words[c["start"]:c["start"] + c["n"]].tolist()
    try: text, detail = _decode_cmd(cap, c, w)
    except Exception as e:  # noqa: BLE001  a decoder that cannot read a packet: show the raw words and why
      text, detail = f"{c['kind']}: not decoded ({type(e).__name__}: {e})", " ".join(f"{x:#010x}" for x in w)
    p: dict[str, Any] = {"kind": c["kind"], "text": text, "detail": detail}
    if c.get("kernel"): p["kernel"] = c["kernel"]
    if "kernel_index" in c: p["kernel_index"] = c["kernel_index"]
    packets.append(p)
  return {"device": cap["device"], "queue": cap["queue"], "engine": cap["engine"], "packets": packets}

def _decode_cmd(cap: dict[str, Any], c: dict[str, Any], w: list[int]) -> tuple[str, str]:
  v = cap["vendor"]
  if v == "nv":
    from baregrad.drivers.nv import hw
    info = cap["info"]
    classes = {hw.SUBC_COMPUTE: info["compute_class"], hw.SUBC_COPY: info["dma_class"]}
    lines = [line for _, line in hw.summarize(hw.decode_pushbuffer(w), classes)]
    detail = "pushbuffer methods:\n" + hw.format_methods(w, classes)
    if "qmd" in c:
      ver = hw.QMD_VERSION[info["compute_class"]]
      qw = hw.words_of(c["qmd"])
      launch = ", ".join(f"{k}={x if not isinstance(x, int) else hex(x)}" for k, x in hw.read_qmd(qw, ver).items())
      detail += f"\nQMD v0{ver} ({hw.class_name(info['compute_class'])}) of kernel {c.get('kernel')}:\n{hw.format_qmd(qw, ver)}\nlaunch: {launch}"
    return "; ".join(" ".join(x.split()) for x in lines), detail
  if v == "amd":
    from baregrad.drivers.amd import hw as ahw
    fam = cap["info"]["family"]
    if cap["info"].get("sdma"): d = ahw.format_sdma(fam, w)
    elif c["kind"] in ("exec", "barrier"): d = ahw.format_aql(w)
    else: d = ahw.format_pm4(fam, w)
    return re.sub(r"^(0x[0-9a-fA-F]+|@\s*\d+):\s*", "", " ".join(d.strip().split("\n")[0].split())), d
  if v == "cpu":
    from baregrad.drivers.cpu_encoding import decode_words
    d = decode_words(w)
    return re.sub(r"^\s*(->)?\[\s*\d+\]\s*@\s*\d+\s*", "", d) if d else c["kind"], d
  return c["kind"], " ".join(f"{x:#010x}" for x in w)
