"""Which path NCCL really took, read from its own INFO and WARN lines: a pure reader, standard library only
(Python 3.6+), run on the nodes over their ranks' NCCL_DEBUG_FILE logs (only a summary crosses the network, with
ncclprefix.py, which tells where each line came from) and on any log a user hands `clustercheck explain`.

    python3 ncclpath.py FILE...      # one JSON summary of the files' lines

The forms are NCCL's own format strings from 2.3 to 2.30 (NVIDIA/nccl src/init.cc, bootstrap.cc, net.cc,
transport/net_ib.cc, p2p.cc, shm.cc, graph/paths.cc, nvls.cc): the version, the bootstrap interface, the net plugin
loaded or not and why (its wording changed eight times), the network used, the IB / RoCE devices and GPUDirect
RDMA, each connection's transport (`via NET/IB/0/GDRDMA`, `via NET/Socket/1`, `via P2P/CUMEM`, `via SHM/direct`),
the communicator's size, NVLS, P2P disabled, every `NCCL_*` setting NCCL took from the environment, and every WARN.
A line cut mid-way or interleaved with another rank's is read for what it holds; the lines a large job repeats by
the thousand (its connections) are counted in bulk (read_lines).
"""

import json
import re
import sys
from collections import Counter
from itertools import islice

try:
    from .ncclprefix import MARK, heads, old_mark, stripped, where
except ImportError:     # shipped to a node: inline_command registers ncclprefix beside this program
    from ncclprefix import MARK, heads, old_mark, stripped, where

# host:pid:tid [cudaDev] [file.cc:line] NCCL INFO|WARN message: the prefix is read before "NCCL INFO" (a
# launcher may prefix it), once per distinct prefix
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)[^+\s]*(?:\+cuda(\d+\.\d+))?")
_BOOTSTRAP = re.compile(r"^Bootstrap ?: Using\s*(?:\[\d+\])?([\w.-]+):([^<\s]+)<")
_NETWORK = re.compile(r"^Using (?:network|(?:internal|external) Network) (.+?)\s*$")
# the list may be cut (`...`) or wrapped before its "; OOB": its devices are read all the same; 2.3's "NET/IB : Using
# interface eno1 for sideband communication" is no list
_IB_LIST = re.compile(r"^NET/IB ?: Using(?! interface)(.*?)(?:; OOB ([\w.-]+)|$)")
# "[0]mlx5_0:1/IB", "[1]mlx5_1:1:0/RoCE" (rail, plane: 2.27+), "[0]ibp0:1/IB/SHARP" (the SHARP plugin), and the
# per-device line "NET/IB: [0] mlx5_0:1/IB " (2.3) or "NET/IB: [0] mlx5_0:uverbs0:1/IB provider=" (2.27+)
_IB_DEVICE = re.compile(r"\[\d+\] ?([\w.-]+):(?:[a-z]+\d+:)?(\d+)(?::\d*)*/(IB|RoCE|UNSPECIFIED)")
_IB_ONE = re.compile(r"^NET/IB ?: ?\[\d+\] ?[\w.-]+:(?:[a-z]+\d+:)?\d+(?::\d*)*/(IB|RoCE)")
_NO_IB = re.compile(r"^NET/IB ?: ?(?:No (?:device|IP interface) found|call to devices\(\) returned 0 devices)", re.I)
_SOCKET_LIST = re.compile(r"^NET/Socket ?: Using (.*)")
# 2.3: each interface a findInterfaces call took ("NET : Using interface eth0:10.0.0.2<0>": the bootstrap's, then the
# socket net's), then the socket net's count of them (net_socket.cu), and its NICs' distances ("IP Interfaces : lo(SOC)")
_IF_ONE = re.compile(r"^NET : Using interface ([\w.-]+):([^<\s]+)")
_SOCKET_COUNT = re.compile(r"^NET/Socket ?: (\d+) interfaces? found")
_SOCKET_PATHS = re.compile(r"IP Interfaces ?: ?((?:[\w.-]+\(\w+\) ?)+)")
# an RDMA device named in any line (a list, NCCL_IB_HCA, a GPUDirect line): the hardware the node has, whatever net
# NCCL then used; Mellanox/NVIDIA, Broadcom, Intel, QLogic, Omni-Path, EFA, Alibaba's eRDMA, Chelsio iWARP
_RDMA_NAME = re.compile(r"\b(?:mlx\d_(?:bond_)?\d+|bnxt_re\d+|irdma\d+|qedr\d+|hfi1_\d+|efa_\d+|rdmap\w+|erdma_\d+|"
                        r"roce[po]\w+|cxgb4_\d+)\b")
_RDMA_WORDS = ("mlx", "bnxt_re", "irdma", "qedr", "hfi1", "efa_", "rdmap", "erdma", "roce", "cxgb4")
# any NET/OFI line: aws-ofi-nccl started (its provider where it names one, EFA where it names an AWS platform)
_OFI = re.compile(r"NET/OFI (?:.*?(?:[Ss]elected [Pp]rovider is (\w+)|Running on ([\w.-]+) platform))?")
_OFI_NO_GDR = re.compile(r"NET/OFI .*(?:disabling GDR|GDR not supported)|FI_HMEM capability requires RDMA, which")
_IBVERBS = re.compile(r"Failed to open libibverbs")
_PLUGIN_OK = re.compile(r"(?:NET/Plugin ?: ?Loaded (?:net )?plugin|Successfully loaded external (?:net )?plugin|"
                        r"NET/Plugin: Using(?! internal)|^P2P plugin) (.+?)(?: \(v\d+\))?\.?\s*$")
_COLLNET = re.compile(r"Loaded collnet plugin (.+?)(?: \(v\d+\))?\.?\s*$")
_PLUGIN_NONE = re.compile(r"NET/Plugin ?: ?(?:No plugin found|Could not find|.*using internal|.*Using internal)")
_PLUGIN_FAIL = re.compile(r"NET/Plugin ?: ?(?:Plugin load (?:\(([^)]*)\) )?returned (\d+) ?: ?(.*)|"
                          r"Failed to find (ncclNetPlugin\w*) symbol|dlerror=(.*?) No plugin)")
_ENV = re.compile(r"(NCCL_\w+) set (?:by environment )?to (\S+)")     # "set to": socket.cc's, net_ib.cc's own
_GDR = re.compile(r"GPU Direct RDMA (Enabled|Disabled)")
_COMM = re.compile(r"comm 0x[0-9a-f]+ rank (\d+) nRanks (\d+) nNodes (\d+)")
_COMPLETE = re.compile(r"rank (\d+) nranks (\d+) cudaDev (\d+).*Init COMPLETE")
_NVLS = re.compile(r"NVLS multicast support is (not )?available")
_P2P_OFF = re.compile(r"P2P is disabled between (NVLINK )?connected GPUs (\d+) and (\d+)")
# WARNs that say the net NCCL wanted could not start: libibverbs absent (2.3 to 2.30), verbs that failed to open or
# list the devices (misc/ibvwrap.cc), an IB device that could not be opened or no IP interface for its out-of-band,
# aws-ofi-nccl failing (NET/OFI); a fallback only where the job then shows sockets (nccl/network.py)
_NET_WARN = re.compile(r"Failed to open libibverbs|Call to ibv_(?:open_device|get_device_list|query_\w+) failed|"
                       r"NET/IB ?: (?:Unable to open|Unable to query|No IP interface|No device)|"
                       r"NET/OFI .*(?:[Ff]ailed|[Cc]ouldn't|[Uu]nable|No eligible|not supported)")
# WARNs of a net's own connections or transfers (transport/net_ib, net_socket.cc): that net was the one in use
_NET_USED_WARN = re.compile(r"^NET/(IB|Socket)\w*(?:/GIN)? ?: ?(?:Got completion|.*async|req \d|Attempted to connect|"
                            r"Remote |peer |socket progress)")
# net.cc (2.19+): a net (internal or plugin, by its ncclNet name) that could not start
_NET_INIT_FAILED = re.compile(r"^Failed to initialize NET plugin (.+?)\s*$")
MAX_WARNS = 20


def _rank(ranks, key, device):
    if key not in ranks:
        ranks[key] = {"host": key[0], "pid": key[1], "device": device, "rank": None, "nranks": None,
                      "nnodes": None, "version": None, "cuda": None, "bootstrap": None, "network": None,
                      "plugin": None, "collnet": None, "net_devices": [], "link_layers": [], "socket_ifs": [],
                      "env": {}, "gdr": {}, "inter": {}, "intra": {}, "nvls": None, "p2p_disabled": [],
                      "net_failures": [], "warns": [], "diag": [], "lines": 0, "peers": {}}
    return ranks[key]


def _count(table, key):
    table[key] = table.get(key, 0) + 1


def read_line(line, ranks, job, default="log"):
    """One line into the per-rank summaries (ranks: (host, pid) -> summary) and the job's (version lines with
    no host: up to 2.22 only rank 0 prints it, bare). Several NCCL lines joined on one (a pasted log) are each
    read; a line whose NCCL prefix was stripped is read when it starts as NCCL's messages do."""
    at = line.find("NCCL INFO ")
    if at >= 0 and line.find("NCCL ", at + 10) < 0:     # one INFO line, most of a log: the short way
        head = line[:at]
        key = (heads.get(head) if default == "log" else None) or where(head, default)
        rank = ranks.get(key[0]) or _rank(ranks, key[0], key[1])
        rank["lines"] += 1
        via = line.find(" via ", at)
        if via < 0:
            _read_info(line[at + 10:].strip(), rank)
            return
        kind = via_kind(line[via + 5:].strip())     # a connection: one line per channel and peer
        if kind:
            table = rank[kind[0]]
            table[kind[1]] = table.get(kind[1], 0) + 1
            _peer(rank, kind, line, at + 10, via)
        return
    at = line.find("NCCL ")
    if at >= 0 and line.find("NCCL ", at + 10) >= 0:
        starts = [m.start() for m in MARK.finditer(line)]
        if len(starts) > 1:
            cuts = starts[1:] + [len(line)]
            _read_one(line[:cuts[0]], ranks, job, default)
            for start, end in zip(cuts, cuts[1:]):
                _read_one(line[start:end], ranks, job, default)
            return
    _read_one(line, ranks, job, default)


def _read_one(line, ranks, job, default):
    at, level = line.find("NCCL INFO"), "INFO"
    if at < 0:
        at, level = line.find("NCCL WARN"), "WARN"
    if at < 0:
        at, level = line.find("NCCL DIAG"), "DIAG"
    skip = 10
    if at < 0:
        at, level, skip = old_mark(line)
    if at < 0:
        bare = _VERSION.search(line)
        if bare:
            job.setdefault("versions", {})
            _count(job["versions"], bare.group(1))
            job["cuda"] = bare.group(2)
            return
        key, text = stripped(line, default)
        if key is None:
            return
        level = "INFO"
    else:
        head, text = line[:at], line[at + skip:]
        key = where(head, default)
    rank = ranks.get(key[0]) or _rank(ranks, key[0], key[1])
    rank["lines"] += 1
    if level == "WARN":
        if len(rank["warns"]) < MAX_WARNS:
            rank["warns"].append(text.strip()[:300])
        if _NET_WARN.search(text) and len(rank["net_failures"]) < 5:
            rank["net_failures"].append("NCCL WARN " + text.strip()[:300])
        used = _NET_USED_WARN.match(text.strip())
        if used:
            rank["warned_net"] = used.group(1)
        off = _P2P_OFF.search(text) if "P2P is disabled" in text else None     # paths.cc: a WARN between NVLinks
        if off:
            _p2p_off(off, rank, text.strip())
        return
    if level == "DIAG":
        if len(rank["diag"]) < 200:
            rank["diag"].append(text.strip()[:400])
        return
    if " via " in text or text.lstrip().startswith("via "):    # most of a big job's lines: one per channel and peer
        via = text.find("via ")
        kind = via_kind(text[via + 4:].strip())
        if kind:
            _count(rank[kind[0]], kind[1])
            _peer(rank, kind, text, 0, via - 1)
        return
    _read_info(text.strip(), rank)


def _read_info(text, rank, only_find=False, _cache={}):
    """The text's readings, in _INFO's order (found once per distinct text: a job repeats its lines)."""
    found = _cache.get(text)
    if found is None:
        found = []
        for words, pattern, take in _INFO:
            match = pattern.search(text) if any(word in text for word in words) else None
            if match:
                found.append((take, match))
                if pattern is not _ENV:     # a settings line says nothing else
                    break
        named = _RDMA_NAME.search(text) if any(word in text for word in _RDMA_WORDS) else None
        if named:               # whatever else the line says
            found.append((_rdma_named, named))
        if len(_cache) < 20000:
            _cache[text] = found
    for take, match in () if only_find else found:
        take(match, rank, text)
    return found


def _version(m, r, _):
    r["version"], r["cuda"] = m.group(1), m.group(2)


def _bootstrap(m, r, _):
    r["bootstrap"] = r["bootstrap"] or {"if": m.group(1), "addr": m.group(2)}


def _network(m, r, _):
    r["network"] = m.group(1)


def _ib_list(m, r, text):
    devices = _IB_DEVICE.findall(m.group(1))
    if devices:
        r["net_devices"] = ["%s:%s/%s" % d for d in devices]
        r["link_layers"] = sorted(set(r["link_layers"]) | {d[2] for d in devices})
        _rdma_named(None, r, text)
    elif m.group(2):            # "NET/IB : Using [RO]; OOB eno1": the IB transport started with no device
        _net_failed(r, "IB", text)


def _ib_one(m, r, _):
    if m.group(1) not in r["link_layers"]:
        r["link_layers"] = sorted(set(r["link_layers"]) | {m.group(1)})


def _no_ib(m, r, text):
    r["net_devices"] = []
    r["no_ib_device"] = True
    _net_failed(r, "IB", text)


def _net_failed(r, name, text):
    """A net NCCL tried that did not start (NCCL then tries the next: plugin, IB, Socket)."""
    r.setdefault("nets_failed", [])
    if name not in r["nets_failed"]:
        r["nets_failed"].append(name)
    _net_failure(r, "NCCL INFO " + text)


def _net_failure(r, line):
    if len(r["net_failures"]) < 5 and line[:300] not in r["net_failures"]:
        r["net_failures"].append(line[:300])


def _collnet(m, r, _):
    r["collnet"] = m.group(1)


def _ofi_no_gdr(m, r, _):
    _count(r["gdr"], "disabled")


def _sockets(m, r, text):
    found = re.findall(r"\[\d+\]([\w.-]+):([^<\s]*)", m.group(1))     # "[0]lo:127.0.0.1<0> [1]eth0:10.0.0.2<0>"
    r["socket_ifs"] = [name for name, _ in found]
    r["socket_addrs"] = [addr for _, addr in found]
    r["socket_line"] = text[:300]


def _if_one(m, r, text):
    """2.3's one interface taken: the first a process prints is its bootstrap's, the next its socket net's."""
    r["bootstrap"] = r["bootstrap"] or {"if": m.group(1), "addr": m.group(2), "line": text[:300]}
    listed = r.setdefault("if_lines", [])
    if len(listed) < 16:
        listed.append([m.group(1), m.group(2), text[:300]])


def _socket_count(m, r, text):
    """2.3's socket net started with the last N interfaces its process listed."""
    taken = (r.get("if_lines") or [])[-int(m.group(1)):] if int(m.group(1)) else []
    r["socket_ifs"] = [name for name, _, _ in taken] or r["socket_ifs"] or ["?"]
    r["socket_addrs"] = [addr for _, addr, _ in taken]
    r["socket_lines"] = [line for _, _, line in taken]


def _socket_paths(m, r, text):
    if not r["socket_ifs"]:
        r["socket_ifs"] = re.findall(r"([\w.-]+)\(", m.group(1))
        r["socket_addrs"] = ["" for _ in r["socket_ifs"]]
        r["socket_line"] = text[:300]


def _rdma_named(m, r, text):
    r["rdma_line"] = r.get("rdma_line") or "NCCL INFO " + text[:300]


def _ofi(m, r, text):
    r["ofi"] = True
    if m.group(1) or m.group(2):
        r["ofi_provider"] = m.group(1) or "efa"        # an EC2 platform aws-ofi-nccl knows: its NICs are EFA
    if _OFI_NO_GDR.search(text):
        _count(r["gdr"], "disabled")


def _plugin_ok(m, r, _):
    r["plugin"] = {"status": "loaded", "name": m.group(1).rstrip(".")}


def _plugin_fail(m, r, text):
    missing = re.search(r"cannot open shared object file|No such file|Could not find", text)
    if r["plugin"] and r["plugin"]["status"] == "loaded":
        return
    r["plugin"] = {"status": "none" if missing and not m.group(4) else "failed", "detail": text[:300]}
    if r["plugin"]["status"] == "failed":
        _net_failure(r, "NCCL INFO " + text)


def _plugin_none(m, r, text):
    if not r["plugin"] or r["plugin"]["status"] == "none":
        r["plugin"] = {"status": "none", "detail": text[:300]}


def _env(m, r, _):
    r["env"][m.group(1)] = m.group(2).rstrip(".")


def _gdr(m, r, text):
    # "Enabled for GPU x / HCA y" is NCCL's choice for that pair; "Enabled for HCA n 'mlx5_0'" only says the NIC
    # could (net.cc / topo.cc): kept apart, it is not GPUDirect in use
    said = m.group(1).lower()
    _count(r["gdr"], "supported" if said == "enabled" and "for GPU" not in text else said)


_VIA_TAIL = re.compile(r"^(NET/([A-Za-z][\w ]*?)/\d+(?:\(\d+\))?(/GDRDMA)?|P2P/(?:IPC|CUMEM|MNNVL|direct pointer|indirect|"
                       r"common device)|SHM|direct shared memory|NVLS|CollNet)")


def via_kind(tail, _cache={}):
    """"NET/IB/GDRDMA" of "NET/IB/0/GDRDMA(PCI)/Shared", "P2P/CUMEM" of "P2P/CUMEM/read", "SHM" of
    "SHM/direct/direct" (None: not a connection): read once per distinct tail (a 1,000-rank job has few)."""
    if tail in _cache:
        return _cache[tail]
    match = _VIA_TAIL.match(tail)
    if not match:
        kind = None
    elif match.group(2):
        kind = ("inter", "NET/%s%s" % (match.group(2), "/GDRDMA" if match.group(3) else ""))
    else:
        kind = ("intra", "SHM" if match.group(1) in ("SHM", "direct shared memory") else match.group(1))
    if len(_cache) < 10000:
        _cache[tail] = kind
    return kind


_PAIR = re.compile(r"(\d+)(?:\[\w+\])? -> (\d+)(?:\[\w+\])?( \[receive\])?")
MAX_PEERS = 64


def pair_of(segment, _cache={}):
    """"me>peer" of a connection's "0[0] -> 1[1] [receive]" (2.4 to 2.30; also "0 -> 1"): the process that prints
    it is the sender, the receiver on a "[receive]" line (net.cc, p2p.cc, shm.cc); None where it names no ranks."""
    found = _cache.get(segment, False)
    if found is False:
        match = _PAIR.search(segment)
        found = None if not match else ("%s>%s" % ((match.group(2), match.group(1)) if match.group(3) else
                                                    (match.group(1), match.group(2))))
        if len(_cache) < 10000:
            _cache[segment] = found
    return found


def _peer(rank, kind, line, start, via):
    """The ranks a connection joins, one line of each kind kept per pair (the judges ask whether the two are on the
    same host: nccl/impossible_facts.py)."""
    peers = rank["peers"]
    if len(peers) >= MAX_PEERS:
        return
    colon = line.rfind(" : ", start, via)
    pair = pair_of(line[colon + 3:via] if colon >= 0 else line[start:via])
    if pair and pair not in peers:
        peers[pair] = [kind[0], kind[1], line[start:][:300].strip()]


def _comm(m, r, _):
    r["rank"], r["nranks"], r["nnodes"] = int(m.group(1)), int(m.group(2)), int(m.group(3))


def _complete(m, r, _):
    if r["rank"] is None:
        r["rank"], r["nranks"] = int(m.group(1)), int(m.group(2))


def _nvls(m, r, _):
    r["nvls"] = not m.group(1)


def _p2p_off(m, r, text):
    if len(r["p2p_disabled"]) < MAX_WARNS:
        r["p2p_disabled"].append({"gpus": [int(m.group(2)), int(m.group(3))], "nvlink": bool(m.group(1)),
                                  "line": "NCCL INFO " + text[:300]})


# (words one of which the line holds, the pattern, what it sets): the words are a cheap test before the pattern;
# " via " lines (connections) are read in read_line, before this table
_INFO = ((("NCCL version",), _VERSION, _version), (("Using network", "Network"), _NETWORK, _network),
         (("Bootstrap",), _BOOTSTRAP, _bootstrap), (("NET/IB",), _IB_LIST, _ib_list),
         (("NET/IB",), _IB_ONE, _ib_one), (("No device found", "No IP interface", "returned 0 devices"), _NO_IB, _no_ib),
         (("NET/Socket",), _SOCKET_LIST, _sockets),
         (("NET : Using interface",), _IF_ONE, _if_one), (("interface",), _SOCKET_COUNT, _socket_count),
         (("IP Interfaces",), _SOCKET_PATHS, _socket_paths), (("NET/OFI",), _OFI, _ofi), (("GDR", "FI_HMEM"), _OFI_NO_GDR, _ofi_no_gdr),
         (("collnet",), _COLLNET, _collnet),
         (("libibverbs",), _IBVERBS, lambda m, r, text: _net_failure(r, "NCCL INFO " + text)), (("Plugin", "plugin"), _PLUGIN_OK, _plugin_ok),
         (("Plugin",), _PLUGIN_FAIL, _plugin_fail), (("Plugin",), _PLUGIN_NONE, _plugin_none),
         (("Failed to initialize NET",), _NET_INIT_FAILED, lambda m, r, text: _net_failed(r, m.group(1), text)),
         (("set by environment", " set to "), _ENV, _env), (("GPU Direct RDMA",), _GDR, _gdr), (("comm 0x",), _COMM, _comm),
         (("Init COMPLETE",), _COMPLETE, _complete), (("NVLS",), _NVLS, _nvls), (("P2P is disabled",), _P2P_OFF,
                                                                                 _p2p_off))


def _shape(line, default):
    """(rank key, connection kind or None) of a one-INFO line whose reading is a count (a connection, or a line
    that sets nothing: `Connected all rings`, `Trees`); None for any other line, read in order."""
    at = line.find("NCCL INFO ")
    if at < 0 or line.find("NCCL ", at + 10) >= 0:
        return None
    key = (heads.get(line[:at]) if default == "log" else None) or where(line[:at], default)
    via = line.find(" via ", at)
    if via >= 0:
        return key, via_kind(line[via + 5:].strip()), at, via
    return None if _read_info(line[at + 10:].strip(), None, True) else (key, None, at, via)     # no pattern reads it


def read_lines(lines, ranks, job, default="log", wanted=None, text=None):
    """A block of lines into the summaries, the same as read_line on each: a line repeated in the block (a large
    job's connections and `Connected all rings`, by the thousand) is read once and counted where its rank and
    connection kind are known from the lines before, the others are read in order. wanted: which lines are
    NCCL's (all); text: the str of a line given as bytes."""
    for start in range(0, len(lines), 8192):      # a rank's first lines are read in order, the later ones counted
        block, slow = lines[start:start + 8192], set()
        for line, count in Counter(block).items():
            if wanted and not wanted(line):
                continue
            said = text(line) if text else line.rstrip("\r")
            shape = _shape(said, default)
            rank, kind = (ranks.get(shape[0][0]), shape[1]) if shape else (None, None)
            if rank is None or (kind and kind[1] not in rank[kind[0]]):
                slow.add(line)
                continue
            rank["lines"] += count
            if kind:
                rank[kind[0]][kind[1]] += count
                _peer(rank, kind, said, shape[2] + 10, shape[3])
        for i, line in enumerate(block) if slow else ():
            if line not in slow:
                continue
            said = text(line) if text else line.rstrip("\r")
            if i and said.lstrip().startswith("via ") and "NCCL" not in said:
                before = text(block[i - 1]) if text else block[i - 1].rstrip("\r")
                if "NCCL" in before and " via " not in before:      # a connection line broken in two before "via"
                    said = before.rstrip() + " " + said.strip()
            read_line(said, ranks, job, default)


def summarize(lines):
    """{"ranks": [each rank's summary], "job": {...}} of an iterable of NCCL log lines."""
    lines = iter(lines)
    return _summary(batch for batch in iter(lambda: [line.rstrip("\n") for line in islice(lines, 4096)], []))


def _summary(blocks):
    ranks, job = {}, {}
    for lines in blocks:       # a debug file's lines are all NCCL's: a stripped prefix is read too
        read_lines(lines, ranks, job)
    for rank in ranks.values():
        if rank["version"] is None and len(job.get("versions") or {}) == 1:
            rank["version"] = next(iter(job["versions"]))
            rank["cuda"] = rank["cuda"] or job.get("cuda")
    return {"ranks": [r for r in ranks.values() if r["lines"]], "job": job}


def summarize_files(paths):
    """The summary of the ranks' NCCL_DEBUG_FILE logs (never raises: an unreadable file is said)."""
    problems = []

    def blocks():           # whole lines, 256 KB at a time
        for path in paths:
            try:
                with open(path, errors="replace") as handle:
                    for block in iter(lambda: handle.read(1 << 18), ""):
                        yield (block if block.endswith("\n") else block + handle.readline()).split("\n")
            except OSError as exc:
                problems.append("%s: %s" % (path, exc.strerror))
    summary = _summary(blocks())
    summary["unreadable"] = problems
    summary["files"] = len(paths) - len(problems)
    return summary


if __name__ == "__main__":
    json.dump(summarize_files(sys.argv[1:]), sys.stdout)
    sys.stdout.write("\n")
