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
    elif c.kind == "signal":
      try: e["value"] = q.field(i, "value")   # a timeline value: PROFILE names the kernel span it ends by it
      except (KeyError, ValueError): pass
    cmds.append(e)
  info: dict[str, Any] = {}
  if vendor == "nv": info = {"compute_class": getattr(dev, "compute_class", None), "dma_class": getattr(dev, "dma_class", None)}
  elif vendor == "amd":
    from baregrad.drivers.amd.queues import AMDCopyQueue
    info = {"family": getattr(q, "family", "gfx11"), "sdma": isinstance(q, AMDCopyQueue)}
  return {"device": getattr(dev, "device", str(dev)), "queue": type(q).__name__, "engine": getattr(q, "engine", ""), "vendor": vendor,
          "info": info, "words": q.words.tobytes(), "cmds": cmds, "ring_before": _ring_put(q, dev, vendor, info), "_q": q, "_dev": dev}

def _ring(q: Any, dev: Any, vendor: str, info: dict[str, Any]) -> Any:
  """The ring a submission of q goes to: the NV GPFIFO channel, the AMD AQL ring or SDMA ring (None for the CPU)."""
  if vendor == "nv": return getattr(dev, "channels", {}).get(q.engine)
  if vendor == "amd": return getattr(dev, "sdma" if info.get("sdma") else "aql", None)
  return None

def _ring_put(q: Any, dev: Any, vendor: str, info: dict[str, Any]) -> int | None:
  r = _ring(q, dev, vendor, info)
  return None if r is None else r.put

def submitted(cap: dict[str, Any]) -> None:
  """Right after the submission: copy what it wrote to the ring, from the put pointer before it to the one after
  (NV: GPFIFO entries; AMD: the AQL packets and the PM4 indirect buffers they point at, or the SDMA ring's words).
  Another thread submitting to the same ring in between would show up here too (VIZ is a debugging aid)."""
  q, dev = cap.pop("_q"), cap.pop("_dev")
  r, pre = _ring(q, dev, cap["vendor"], cap["info"]), cap.pop("ring_before")
  if r is None or pre is None: return
  post = r.put
  if cap["vendor"] == "nv":
    cap["ring"] = {"kind": "gpfifo", "channel": r.name, "first": pre,
                   "entries": [int(r.ring[i % r.entries]) for i in range(pre, post if post >= pre else post + r.entries)]}
  elif cap["info"].get("sdma"):
    size = r.ring.size
    cap["ring"] = {"kind": "sdma", "first": pre,
                   "words": [ctypes.c_uint32.from_address(r.ring.cpu + (b % size)).value for b in range(pre, post, 4)]}
  else:
    from baregrad.drivers.amd import hw as ahw
    pkts, ibs = [], {}
    for i in range(pre, post):
      w = list((ctypes.c_uint32 * 16).from_address(r.ring.cpu + 64 * (i % r.nslots)))
      pkts.append(w)
      d = ahw.decode_aql(w)
      if d["type"] == ahw.AQL_VENDOR and d["format"] == ahw.AMD_AQL_FORMAT_PM4_IB:
        va, ndw = d["ib_cmd"][1] | (d["ib_cmd"][2] << 32), d["ib_cmd"][3] & 0xFFFFF
        if r.ib.va <= va and va + 4 * ndw <= r.ib.va + r.ib.size: ibs[va] = list((ctypes.c_uint32 * ndw).from_address(r.ib.cpu + va - r.ib.va))
    cap["ring"] = {"kind": "aql", "first": pre, "packets": pkts, "ibs": ibs}

def decode(cap: dict[str, Any]) -> dict[str, Any]:
  """A capture as the recording stores it: {device, queue, engine, nwords, signals (values signalled), packets: [{kind, text, detail, kernel?, kernel_index?}],
  ring?: [{text, detail}]}, where text is a command in one line of words, detail its packets (methods, PM4/AQL/SDMA
  fields, the QMD), and ring what the submission wrote to the device's ring."""
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
  out = {"device": cap["device"], "queue": cap["queue"], "engine": cap["engine"], "nwords": len(words), "packets": packets,
         "signals": [c["value"] for c in cap["cmds"] if "value" in c]}
  if "ring" in cap:
    try: out["ring"] = _decode_ring(cap)
    except Exception as e:  # noqa: BLE001  (shown, not fatal: the packets above are decoded already)
      out["ring"] = [{"text": f"ring: not decoded ({type(e).__name__}: {e})", "detail": ""}]
  return out

def _decode_ring(cap: dict[str, Any]) -> list[dict[str, str]]:
  """What the submission wrote to the device's ring, one entry per line: GPFIFO entries, AQL packets, SDMA words."""
  r = cap["ring"]
  if r["kind"] == "gpfifo":
    from baregrad.drivers.nv import hw
    out = []
    for j, e in enumerate(r["entries"]):
      addr, n, sync = hw.decode_gp_entry(e)
      out.append({"text": f"GPFIFO entry {r['first'] + j} ({r['channel']} channel): {n} pushbuffer words at {addr:#x}" + (" sync" if sync else ""),
                  "detail": f"GP_ENTRY0 {e & 0xFFFFFFFF:#010x} GP_ENTRY1 {e >> 32:#010x} (NVC56F_GP_ENTRY0_GET, NVC56F_GP_ENTRY1_GET_HI, "
                            "_LENGTH, _SYNC): the GPU fetches the pushbuffer segment whose commands are listed below"})
    return out
  from baregrad.drivers.amd import hw as ahw
  fam = cap["info"]["family"]
  if r["kind"] == "sdma":
    return [{"text": f"SDMA ring bytes {r['first']:#x}..{r['first'] + 4 * len(r['words']):#x}: {len(r['words'])} words "
                     "(the commands below, with the fence and trap a signal adds)", "detail": ahw.format_sdma(fam, r["words"])}]
  out = []
  for j, w in enumerate(r["packets"]):
    d = ahw.decode_aql(w)
    detail = ahw.format_aql(w)
    if d["type"] == ahw.AQL_VENDOR and d["format"] == ahw.AMD_AQL_FORMAT_PM4_IB:
      va = d["ib_cmd"][1] | (d["ib_cmd"][2] << 32)
      if va in r["ibs"]: detail += f"\nindirect buffer at {va:#x}:\n" + ahw.format_pm4(fam, r["ibs"][va], va)
    out.append({"text": f"AQL packet {r['first'] + j}: {ahw.format_aql(w)}", "detail": detail})
  return out

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
