"""Helpers the node-side programs share: reading files, commands and names under deadlines,
network interfaces and routes, the allow-listed environment, and printing one JSON document.

Standard library only, Python 3.6+. Shipped to the nodes together with the program that
uses it (clustercheck.onnode.inline_command); nothing here may raise out of a collector
except as an ordinary exception its caller records as missing.
"""

import fcntl
import hashlib
import json
import os
import platform
import re
import socket
import struct
import subprocess
import sys
import threading
import time

# The environment a report may show, by exact name: the settings of NCCL, Gloo, torch.distributed and
# CUDA that change how training communicates (NCCL's and PyTorch's documented variables). Any other
# variable of these families is said to be set, its value never shown: a name can hide a credential
# (NCCL_NET_PLUGIN_AUTH_TOKEN, an APIKEY, a PASSPHRASE) that no list of bad words foresees.
ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_", "MASTER_", "HF_", "HUGGING_FACE_")
ENV_NAMES = frozenset("""
NCCL_ALGO NCCL_ASYNC_ERROR_HANDLING NCCL_BLOCKING_WAIT NCCL_BUFFSIZE NCCL_CHECKS_DISABLE NCCL_COLLNET_ENABLE
NCCL_CROSS_NIC NCCL_CUMEM_ENABLE NCCL_DEBUG NCCL_DEBUG_FILE NCCL_DEBUG_SUBSYS NCCL_IB_ADAPTIVE_ROUTING
NCCL_IB_AR_THRESHOLD NCCL_IB_DISABLE NCCL_IB_GID_INDEX NCCL_IB_HCA NCCL_IB_MERGE_NICS NCCL_IB_PCI_RELAXED_ORDERING
NCCL_IB_QPS_PER_CONNECTION NCCL_IB_RETRY_CNT NCCL_IB_ROCE_VERSION_NUM NCCL_IB_SL NCCL_IB_SPLIT_DATA_ON_QPS
NCCL_IB_TC NCCL_IB_TIMEOUT NCCL_IGNORE_CPU_AFFINITY NCCL_LAUNCH_MODE NCCL_MAX_NCHANNELS NCCL_MIN_NCHANNELS
NCCL_NET NCCL_NET_GDR_LEVEL NCCL_NET_GDR_READ NCCL_NET_PLUGIN NCCL_NSOCKS_PERTHREAD NCCL_NTHREADS NCCL_NVLS_ENABLE
NCCL_P2P_DISABLE NCCL_P2P_LEVEL NCCL_P2P_NET_CHUNKSIZE NCCL_PROTO NCCL_SHM_DISABLE NCCL_SOCKET_FAMILY
NCCL_SOCKET_IFNAME NCCL_SOCKET_NTHREADS NCCL_TOPO_DUMP_FILE NCCL_TOPO_FILE NCCL_TUNER_PLUGIN
GLOO_DEVICE_TRANSPORT GLOO_SOCKET_IFNAME MASTER_ADDR MASTER_PORT
TORCH_CPP_LOG_LEVEL TORCH_CUDA_ARCH_LIST TORCH_DISTRIBUTED_DEBUG TORCH_EXTENSIONS_DIR TORCH_FR_BUFFER_SIZE
TORCH_NCCL_ASYNC_ERROR_HANDLING TORCH_NCCL_BLOCKING_WAIT TORCH_NCCL_DUMP_ON_TIMEOUT TORCH_NCCL_ENABLE_MONITORING
TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC TORCH_NCCL_TRACE_BUFFER_SIZE TORCH_SHOW_CPP_STACKTRACES
CUDA_VISIBLE_DEVICES CUDA_DEVICE_MAX_CONNECTIONS CUDA_LAUNCH_BLOCKING WORLD_SIZE LOCAL_WORLD_SIZE
OMP_NUM_THREADS LD_LIBRARY_PATH LD_PRELOAD PYTHONPATH HF_HOME HF_HUB_CACHE HF_DATASETS_CACHE TRANSFORMERS_CACHE
HF_HUB_OFFLINE HF_DATASETS_OFFLINE TRANSFORMERS_OFFLINE
""".split())
NOT_SHOWN = "(set; value not shown)"
_URL_PASSWORD_RE = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/:@\s]*:)[^@/\s]+(?=@)")
_TOKEN_RE = re.compile(r"[A-Za-z0-9+/_=-]{32,}")


def mask_credentials(value):
    """A value with what looks like a credential masked: a URL's password, a long token-like run."""
    value = _URL_PASSWORD_RE.sub(lambda m: m.group("head") + "***", value)
    return _TOKEN_RE.sub(lambda m: m.group(0) if "/" in m.group(0).strip("/") and "=" not in m.group(0)
                         else "***", value)
RESOLVE_TIMEOUT_S = 3.0
COMMAND_TIMEOUT_S = 20.0


def read(path, default=None):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return default


def run(argv, timeout=COMMAND_TIMEOUT_S):
    """(exit code, stdout, stderr) of a command; exit code None when it could not run."""
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                              universal_newlines=True)
        return proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired:
        return None, "", "timed out after %g s" % timeout
    except OSError as exc:
        return None, "", str(exc)


def with_deadline(func, timeout, *args):
    """func(*args) in a daemon thread; raises TimeoutError if it takes longer (a hung DNS lookup)."""
    box = {}

    def target():
        try:
            box["value"] = func(*args)
        except BaseException as exc:  # reported to the caller below
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError("no answer within %g s" % timeout)
    if "error" in box:
        raise box["error"]
    return box["value"]


def addresses_of(name):
    infos = socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)
    seen = []
    for info in infos:
        if info[4][0] not in seen:
            seen.append(info[4][0])
    return seen


def resolve(name):
    """{"addresses": [...]} or {"error": why}."""
    try:
        return {"addresses": with_deadline(addresses_of, RESOLVE_TIMEOUT_S, name)}
    except socket.gaierror as exc:
        return {"error": exc.strerror or str(exc)}
    except Exception as exc:
        return {"error": str(exc) or type(exc).__name__}


# ---- host -----------------------------------------------------------------------
def collect_host(args):
    hostname = socket.gethostname()
    fqdn_error = None
    try:
        fqdn = with_deadline(socket.getfqdn, RESOLVE_TIMEOUT_S)
    except Exception as exc:
        fqdn, fqdn_error = None, str(exc)
    resolves = {hostname: resolve(hostname)}
    if fqdn and fqdn != hostname:
        resolves[fqdn] = resolve(fqdn)
    os_release = {}
    for line in (read("/etc/os-release") or "").splitlines():
        if "=" in line:
            key, _, value = line.partition("=")
            os_release[key] = value.strip().strip('"')
    try:
        glibc = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError, AttributeError):
        glibc = None
    cpu_model = None
    for line in (read("/proc/cpuinfo") or "").splitlines():
        if line.startswith(("model name", "Model")):
            cpu_model = line.partition(":")[2].strip()
            break
    mem_total = None
    for line in (read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            mem_total = int(line.split()[1]) * 1024
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {"hostname": hostname, "fqdn": fqdn, "fqdn_error": fqdn_error, "resolves": resolves,
            "os": os_release.get("PRETTY_NAME") or platform.platform(), "kernel": platform.release(),
            "glibc": glibc, "arch": platform.machine(), "cpu_model": cpu_model, "cpu_count": os.cpu_count(),
            "cpu_affinity": affinity, "mem_total_bytes": mem_total}


def _number(text):
    match = re.match(r"^\s*(-?\d+(?:\.\d+)?)", text or "")
    return float(match.group(1)) if match else None


SIOCGIFADDR, SIOCGIFNETMASK = 0x8915, 0x891B


def _ipv4_of(ifname):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = struct.pack("256s", ifname[:15].encode())
        addr = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), SIOCGIFADDR, packed)[20:24])
        mask = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), SIOCGIFNETMASK, packed)[20:24])
        prefix = bin(struct.unpack("!I", socket.inet_aton(mask))[0]).count("1")
        return ["%s/%d" % (addr, prefix)]
    except OSError:
        return []
    finally:
        sock.close()


def _ipv6_by_interface(procfs):
    found = {}
    for line in (read(os.path.join(procfs, "net/if_inet6")) or "").splitlines():
        parts = line.split()
        if len(parts) == 6:
            raw = parts[0]
            addr = socket.inet_ntop(socket.AF_INET6, bytes.fromhex(raw))
            found.setdefault(parts[5], []).append("%s/%d" % (addr, int(parts[2], 16)))
    return found


def collect_interfaces(sysfs="/sys", procfs="/proc"):
    base = os.path.join(sysfs, "class/net")
    ipv6 = _ipv6_by_interface(procfs)
    interfaces = {}
    for name in sorted(os.listdir(base)):
        path = os.path.join(base, name)
        speed = _number(read(os.path.join(path, "speed")))
        interfaces[name] = {
            "state": read(os.path.join(path, "operstate")),
            "mtu": int(read(os.path.join(path, "mtu"), "0") or 0) or None,
            "speed_mbps": int(speed) if speed is not None and speed > 0 else None,
            "kind": "loopback" if name == "lo" else ("virtual" if "/virtual/" in os.path.realpath(path)
                                                     else "physical"),
            "ipv4": _ipv4_of(name) if sysfs == "/sys" else [],
            "ipv6": ipv6.get(name, []),
        }
    return interfaces


def ipv4_routes(procfs="/proc"):
    """(destination int, mask int, metric, ifname) from the main table."""
    routes = []
    for line in (read(os.path.join(procfs, "net/route")) or "").splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 8 and int(parts[3], 16) & 1:  # RTF_UP
            # the kernel prints the address's bytes as a native-endian number
            dest = struct.unpack("!I", struct.pack("=I", int(parts[1], 16)))[0]
            mask = struct.unpack("!I", struct.pack("=I", int(parts[7], 16)))[0]
            routes.append((dest, mask, int(parts[6]), parts[0]))
    return routes


def route_interface(address, interfaces, routes):
    """The interface the kernel would send to `address` through (IPv4; own addresses included)."""
    if ":" in address:
        return None
    for name, facts in interfaces.items():
        if any(a.split("/")[0] == address for a in facts.get("ipv4", [])):
            return name
    target = struct.unpack("!I", socket.inet_aton(address))[0]
    best = None
    for dest, mask, metric, ifname in routes:
        if target & mask == dest & mask:
            key = (bin(mask).count("1"), -metric)
            if best is None or key > best[0]:
                best = (key, ifname)
    return best[1] if best else None


def collect_net(args):
    interfaces = collect_interfaces()
    routes = ipv4_routes()
    peers = {}
    for peer in [p for p in (args.get("peers") or "").split(",") if p]:
        resolved = resolve(peer)
        entry = dict(resolved)
        addrs = resolved.get("addresses") or []
        v4 = [a for a in addrs if ":" not in a]
        if v4:
            entry["ifname"] = route_interface(v4[0], interfaces, routes)
        peers[peer] = entry
    thresh = (read("/proc/sys/net/ipv4/neigh/default/gc_thresh3") or "").strip()
    return {"interfaces": interfaces, "peers": peers, "arp_table_max": int(thresh) if thresh.isdigit() else None,
            "neighbour_table": collect_neighbour_table()}


def collect_neighbour_table(procfs="/proc"):
    """The kernel's neighbour (ARP, and IPv6's NDISC) table sizes, net.ipv4/ipv6.neigh.default.gc_thresh1..3:
    {"ipv4": {"gc_thresh1": 128, ...}, "ipv6": {...}}; a family whose files cannot be read (a container's own
    network namespace does not show them: the host's apply) is {"unreadable": reason}."""
    tables = {}
    for family in ("ipv4", "ipv6"):
        values, reason = {}, None
        for key in ("gc_thresh1", "gc_thresh2", "gc_thresh3"):
            path = os.path.join(procfs, "sys/net", family, "neigh/default", key)
            text = (read(path) or "").strip()
            if text.isdigit():
                values[key] = int(text)
            else:
                reason = "%s: %s" % (path, "not a number" if text else "not readable (a container's own network "
                                                                          "namespace hides it)")
                break
        tables[family] = values if reason is None else {"unreadable": reason}
    return tables


def collect_env(args):
    """The allow-listed variables with their values (credentials masked); the others of their families (HF_TOKEN)
    as set, with a short fingerprint of the value salted for this run (--salt): nodes whose secret differs are
    told apart, and neither the secret nor anything that could be checked against it outside the run leaves the
    node."""
    chosen = {}
    for key, value in os.environ.items():
        if key in ENV_NAMES:
            chosen[key] = mask_credentials(value)
        elif key.startswith(ENV_PREFIXES):
            chosen[key] = "%s, #%s)" % (NOT_SHOWN[:-1], hashlib.sha256(((args or {}).get("salt", "") + ":" + value).encode(
                "utf-8", "replace")).hexdigest()[:6])
    return dict(sorted(chosen.items()))


JOB_HOOKS = "/tmp/clustercheck-hang"


def job_key(env):
    """Which job a rank is of, from the variables its launcher gave every rank at its start: MASTER_ADDR,
    MASTER_PORT and the run's id ("" where the process is no rank of a launched job)."""
    if not env.get("MASTER_ADDR") or not env.get("MASTER_PORT"):
        return ""
    run = _run_id(env)
    return "%s:%s%s" % (env["MASTER_ADDR"], env["MASTER_PORT"], " (run %s)" % run if run else "")


def _run_id(env):
    return env.get("TORCHELASTIC_RUN_ID") or env.get("SLURM_JOB_ID") or ""


def job_hook_directory(env):
    """Where the ranks of a job under clustercheck.injob answer `clustercheck stacks` (their hang hook, hang.py):
    named from the variables the launcher gave every rank at its start, which the stacks probe reads back from
    /proc/PID/environ (a variable the rank sets later is not there)."""
    key = "%s-%s-%s" % (env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", ""), _run_id(env))
    return os.path.join(JOB_HOOKS, safe_name(key))


def safe_name(text):
    """The text as one file name: every character but letters, digits, '-', '_' and '.' made '_'."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def sleep_until(moment, most=600.0):
    """Sleep until moment (seconds since the epoch: the same on every node of a run); a moment further off
    than `most` is a clock that disagrees with the tool's, and is not waited for."""
    delay = moment - time.time()
    if 0 < delay < most:
        time.sleep(delay)


def emit_json(build):
    """Print build()'s document as one JSON line on the real stdout, whatever happens.

    Anything libraries print meanwhile (deepspeed does, on import) goes to stderr, so it
    cannot spoil the document.
    """
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    try:
        doc = build()
    except BaseException as exc:  # the probe's promise: a document, never a traceback
        doc = {"fatal": "%s: %s" % (type(exc).__name__, exc)}
    out.write(json.dumps(doc, default=str))
    out.write("\n")
    out.flush()
    sys.stdout.flush()
