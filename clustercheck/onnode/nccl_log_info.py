"""What NCCL's INFO lines say of its set-up, one line's text at a time (its prefix already read): the version, the
bootstrap interface, the net plugin loaded or not and why (its wording changed eight times), the network used, the
IB / RoCE devices and GPUDirect RDMA, the socket interfaces (2.3's one line per interface taken, with their count and
distances, as well as the later list), aws-ofi-nccl's provider, the communicator's size, NVLS, P2P disabled, and
every `NCCL_*` setting NCCL took from the environment. Standard library only (Python 3.6+): shipped to the nodes
beside nccl_log_reader.py, which reads the whole log; connection lines (`via ...`) are nccl_log_connections.py's.

The forms are NCCL's own format strings from 2.3 to 2.30 (NVIDIA/nccl src/init.cc, bootstrap.cc, net.cc,
transport/net_ib.cc, graph/paths.cc, nvls.cc).
"""

import re

# host:pid:tid [cudaDev] [file.cc:line] NCCL INFO|WARN message: the prefix is read before "NCCL INFO" (a
# launcher may prefix it), once per distinct prefix
VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)[^+\s]*(?:\+cuda(\d+\.\d+))?")
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
# the rank and the communicator's size as any version says them: init.cc's "ncclCommInitRank comm %p rank %d nranks
# %d ... Init START", 2.3's "rank %d nranks %d", the init timings (2.23+) "ncclCommInitRankConfig: rank %d nranks %d"
_RANK_OF = re.compile(r"\brank (\d+) nranks (\d+)\b")
_NVLS = re.compile(r"NVLS multicast support is (not )?available")
P2P_OFF = re.compile(r"P2P is disabled between (NVLINK )?connected GPUs (\d+) and (\d+)")
# net.cc (2.19+): a net (internal or plugin, by its ncclNet name) that could not start
_NET_INIT_FAILED = re.compile(r"^Failed to initialize NET plugin (.+?)\s*$")
MAX_WARNS = 20


def tally(table, key):
    table[key] = table.get(key, 0) + 1


def read_info(text, rank, only_find=False, _cache={}):
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
    tally(r["gdr"], "disabled")


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
        tally(r["gdr"], "disabled")


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
    tally(r["gdr"], "supported" if said == "enabled" and "for GPU" not in text else said)


def _comm(m, r, _):
    r["rank"], r["nranks"], r["nnodes"] = int(m.group(1)), int(m.group(2)), int(m.group(3))


def _complete(m, r, _):
    if r["rank"] is None:
        r["rank"], r["nranks"] = int(m.group(1)), int(m.group(2))


def _nvls(m, r, _):
    r["nvls"] = not m.group(1)


def p2p_off(m, r, text):
    if len(r["p2p_disabled"]) < MAX_WARNS:
        r["p2p_disabled"].append({"gpus": [int(m.group(2)), int(m.group(3))], "nvlink": bool(m.group(1)),
                                  "line": "NCCL INFO " + text[:300]})


# (words one of which the line holds, the pattern, what it sets): the words are a cheap test before the pattern;
# " via " lines (connections) are read by nccl_log_reader.read_nccl_line, before this table
_INFO = ((("NCCL version",), VERSION, _version), (("Using network", "Network"), _NETWORK, _network),
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
         (("Init COMPLETE",), _COMPLETE, _complete), ((" nranks ",), _RANK_OF, _complete), (("NVLS",), _NVLS, _nvls), (("P2P is disabled",), P2P_OFF,
                                                                                 p2p_off))
