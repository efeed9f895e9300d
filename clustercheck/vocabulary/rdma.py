"""The RDMA layer's error space, "rdma": rdma-core's work-completion statuses (libibverbs' enum ibv_wc_status and
ibv_wc_status_str), its asynchronous events (ibv_event_type_str), the verbs calls that fail with an errno (a memory
registration refused for the locked-memory limit above all), RDMA-CM's events (librdmacm rdma_event_str) and UCX's
ucs_status_t (ucs_status_string), each matched in the forms the layers above print them: NCCL's NET/IB WARN lines,
Open MPI's openib BTL, UCX's own log lines and the callers of UCX (Open MPI's pml_ucx, ucx-py).

Sources, at the commits read: linux-rdma/rdma-core 691953d8d502f54088f776c5ba2aeed0a5ac945d (libibverbs/verbs.h,
enum_strs.c, init.c; librdmacm/rdma_cma.h, cma.c), NVIDIA/nccl 5067397c2676d5aed50042fc39e5c8ee96eb0027 and its
history (src/transport/net_ib.cc of 2.4 to 2.26, src/transport/net_ib/{p2p,common,connect,init}.cc of 2.27+,
src/misc/ibvwrap.cc), openucx/ucx 9466d104a317c8ffddd9734e72055d8bbda021b3 (src/ucs/type/status.[ch],
src/uct/ib/base/ib_log.[ch], ib_md.c, ib_iface.c, src/uct/ib/mlx5/ib_mlx5_log.c), Open MPI's
ompi/mca/btl/openib/btl_openib_component.c (btl_openib_component_status_to_string, "error polling %s with status
%s status number %d").

Not rows, on purpose: what healthy runs print. NCCL's "NET/IB : No device found." and "Failed to open
libibverbs.so[.1]" (INFO in recent NCCL, WARN in 2.4 to 2.7) are NCCL falling back to sockets, "NET/IB : Using
[0]mlx5_0:1/IB" is its choice; libibverbs' "Warning: couldn't load driver" / "couldn't open config directory" is a
container without every provider; IBV_WC_SUCCESS is no failure and IBV_WC_TM_RNDV_INCOMPLETE asks the consumer to
finish a tag-matching rendezvous in software.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

from clustercheck.vocabulary.spaces import Row

RDMA_CORE = "linux-rdma/rdma-core "
NCCL = "NVIDIA/nccl "
UCX = "openucx/ucx "

# Words that say a line is about verbs: a generic status text ("fatal error", "general error") or a bare number
# ("status 12") is a completion's only on a line that says so.
_VERBS = (r"(?:\bibv_|\bIBV_|\b[Ww][Cc]\b|\bwc\.|\b[Cc][Qq][Ee]?\b|\b[Qq][Pp]\b|\bRDMA\b|\brdma|InfiniBand|"
          r"\bverbs\b|NET/IB|\bmlx\d|\bhca\b|wr_id)[^\n]*")

# libibverbs/verbs.h enum ibv_wc_status, libibverbs/enum_strs.c ibv_wc_status_str:
# number -> (enum name, ibv_wc_status_str's text, whether the text alone is the verbs' own words, kind)
WC_STATUS: Dict[int, Tuple[str, str, bool, Optional[str]]] = {
    0: ("IBV_WC_SUCCESS", "success", False, None),
    1: ("IBV_WC_LOC_LEN_ERR", "local length error", False, "ib"),
    2: ("IBV_WC_LOC_QP_OP_ERR", "local QP operation error", True, "ib"),
    3: ("IBV_WC_LOC_EEC_OP_ERR", "local EE context operation error", True, "ib"),
    4: ("IBV_WC_LOC_PROT_ERR", "local protection error", False, "ib"),
    5: ("IBV_WC_WR_FLUSH_ERR", "Work Request Flushed Error", True, "ib"),
    6: ("IBV_WC_MW_BIND_ERR", "memory management operation error", True, "ib"),
    7: ("IBV_WC_BAD_RESP_ERR", "bad response error", False, "ib"),
    8: ("IBV_WC_LOC_ACCESS_ERR", "local access error", False, "ib"),
    9: ("IBV_WC_REM_INV_REQ_ERR", "remote invalid request error", True, "ib"),
    10: ("IBV_WC_REM_ACCESS_ERR", "remote access error", False, "ib"),
    11: ("IBV_WC_REM_OP_ERR", "remote operation error", False, "ib"),
    12: ("IBV_WC_RETRY_EXC_ERR", "transport retry counter exceeded", True, "ib"),
    13: ("IBV_WC_RNR_RETRY_EXC_ERR", "RNR retry counter exceeded", True, "ib"),
    14: ("IBV_WC_LOC_RDD_VIOL_ERR", "local RDD violation error", True, "ib"),
    15: ("IBV_WC_REM_INV_RD_REQ_ERR", "remote invalid RD request", True, "ib"),
    16: ("IBV_WC_REM_ABORT_ERR", "aborted error", False, "ib"),
    17: ("IBV_WC_INV_EECN_ERR", "invalid EE context number", True, "ib"),
    18: ("IBV_WC_INV_EEC_STATE_ERR", "invalid EE context state", True, "ib"),
    19: ("IBV_WC_FATAL_ERR", "fatal error", False, "ib"),
    20: ("IBV_WC_RESP_TIMEOUT_ERR", "response timeout error", False, "ib"),
    21: ("IBV_WC_GENERAL_ERR", "general error", False, "ib"),
    22: ("IBV_WC_TM_ERR", "TM error", False, "ib"),
    23: ("IBV_WC_TM_RNDV_INCOMPLETE", "TM software rendezvous", False, None),
}
# Open MPI's openib BTL names the same statuses in its own words (btl_openib_component_status_to_string)
OMPI_WC_TEXT: Dict[int, str] = {
    1: "LOCAL LENGTH ERROR", 2: "LOCAL QP OPERATION ERROR", 3: "LOCAL EEC OPERATION ERROR",
    4: "LOCAL PROTOCOL ERROR", 5: "WORK REQUEST FLUSHED ERROR", 6: "MEMORY WINDOW BIND ERROR",
    7: "BAD RESPONSE ERROR", 8: "LOCAL ACCESS ERROR", 9: "INVALID REQUEST ERROR", 10: "REMOTE ACCESS ERROR",
    11: "REMOTE OPERATION ERROR", 12: "RETRY EXCEEDED ERROR", 13: "RECEIVER NOT READY RETRY EXCEEDED ERROR",
    14: "LOCAL RDD VIOLATION ERROR", 15: "INVALID READ REQUEST ERROR", 16: "REMOTE ABORT ERROR",
    17: "INVALID EECN ERROR", 18: "INVALID EEC STATE ERROR", 19: "FATAL ERROR", 20: "RESPONSE TIMEOUT ERROR",
    21: "GENERAL ERROR",
}


def _wc_row(number: int, name: str, text: str, distinct: bool, kind: str) -> Row:
    forms = [
        rf"\b{name}\b",
        # the verbs' own words in any case; a generic one ("fatal error") only as written, on a verbs line
        rf"(?i:{re.escape(text)})" if distinct else _VERBS + re.escape(text),
        # NCCL 2.4-2.18 "NET/IB : Got completion with error %d, opcode %d, len %d, vendor err %d", 2.19-2.20
        # "... from peer %s with error %d, opcode ...", 2.21-2.28 "... with status=%d opcode=%d len=%d vendor err
        # %d (%s)", 2.29 "NET/IB: Got completion from peer %s with status=%s(%d) opcode=%s(%d) vendor_err=%u"
        rf"Got completion (?:from peer \S+ )?with (?:error |status=)(?:[A-Z_]+\()?{number}\b",
        # Open MPI's openib BTL: "error polling LP CQ with status RETRY EXCEEDED ERROR status number 12 for wr_id"
        rf"\bstatus number {number}\b",
        # a verbs program's own words: "wc status 12", "wc.status=12", "Failed status %s (%d) for wr_id"
        rf"(?i:\bwc[ ._]?status|work completion status|completion status)\s*[=:]?\s*{number}\b",
        _VERBS + rf"\bstatus[ =:]+{number}\b",
        # rdma-core's examples (libibverbs/examples/rc_pingpong.c): "Failed status %s (%d) for wr_id %d"
        rf"Failed status {re.escape(text)} \({number}\)",
    ]
    if number in OMPI_WC_TEXT:
        forms.append(rf"error polling [HL]P CQ with status {re.escape(OMPI_WC_TEXT[number])}")
    return Row("rdma", "|".join(forms), kind, name,
               RDMA_CORE + f"libibverbs/verbs.h enum ibv_wc_status {name} ({number}), enum_strs.c ibv_wc_status_str: "
                           f"\"{text}\"; NCCL net_ib \"Got completion from peer %s with status=%d\", Open MPI openib "
                           f"\"error polling %s with status %s status number %d\"")


ROWS: List[Row] = [_wc_row(n, name, text, distinct, kind) for n, (name, text, distinct, kind) in WC_STATUS.items()
                   if kind]

# libibverbs/verbs.h enum ibv_event_type, enum_strs.c ibv_event_type_str: the asynchronous events that are errors
# (not "port active", "LID change", "SM change", "client reregistration": the fabric's housekeeping). NCCL prints them
# as "NET/IB : %s:%d Got async event : %s" (2.4+) and "NET/IB : %s:%d async fatal event: %s" (2.22+).
ASYNC_ERRORS: Dict[str, str] = {
    "IBV_EVENT_CQ_ERR": "CQ error",
    "IBV_EVENT_QP_FATAL": "local work queue catastrophic error",
    "IBV_EVENT_QP_REQ_ERR": "invalid request local work queue error",
    "IBV_EVENT_QP_ACCESS_ERR": "local access violation work queue error",
    "IBV_EVENT_PATH_MIG_ERR": "path migration request error",
    "IBV_EVENT_DEVICE_FATAL": "local catastrophic error",
    "IBV_EVENT_PORT_ERR": "port error",
    "IBV_EVENT_SRQ_ERR": "SRQ catastrophic error",
    "IBV_EVENT_WQ_FATAL": "WQ fatal",
}
ROWS += [Row("rdma", rf"\b{name}\b|(?i:async)[^\n]*event[^\n]*{re.escape(text)}", "ib", name,
             RDMA_CORE + f"libibverbs/verbs.h enum ibv_event_type {name}, enum_strs.c ibv_event_type_str: \"{text}\"; "
                         f"NCCL net_ib \"NET/IB : %s:%d Got async event : %s\", \"async fatal event: %s\"")
         for name, text in ASYNC_ERRORS.items()]

# librdmacm/rdma_cma.h enum rdma_cm_event_type, cma.c rdma_event_str (the name itself): the events that are failures
CM_EVENTS: Dict[str, str] = {
    "RDMA_CM_EVENT_ADDR_ERROR": "network",       # the peer's IP (IPoIB / RoCE) address did not resolve to a GID
    "RDMA_CM_EVENT_ROUTE_ERROR": "ib",           # no path record from the subnet manager, or no RoCE route
    "RDMA_CM_EVENT_CONNECT_ERROR": "ib",
    "RDMA_CM_EVENT_UNREACHABLE": "ib",           # the remote CM did not answer the connection request
    "RDMA_CM_EVENT_REJECTED": "network",         # the peer refused (nobody listening there: ECONNREFUSED's kin)
    "RDMA_CM_EVENT_DEVICE_REMOVAL": "ib",
    "RDMA_CM_EVENT_MULTICAST_ERROR": "ib",
    "RDMA_CM_EVENT_ADDRINFO_ERROR": "hostname",  # rdma_getaddrinfo could not resolve the name
}
ROWS += [Row("rdma", rf"\b{name}\b", kind, name,
             RDMA_CORE + f"librdmacm/rdma_cma.h enum rdma_cm_event_type, cma.c rdma_event_str: \"{name}\"")
         for name, kind in CM_EVENTS.items()]

# ---- the verbs calls ---------------------------------------------------------------------------------------------
# Registering memory pins it against RLIMIT_MEMLOCK: ibv_reg_mr (and the CQ and QP buffers the kernel pins for
# ibv_create_cq / ibv_create_qp) fail with ENOMEM when the limit is low. NCCL: src/misc/ibvwrap.cc
# IBV_PTR_CHECK_ERRNO "Call to " name " failed with error %s" for "ibv_reg_mr", "ibv_reg_mr_iova2",
# "ibv_reg_dmabuf_mr", "ibv_create_cq", "ibv_create_qp" (2.4-2.8: "Call to %s failed", no errno); UCX:
# ib_md.c uct_ib_md_print_mem_reg_err_msg "%s(address=%p, length=%zu, access=0x%lx) failed: %s" and ib_iface.c
# "ibv_create_cq(cqe=%d)" / "iface %p failed to create %s QP ..." + " failed: %s", with ib_log.c's hint
# " : Please set max locked memory (ulimit -l) to 'unlimited' (current: %llu kbytes)"; libibverbs init.c
# check_memlock_limit: "libibverbs: Warning: RLIMIT_MEMLOCK is %llu bytes.\n    This will severely limit memory
# registrations." (a warning that is the cause: every registration after it fails)
# (Not ibv_reg_dmabuf_mr: NCCL tries it under NOWARN, prints its failure at INFO and falls back to ibv_reg_mr.)
# aws-ofi-nccl registers through libfabric: src/nccl_ofi_net.c (nccl_ofi_rdma.cpp, nccl_ofi_sendrecv.cpp)
# register_mr_buffers' NCCL_OFI_WARN "Unable to register memory (type = %d) for device %d. RC: %d, Error: %s" of
# fi_mr_regattr, RC 12 / fi_strerror "Cannot allocate memory" where the provider could not pin it.
_REGISTERS = (r"(?:\bibv_reg_mr\w*|\bibv_create_cq\w*|\bibv_create_qp\w*|failed to create \w+ QP|"
              r"Unable to register memory \(type = \d+\)|\bfi_mr_reg\w*)")
ROWS += [
    Row("rdma", _REGISTERS + r"[^\n]*(?:Cannot allocate memory|\bENOMEM\b|errno:? 12\b)", "memlock",
        "ibv_reg_mr ENOMEM",
        NCCL + "src/misc/ibvwrap.cc: \"Call to ibv_reg_mr failed with error %s\" (ibv_reg_mr_iova2, "
               "ibv_reg_dmabuf_mr, ibv_create_cq, ibv_create_qp); " + UCX + "src/uct/ib/base/ib_md.c: "
               "\"ibv_reg_mr(address=%p, length=%zu, access=0x%lx) failed: %s\", ib_iface.c \"ibv_create_cq(cqe=%d) "
               "failed: %s\"; aws-ofi-nccl src/nccl_ofi_net.c register_mr_buffers: \"Unable to register memory (type "
               "= %d) for device %d. RC: %d, Error: %s\"; strerror(ENOMEM) \"Cannot allocate memory\""),
    Row("rdma", r"Please set max locked memory \(ulimit -l\)|\bmax locked memory \(ulimit -l\)|"
                r"\bRLIMIT_MEMLOCK is \d+ bytes|This will severely limit memory registrations|"
                r"getrlimit\(RLIMIT_MEMLOCK\) failed", "memlock", "RLIMIT_MEMLOCK",
        UCX + "src/uct/ib/base/ib_log.c uct_ib_memlock_limit_msg: \" : Please set max locked memory (ulimit -l) to "
              "'unlimited' (current: %llu kbytes)\"; " + RDMA_CORE + "libibverbs/init.c check_memlock_limit: "
              "\"libibverbs: Warning: RLIMIT_MEMLOCK is %llu bytes.\\n    This will severely limit memory "
              "registrations.\"", warns=True),
    # EFAULT from ibv_reg_mr on a GPU buffer: GPUDirect RDMA cannot pin it (nvidia-peermem not loaded, or
    # NCCL_NET_GDR_LEVEL / dmabuf not available); EINVAL on huge pages (UCX: RDMAV_HUGEPAGES_SAFE=1)
    Row("rdma", r"\b(?:Call to )?ibv_reg_mr\w*[^\n]*(?:Bad address|\bEFAULT\b)", "ib", "ibv_reg_mr EFAULT",
        NCCL + "src/misc/ibvwrap.cc: \"Call to ibv_reg_mr failed with error Bad address\" (strerror(EFAULT): the "
               "GPU memory could not be pinned for GPUDirect RDMA)"),
    # (ibv_modify_qp only where NCCL gave up: 2.26+ prints each retry at INFO, "Call to ibv_modify_qp failed with
    # %d %s, %s, retrying %d/%d after %u msec of sleep", and its last failure at WARN; ibv_reg_dmabuf_mr: above)
    Row("rdma", r"\b(?:Call to )?ibv_(?:reg_mr\w*|create_qp\w*|create_cq\w*|alloc_pd|"
                r"open_device|query_port|query_gid|query_device\w*|query_qp|create_ah|create_srq|post_send|"
                r"post_recv|post_srq_recv|get_device_list|create_comp_channel|req_notify_cq|poll_cq|"
                r"get_async_event|dereg_mr)(?:\([^)\n]*\))? failed|"
                r"\bWARN\b[^\n]*\bibv_modify_qp failed|(?:^|[^o]\s)ibv_modify_qp\w*(?:\([^)\n]*\))? failed", "ib",
        "verbs call failed",
        NCCL + "src/misc/ibvwrap.cc: \"Call to %s failed with error %s\", \"Call to %s failed with error %s errno "
               "%d\", \"Call to ibv_modify_qp failed with %d %s, on dev %s:%d, curr state %s, next state %s, local "
               "GID index %d, local GID %s, remote GID %s\" (2.26+; a wrong NCCL_IB_GID_INDEX, NICs not "
               "cross-rail connected)"),
    # NCCL's own NET/IB words: devices it cannot open or query, NICs of two link types, the GID table changed
    Row("rdma", r"NET/IB ?: (?:Unable to open device|Unable to query device|Unable to query port|"
                r"Attempted to (?:connect|merge) incompatible devices|Remote \S+ device is incompatible with the "
                r"local|Can't (?:connect|merge) net devices with different link_layer|"
                r"\S+:\d+ GID table changed)", "ib", "NET/IB device",
        NCCL + "src/transport/net_ib/init.cc \"NET/IB : Unable to open device %s\", \"NET/IB : Unable to query "
               "port_num %d\"; connect.cc \"NET/IB : Attempted to connect incompatible devices: ... Try selecting "
               "NICs of only one link type using NCCL_IB_HCA\"; common.cc \"NET/IB : %s:%d GID table changed\""),
    # UCX's mlx5 completion errors in its own words (ib_mlx5_log.c uct_ib_mlx5_completion_with_err:
    # "%s on %s:%d/%s (synd 0x%x vend 0x%x hw_synd %d/%d)")
    Row("rdma", r"(?:Local length error|Local QP operation error|Local protection error|Memory window bind error|"
                r"Bad response|Local access error|Invalid request|Remote access error|Remote operation error|"
                r"Transport retry count exceeded|Receive-no-ready retry count exceeded|Remote side aborted|Generic) "
                r"on \S+:\d+/(?:IB|RoCE) \(synd 0x", "ib", "UCX mlx5 completion error",
        UCX + "src/uct/ib/mlx5/ib_mlx5_log.c uct_ib_mlx5_completion_with_err: \"%s on %s:%d/%s (synd 0x%x vend "
              "0x%x hw_synd %d/%d)\" (\"Transport retry count exceeded\", \"Remote access error\", ...)"),
]

# ---- UCX: ucs_status_t (src/ucs/type/status.h) with ucs_status_string's text (src/ucs/type/status.c) -------------
# name -> (number, text, kind); None: UCX's own bookkeeping or an echo, no cause of its own
UCS_STATUS: Dict[str, Tuple[int, str, Optional[str]]] = {
    "UCS_OK": (0, "Success", None),
    "UCS_INPROGRESS": (1, "Operation in progress", None),
    "UCS_ERR_NO_MESSAGE": (-1, "No pending message", None),
    "UCS_ERR_NO_RESOURCE": (-2, "No resources are available to initiate the operation", None),
    "UCS_ERR_IO_ERROR": (-3, "Input/output error", "ib"),          # a completion with error (ib_mlx5_log.c)
    "UCS_ERR_NO_MEMORY": (-4, "Out of memory", "host-oom"),
    "UCS_ERR_INVALID_PARAM": (-5, "Invalid parameter", None),
    "UCS_ERR_UNREACHABLE": (-6, "Destination is unreachable", "network"),   # no transport reaches the peer
    "UCS_ERR_INVALID_ADDR": (-7, "Address not valid", None),
    "UCS_ERR_NOT_IMPLEMENTED": (-8, "Function not implemented", None),
    "UCS_ERR_MESSAGE_TRUNCATED": (-9, "Message truncated", "code"),   # a receive posted smaller than the message
    "UCS_ERR_NO_PROGRESS": (-10, "No progress", None),
    "UCS_ERR_BUFFER_TOO_SMALL": (-11, "Provided buffer is too small", None),
    "UCS_ERR_NO_ELEM": (-12, "No such element", None),
    "UCS_ERR_SOME_CONNECTS_FAILED": (-13, "Failed to connect some of the requested endpoints", "network"),
    "UCS_ERR_NO_DEVICE": (-14, "No such device", "ib"),             # UCX_NET_DEVICES names a device not there
    "UCS_ERR_BUSY": (-15, "Device is busy", None),
    "UCS_ERR_CANCELED": (-16, "Request canceled", None),            # flushed after another error: its echo
    "UCS_ERR_SHMEM_SEGMENT": (-17, "Shared memory error", "shm"),
    "UCS_ERR_ALREADY_EXISTS": (-18, "Element already exists", None),
    "UCS_ERR_OUT_OF_RANGE": (-19, "Index out of range", None),
    "UCS_ERR_TIMED_OUT": (-20, "Operation timed out", "network"),
    "UCS_ERR_EXCEEDS_LIMIT": (-21, "User-defined limit was reached", None),
    "UCS_ERR_UNSUPPORTED": (-22, "Unsupported operation", None),
    "UCS_ERR_REJECTED": (-23, "Operation rejected by remote peer", "network"),
    "UCS_ERR_NOT_CONNECTED": (-24, "Endpoint is not connected", "peer-lost"),
    "UCS_ERR_CONNECTION_RESET": (-25, "Connection reset by remote peer", "peer-lost"),
    # the transport gave up on the peer: IB's retry counter (ib_mlx5_log.c maps TRANSPORT_RETRY_EXC_ERR here)
    "UCS_ERR_ENDPOINT_TIMEOUT": (-80, "Endpoint timeout", "ib"),
}
# UCX's log line (src/ucs/debug/log.c UCS_LOG_FMT: "[%lu.%06lu] [%s:%d:%s] %16s:%-4u %-4s %-5s %*s", the component
# "UCX" and the level), Open MPI's pml_ucx / osc_ucx ("ucp_ep_create(proc=%d) failed: %s"), ucx-py's UCXError
_UCX_SAID = (r"(?:\bUCX\s+(?:ERROR|FATAL)\b|\bucp_\w+\([^\n]*\) failed: |\b(?:pml|osc|spml)_ucx\b|"
             r"\bUCX\w*(?:Error|Exception)\b)[^\n]*")
ROWS += [Row("rdma", rf"\b{name}\b|{_UCX_SAID}{re.escape(text)}", kind, name,
             UCX + f"src/ucs/type/status.h {name} ({number}), status.c ucs_status_string: \"{text}\", as UCX's log "
                   f"(\"UCX  ERROR ... failed: {text}\") and its callers print it")
         for name, (number, text, kind) in UCS_STATUS.items() if kind]
