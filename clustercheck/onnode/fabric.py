"""RDMA ports from sysfs: InfiniBand and RoCE (an HCA port whose link layer is Ethernet).

Standard library only, Python 3.6+; shipped with env_probe.py. One entry per port: state,
physical state, rate, link layer, the HCA's model and firmware, and the error counters
the port keeps (what a down or flapping link leaves behind) with the traffic they are judged against.
"""

import os

try:  # imported as part of the clustercheck package (the tests)
    from .nodelib import read
except ImportError:  # shipped to a node
    from nodelib import read

# ports/N/counters/*: the IB PortCounters a flapping or dirty link raises (IBTA spec, 16.1.3.5)
ERROR_COUNTERS = ("link_downed", "link_error_recovery", "symbol_error", "port_rcv_errors",
                  "port_rcv_remote_physical_errors", "port_xmit_discards", "local_link_integrity_errors",
                  "excessive_buffer_overrun_errors")
# the traffic since the same reset: packets, and data in 4-byte words (64-bit on current kernels and HCAs)
TRAFFIC_COUNTERS = ("port_rcv_packets", "port_xmit_packets", "port_rcv_data", "port_xmit_data")


def _state(text):
    """'4: ACTIVE' -> 'ACTIVE'; '5: LinkUp' -> 'LinkUp'."""
    return (text or "").split(":")[-1].strip() or None


def _counters(port_dir):
    counters = {}
    for name in ERROR_COUNTERS + TRAFFIC_COUNTERS:
        value = read(os.path.join(port_dir, "counters", name))
        if value is not None and value.strip().isdigit():
            counters[name] = int(value)
    return counters


def _netdev(port_dir):
    """The Ethernet device behind a RoCE port (gid_attrs/ndevs/0), when the kernel says."""
    return read(os.path.join(port_dir, "gid_attrs", "ndevs", "0")) or None


def collect_infiniband(sysfs="/sys"):
    base = os.path.join(sysfs, "class/infiniband")
    if not os.path.isdir(base):
        return []
    ports = []
    for device in sorted(os.listdir(base)):
        dev_dir = os.path.join(base, device)
        ports_dir = os.path.join(dev_dir, "ports")
        for port in sorted(os.listdir(ports_dir)) if os.path.isdir(ports_dir) else []:
            port_dir = os.path.join(ports_dir, port)
            entry = {"device": device, "port": int(port) if port.isdigit() else port,
                     "state": _state(read(os.path.join(port_dir, "state"))),
                     "phys_state": _state(read(os.path.join(port_dir, "phys_state"))),
                     "rate": read(os.path.join(port_dir, "rate")),
                     "link_layer": read(os.path.join(port_dir, "link_layer")),
                     "hca_type": read(os.path.join(dev_dir, "hca_type")),
                     "board_id": read(os.path.join(dev_dir, "board_id")),
                     "fw_ver": read(os.path.join(dev_dir, "fw_ver")),
                     "counters": _counters(port_dir)}
            if entry["link_layer"] == "Ethernet":
                entry["netdev"] = _netdev(port_dir)
            ports.append(entry)
    return ports
