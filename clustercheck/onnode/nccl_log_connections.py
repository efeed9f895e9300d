"""NCCL's connection lines (`Channel 00/0 : 0[0] -> 1[1] via NET/IB/0/GDRDMA`, one per channel and peer: net.cc,
p2p.cc, shm.cc, 2.4 to 2.30): the kind of transport a tail names, and the ranks a connection joins. Standard library
only (Python 3.6+): shipped to the nodes beside nccl_log_reader.py, which counts them per rank.
"""

import re

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


def add_peer(rank, kind, line, start, via):
    """The ranks a connection joins, one line of each kind kept per pair (the judges ask whether the two are on the
    same host: clustercheck/nccl/impossible_facts.py)."""
    peers = rank["peers"]
    if len(peers) >= MAX_PEERS:
        return
    colon = line.rfind(" : ", start, via)
    pair = pair_of(line[colon + 3:via] if colon >= 0 else line[start:via])
    if pair and pair not in peers:
        peers[pair] = [kind[0], kind[1], line[start:][:300].strip()]
