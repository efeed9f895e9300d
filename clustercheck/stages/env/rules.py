"""The judges of `clustercheck env`: pure functions from probed facts to Findings.

Each rule looks at every node's facts and returns Findings (an OK one when it
passed, so the report shows what was checked). The rows of docs/failures.md each rule
exists for are named in its docstring. Reach, names and the training interface are
judged once for every stage by the node layer (clustercheck/node/judges.py); GPU health,
RDMA ports and GPU topology have modules of their own (env/judges.py runs them all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from clustercheck.core.compare import group_by_value
from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status
from clustercheck.core.requirements import Wanted, parse_requirement
from clustercheck.core.thresholds import EnvThresholds
from clustercheck.node.facts import NOT_INSTALLED, Probed, get, gib, gpu_count
from clustercheck.node.judges import nodes_finding
from clustercheck.stages.env import baseline, packages
from clustercheck.stages.env.baseline import Baseline

ONE_ENV = "use one environment or container image on every node (same interpreter path, same wheels)"

# (fact, status when it differs, remedy). Rows 6, 7, 10, 22 of docs/failures.md. Python packages, the torch and
# NCCL wheels among them, are compared whole by packages.py.
MUST_MATCH = [
    ("torch CUDA build", Status.FAIL, ONE_ENV + "; a CPU-only torch on a GPU node needs the CUDA wheel"),
    ("NCCL (loaded)", Status.FAIL, ONE_ENV),
    ("libnccl", Status.FAIL, "make every node's torch load the same NCCL: unset an LD_LIBRARY_PATH entry that shadows "
                             "the nvidia-nccl wheel, or install the same libnccl everywhere"),
    ("libcudart", Status.WARN, "make every node load the same CUDA runtime (LD_LIBRARY_PATH, the CUDA toolkit)"),
    ("NVIDIA driver", Status.FAIL, "install the same NVIDIA driver on every node (and the matching fabric manager)"),
    ("GPUs", Status.FAIL, "replace or re-seat the missing GPU, or leave the node out; every node needs the same "
                          "number of ranks"),
    ("GPU model", Status.FAIL, "use nodes of one GPU model in a job, or expect the slowest to set the pace"),
    ("RDMA ports", Status.FAIL, "an HCA is missing or not seen by the driver (ibstat, lspci | grep Mellanox): "
                                "reseat it or leave the node out; every node needs the same rails (ports down "
                                "are judged one by one)"),
    ("torch (imported)", Status.FAIL, ONE_ENV),
    ("deepspeed (imported)", Status.FAIL, ONE_ENV),
    ("CUDA available", Status.FAIL, "check the driver and CUDA_VISIBLE_DEVICES on the odd node"),
    ("CUDA (driver)", Status.WARN, "install the same NVIDIA driver on every node"),
    ("nvcc", Status.WARN, "install the same CUDA toolkit where extensions are compiled (DeepSpeed ops)"),
    ("HCA model", Status.WARN, "use nodes with the same HCAs in one job, or expect the slowest to set the pace"),
    ("HCA firmware", Status.WARN, "update the HCA firmware to one version on every node (mlxfwmanager / mstflint)"),
    ("GPU memory", Status.WARN, "use nodes with the same GPU memory, or size the job for the smallest"),
    ("kernel", Status.WARN, "align kernels (and with them the NVIDIA and InfiniBand drivers)"),
    ("glibc", Status.WARN, "align the OS images"),
]


@dataclass
class EnvContext:
    probed: List[Probed]
    values: Dict[str, Dict[str, str]]   # node -> comparable facts (env/facts.py)
    limits: EnvThresholds
    wanted: List[Wanted] = field(default_factory=list)     # --require and the thresholds file's required
    baseline: Optional[Baseline] = None                    # --baseline

    def __post_init__(self):
        merged = {w.name: w for w in [parse_requirement(t, "thresholds") for t in self.limits.required] + self.wanted}
        self.wanted = list(merged.values())     # the thresholds file's, then the command line's (which wins)
        self.order = [p.name for p in self.probed]
        self.ok = [p for p in self.probed if p.facts is not None]


def _mismatch(ctx: EnvContext, fact: str, status: Status, remedy: str) -> List[Finding]:
    values = {node: v[fact] for node, v in ctx.values.items() if fact in v}
    if not values:
        return []
    grouping = group_by_value(values, ctx.order)
    check = f"same.{fact}"
    if grouping.uniform:
        return [Finding(check, Status.OK, f"{fact}: {grouping.baseline} on all {len(values)} nodes")]
    missing = [nodes for value, nodes in grouping.groups if value == NOT_INSTALLED]
    if missing and grouping.baseline != NOT_INSTALLED:
        summary = f"{fact} is not installed on {fold(missing[0])}"
    elif grouping.clear_majority:
        odd = "; ".join(f"{fold(nodes)} has {value}" for value, nodes in grouping.odd)
        summary = f"{fact} differs: {odd} (the others: {grouping.baseline})"
    else:
        summary = f"{fact} differs across nodes, no majority"
    return [Finding(check, status, summary, grouping.odd_first(), remedy,
                    grouping.odd_nodes if grouping.clear_majority else list(values))]


def must_match(ctx: EnvContext) -> List[Finding]:
    findings = []
    for fact, status, remedy in MUST_MATCH:
        findings += _mismatch(ctx, fact, status, remedy)
    return findings


def python_version(ctx: EnvContext) -> List[Finding]:
    """Python minor versions must match (pickled objects, compiled extensions); patch differences warn."""
    values = {n: v["python"] for n, v in ctx.values.items() if "python" in v}
    if not values:
        return []
    minor = group_by_value({n: ".".join(v.split(".")[:2]) for n, v in values.items()}, ctx.order)
    full = group_by_value(values, ctx.order)
    if full.uniform:
        return [Finding("same.python", Status.OK, f"python: {full.baseline} on all {len(values)} nodes")]
    status = Status.WARN if minor.uniform else Status.FAIL
    what = "patch level" if minor.uniform else "version"
    odd = "; ".join(f"{fold(nodes)} has {value}" for value, nodes in full.odd)
    return [Finding("same.python", status, f"python {what} differs: {odd} (the others: {full.baseline})",
                    full.evidence(), ONE_ENV + "; or name the same interpreter with python= / --python",
                    full.odd_nodes)]


def python_packages(ctx: EnvContext) -> List[Finding]:
    """Rows 6, 7: every distribution of the training interpreter, compared, required and held to a baseline."""
    view = packages.package_view(ctx.probed)
    policy = packages.PackagePolicy([w.name for w in ctx.wanted if not w.constraint], ctx.limits.fail_packages,
                                    ctx.limits.warn_packages)
    findings = packages.unreadable(view) + packages.compare_packages(view, policy) + packages.required(
        view, ctx.wanted, {n: v["python"] for n, v in ctx.values.items() if "python" in v})
    if ctx.baseline is not None and view.dists:
        findings += baseline.against_baseline(ctx.baseline, view, ctx.values, policy)
    return findings


def shm(ctx: EnvContext) -> List[Finding]:
    """Row 8: NCCL's shared-memory transport needs more than Docker's 64 MB /dev/shm."""
    floor = ctx.limits.shm_min_gib * 2 ** 30
    bad = {}
    for p in ctx.ok:
        facts = get(p.facts, "storage", "shm")
        if facts is None:
            continue
        if facts.get("missing"):
            bad[p.name] = "no /dev/shm"
        elif facts.get("total_bytes", 0) < floor:
            bad[p.name] = f"/dev/shm is {gib(facts['total_bytes'])}"
    return nodes_finding("shm", Status.FAIL, bad, "/dev/shm smaller than {floor} on {{nodes}}".format(
        floor=gib(floor)), "run containers with --shm-size=16g or --ipc=host; on hosts, remount /dev/shm larger",
        f"/dev/shm is at least {gib(floor)} everywhere")


def memlock(ctx: EnvContext) -> List[Finding]:
    """Row 9: InfiniBand registers memory; a memlock limit breaks ibv_reg_mr."""
    if not any(get(p.facts, "infiniband") for p in ctx.ok):
        return []
    bad = {}
    for p in ctx.ok:
        if get(p.facts, "infiniband") and get(p.facts, "limits", "memlock", "soft") not in (None, "unlimited"):
            bad[p.name] = f"memlock {get(p.facts, 'limits', 'memlock', 'soft')} bytes with InfiniBand present"
    return nodes_finding("memlock", Status.FAIL, bad, "locked memory is limited on InfiniBand nodes {nodes}",
                          "set memlock unlimited (/etc/security/limits.conf, and LimitMEMLOCK=infinity for "
                          "slurmd / sshd / containers)", "memlock is unlimited wherever InfiniBand is present")


def nofile(ctx: EnvContext) -> List[Finding]:
    bad = {p.name: f"nofile {get(p.facts, 'limits', 'nofile', 'soft')}" for p in ctx.ok
           if isinstance(get(p.facts, "limits", "nofile", "soft"), int)
           and get(p.facts, "limits", "nofile", "soft") < ctx.limits.nofile_min}
    return nodes_finding("nofile", Status.WARN, bad, f"open-file limit below {ctx.limits.nofile_min} on {{nodes}}",
                          "raise nofile (ulimit -n) for the launch path; data loaders and NCCL open many",
                          f"open-file limit at least {ctx.limits.nofile_min} everywhere")


def clock(ctx: EnvContext) -> List[Finding]:
    """Row 24: clocks compared with the median node, minus what the round trip leaves unknown."""
    offsets = {p.name: (p.clock_offset_s, p.clock_uncertainty_s or 0.0) for p in ctx.ok
               if p.clock_offset_s is not None}
    if len(offsets) < 2:
        return []
    ordered = sorted(o for o, _ in offsets.values())
    median = ordered[len(ordered) // 2]
    warn, fail = {}, {}
    for node, (offset, uncertainty) in offsets.items():
        skew = max(0.0, abs(offset - median) - uncertainty)
        text = f"{offset - median:+.2f} s from the median node (±{uncertainty:.2f} s)"
        if skew > ctx.limits.clock_fail_s:
            fail[node] = text
        elif skew > ctx.limits.clock_warn_s:
            warn[node] = text
    findings = []
    remedy = "run chrony or ntpd on every node against the same servers (chronyc tracking shows the offset)"
    if fail:
        findings += nodes_finding("clock", Status.FAIL, fail, f"clock off by over {ctx.limits.clock_fail_s:g} s "
                                                              "on {nodes}", remedy, "")
    if warn:
        findings += nodes_finding("clock.warn" if fail else "clock", Status.WARN, warn,
                                   f"clock off by over {ctx.limits.clock_warn_s:g} s on {{nodes}}", remedy, "")
    if not findings:
        findings.append(Finding("clock", Status.OK, f"clocks agree within {ctx.limits.clock_warn_s:g} s"))
    return findings


def slots(ctx: EnvContext) -> List[Finding]:
    """Row 22: slots (ranks per node) must equal the GPUs on a GPU node."""
    bad = {}
    for p in ctx.ok:
        count = gpu_count(p.facts)
        if p.node.slots is not None and count and p.node.slots != count:
            bad[p.name] = f"slots={p.node.slots} but {count} GPUs"
    if not any(p.node.slots is not None and gpu_count(p.facts) for p in ctx.ok):
        return []
    return nodes_finding("slots", Status.FAIL, bad, "slots in the nodes file do not match the GPU count on {nodes}",
                          "set slots= (nproc_per_node) to the number of GPUs", "slots match the GPU count")


def workdir(ctx: EnvContext) -> List[Finding]:
    """Row 7: the working directory must exist (DeepSpeed's pdsh runner reuses the local path); free disk."""
    missing, low = {}, {}
    for p in ctx.ok:
        facts = get(p.facts, "storage", "workdir")
        if facts is None:
            continue
        if facts.get("missing"):
            missing[p.name] = f"{facts.get('path')} does not exist"
        elif facts.get("free_bytes", 0) < ctx.limits.disk_min_gib * 2 ** 30:
            low[p.name] = f"{gib(facts['free_bytes'])} free in {facts.get('path')}"
    findings = nodes_finding("workdir", Status.FAIL, missing, "working directory missing on {nodes}",
                              "create it, or use a shared file system: launchers start ranks in the same path",
                              "working directory exists on every node")
    findings += nodes_finding("disk", Status.WARN, low, f"less than {ctx.limits.disk_min_gib:g} GiB free on {{nodes}}",
                               "free space for checkpoints and compiled extensions (~/.cache/torch_extensions)",
                               f"at least {ctx.limits.disk_min_gib:g} GiB free in the working directory")
    return findings


def env_vars(ctx: EnvContext) -> List[Finding]:
    """NCCL_* / GLOO_* / TORCH_* settings that differ between nodes change behaviour per rank."""
    keys = sorted({k for v in ctx.values.values() for k in v if k.startswith("$")})
    findings = []
    for key in keys:
        values = {n: v.get(key, "(unset)") for n, v in ctx.values.items()}
        grouping = group_by_value(values, ctx.order)
        if not grouping.uniform:
            findings.append(Finding(f"same.{key}", Status.WARN, grouping.differs(key[1:]), grouping.odd_first(),
                                    "set it identically on every node (or in the launcher)", grouping.at_fault))
    return findings


def pdsh(ctx: EnvContext) -> List[Finding]:
    """Row 18: DeepSpeed's multi-node launcher needs pdsh on the launch node (the first)."""
    if len(ctx.probed) < 2 or not ctx.ok or ctx.ok[0].name != ctx.probed[0].name:
        return []
    first = ctx.ok[0]
    if get(first.facts, "packages", "versions", "deepspeed") and get(first.facts, "tools") is not None \
            and not get(first.facts, "tools", "pdsh"):
        return [Finding("pdsh", Status.WARN, f"pdsh is not on PATH on {first.name}, where `deepspeed` would launch",
                        [f"{first.name}: PATH={get(first.facts, 'tools', 'path')}"],
                        "install pdsh (apt install pdsh), or launch with torchrun / --launcher openmpi", [first.name])]
    return []


def deep_imports(ctx: EnvContext) -> List[Finding]:
    """--deep: what torch really loads. CUDA must be usable where GPUs are."""
    bad = {}
    for p in ctx.ok:
        deep = get(p.facts, "deep")
        if deep is None:
            continue
        if deep.get("torch_error"):
            bad[p.name] = f"import torch: {deep['torch_error']}"
        elif gpu_count(p.facts) and not deep.get("cuda_available"):
            bad[p.name] = f"{gpu_count(p.facts)} GPUs but torch.cuda.is_available() is False"
        elif deep.get("deepspeed_error") and get(p.facts, "packages", "versions", "deepspeed"):
            bad[p.name] = f"import deepspeed: {deep['deepspeed_error']}"
    if not any(get(p.facts, "deep") is not None for p in ctx.ok):
        return []
    return nodes_finding("deep.imports", Status.FAIL, bad, "torch or deepspeed does not load on {nodes}",
                          "reinstall the broken package into that interpreter; check LD_LIBRARY_PATH and the driver",
                          "torch (and deepspeed where installed) import, CUDA usable where GPUs are")


STALE_LOCK_S = 600   # a build lock this old with no compiler running: no build holds it


def build_locks(ctx: EnvContext) -> List[Finding]:
    """Row 37: a C++ extension build killed half way leaves torch's build lock; every later DeepSpeed start
    that builds the op (on every node sharing the directory) waits on it for ever."""
    probed = [p for p in ctx.ok if get(p.facts, "builds") is not None]
    if not probed:
        return []
    building = {lock["path"] for p in probed if get(p.facts, "builds", "compiling")
                for lock in get(p.facts, "builds", "locks")}
    stale: Dict[str, List[str]] = {}
    young: Dict[str, List[str]] = {}
    for p in probed:
        for lock in get(p.facts, "builds", "locks"):
            if lock["path"] in building:
                continue   # a compiler runs on a node that sees this lock: a build holds it
            age = lock.get("age_s", 0)
            where = stale if age >= STALE_LOCK_S else young
            where.setdefault(f"{lock['path']}, {age / 60:.0f} min old, no compiler running", []).append(p.name)
    findings = [Finding("builds.lock", Status.FAIL, f"a stale C++ extension build lock on {fold(nodes)}",
                        [f"{fold(nodes)}: {what}"], f"delete it (rm {what.split(',')[0]}): a build stopped half way "
                        "left it, and every DeepSpeed start that builds this op waits on it for ever", nodes)
                for what, nodes in stale.items()]
    findings += [Finding("builds.lock", Status.WARN, f"a C++ extension build lock with no build running on "
                                                      f"{fold(nodes)}", [f"{fold(nodes)}: {what}"],
                         "if no machine sharing that directory is compiling, delete it: a build stopped half way "
                         "left it", nodes) for what, nodes in young.items()]
    return findings or [Finding("builds.lock", Status.OK, "no C++ extension build lock left behind "
                                                          "(TORCH_EXTENSIONS_DIR)")]


JUDGES: Sequence[Callable[[EnvContext], List[Finding]]] = [
    python_version, must_match, python_packages, shm, memlock, nofile, clock, slots, workdir, build_locks, pdsh,
    deep_imports, env_vars,
]
