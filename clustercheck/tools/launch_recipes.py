"""How to launch on a verified cluster: the commands and environment, from what env and net found.

The guides users follow hand-write `torchrun --nnodes --node_rank --master_addr --master_port`
per node, a DeepSpeed hostfile, or LLaMA-Factory's NNODES / NODE_RANK / MASTER_ADDR
environment, then add NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME by trial and error. The checks
already know every answer:

- MASTER_ADDR: the address of the first node that every node connected to on MASTER_PORT
  (net's attempts record the address each name resolved to), else its name;
- the ports net found open on it: MASTER_PORT and torchrun's c10d rendezvous port;
- the training interface of each node (the route to the others, as bench and smoke use), for
  NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME (a plain name: Gloo does not take NCCL's `^`);
- NCCL_IB_DISABLE=1 where no node has an active InfiniBand / RoCE port;
- ranks per node (slots=, else the GPUs found, else 1) and each node's interpreter.

`derive` refuses, with the reason, when env or net did not pass.
"""

from __future__ import annotations

import json

import shlex
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence

from clustercheck.core.errors import InputError
from clustercheck.core.inputs import read_text_file
from clustercheck.core.result import Finding, Status
from clustercheck.display.findings import findings_lines
from clustercheck.node.facts import Probed, get, interpreter
from clustercheck.node.readiness import ranks_per_node


class NotReady(Exception):
    """The cluster is not verified for a launch; the message says why."""


@dataclass
class JobSpec:
    nodes: List[str]
    master_addr: str
    master_port: int
    rdzv_port: int
    nproc: Dict[str, int]
    python: Dict[str, str]
    env: Dict[str, Dict[str, str]]          # node -> variables every launcher sets
    gpus: bool
    how: List[str] = field(default_factory=list)   # where each value came from

    @property
    def world_size(self) -> int:
        return sum(self.nproc.values())

    @property
    def uniform_env(self) -> bool:
        """One environment fits every node (one srun line, one .deepspeed_env)."""
        return all(env == self.env[self.nodes[0]] for env in self.env.values())

    def rank_of(self, node: str) -> int:
        return self.nodes.index(node)


def derive(probed: Sequence[Probed], attempts: Sequence[tuple], master_port: int, rdzv_port: int,
           findings: Sequence[Finding]) -> JobSpec:
    """The job's launch facts from env's documents and net's attempts (from, to, port, state, raw)."""
    failed = [f for f in findings if f.status in (Status.FAIL, Status.UNKNOWN)]
    if failed:
        raise NotReady("; ".join(f"{f.status.label} {f.summary}" for f in failed[:3])
                       + (f" (and {len(failed) - 3} more)" if len(failed) > 3 else ""))
    usable = [p for p in probed if p.facts is not None]
    if not usable or len(usable) != len(probed):
        raise NotReady("not every node was probed")
    names = [p.name for p in usable]
    master = names[0]
    to_master = [raw for source, to, port, state, raw in attempts if to == master and port == master_port]
    if len(names) > 1 and not to_master:
        raise NotReady(f"net made no attempt to {master}:{master_port}: run net with that --master-port")
    closed = sorted({source for source, to, port, state, raw in attempts
                     if to == master and port in (master_port, rdzv_port) and state != "open"})
    if closed:
        raise NotReady(f"{', '.join(closed)} cannot reach {master} on port {master_port} or {rdzv_port}")
    addresses = {raw.get("address") for raw in to_master if raw.get("address")}
    how = []
    if len(addresses) == 1:
        master_addr = addresses.pop()
        how.append(f"MASTER_ADDR {master_addr}: the address of {master} every node connected to")
    else:
        master_addr = master
        how.append(f"MASTER_ADDR {master}: its name (the nodes resolved it to "
                   f"{', '.join(sorted(addresses)) or 'nothing recorded'})")
    how.append(f"ports {master_port} (MASTER_PORT) and {rdzv_port} (c10d rendezvous) open on {master} from every node")
    gpus = all(p.gpu_count for p in usable)
    nproc = ranks_per_node(usable, None, gpus)
    ib = any(q.get("state") == "ACTIVE" for p in usable for q in (get(p.facts, "infiniband") or []))
    env: Dict[str, Dict[str, str]] = {}
    for p in usable:
        ifname, chosen = p.interface
        if not ifname and len(usable) > 1:
            raise NotReady(f"no training interface found on {p.name} ({chosen})")
        env[p.name] = {"NCCL_SOCKET_IFNAME": ifname, "GLOO_SOCKET_IFNAME": ifname} if ifname else {}
        if not ib:
            env[p.name]["NCCL_IB_DISABLE"] = "1"
    ifnames = sorted({e["NCCL_SOCKET_IFNAME"] for e in env.values() if "NCCL_SOCKET_IFNAME" in e})
    if ifnames:
        how.append(f"interface {', '.join(ifnames)}: the route to the other nodes (NCCL_SOCKET_IFNAME, "
                   f"GLOO_SOCKET_IFNAME)")
    how.append("InfiniBand/RoCE active: NCCL uses it" if ib else "no active InfiniBand/RoCE port: NCCL_IB_DISABLE=1")
    how.append("ranks per node: " + ", ".join(f"{n} {k}" for n, k in nproc.items())
               + (" (the GPUs found, or slots=)" if gpus else " (slots=, else 1: no GPUs, Gloo)"))
    return JobSpec(names, master_addr, master_port, rdzv_port, nproc, {p.name: interpreter(p.node) for p in usable},
                   env, gpus, how)


# ---- the recipes ----------------------------------------------------------------------------------
def assignments(env: Dict[str, str]) -> str:
    return "".join(f"{k}={shlex.quote(v)} " for k, v in env.items())


def script_line(script: str, args: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in (script, *args))


def torchrun_lines(spec: JobSpec, script: str, args: Sequence[str]) -> Dict[str, str]:
    """One command per node: static rendezvous at MASTER_ADDR:MASTER_PORT, the node's rank by inventory order."""
    return {node: f"{assignments(spec.env[node])}{shlex.quote(spec.python[node])} -m torch.distributed.run "
                  f"--nnodes {len(spec.nodes)} --nproc-per-node {spec.nproc[node]} --node-rank {spec.rank_of(node)} "
                  f"--master-addr {spec.master_addr} --master-port {spec.master_port} {script_line(script, args)}"
            for node in spec.nodes}


def srun_line(spec: JobSpec, script: str, args: Sequence[str]) -> str:
    """Under Slurm: one srun, one torchrun per node, c10d rendezvous on the port net tested."""
    first = spec.nodes[0]
    nproc = spec.nproc[first]
    inner = (f"{assignments(spec.env[first])}{shlex.quote(spec.python[first])} -m torch.distributed.run "
             f"--nnodes {len(spec.nodes)} --nproc-per-node {nproc} --rdzv-backend c10d "
             f"--rdzv-endpoint {spec.master_addr}:{spec.rdzv_port} --rdzv-id \"$SLURM_JOB_ID\" "
             f"{script_line(script, args)}")
    return f"srun --nodes={len(spec.nodes)} --ntasks-per-node=1 bash -c {shlex.quote(inner)}"


def hostfile(spec: JobSpec) -> str:
    return "".join(f"{node} slots={spec.nproc[node]}\n" for node in spec.nodes)


def deepspeed_env(spec: JobSpec) -> str:
    """.deepspeed_env: the launcher exports these on every node (one interface name for all)."""
    return "".join(f"{k}={v}\n" for k, v in spec.env[spec.nodes[0]].items())


def deepspeed_line(spec: JobSpec, script: str, args: Sequence[str]) -> str:
    first = spec.nodes[0]
    return (f"{shlex.quote(spec.python[first])} -m deepspeed.launcher.runner --hostfile hostfile "
            f"--master_addr {spec.master_addr} --master_port {spec.master_port} {script_line(script, args)}")


def deepspeed_slurm_line(spec: JobSpec, script: str, args: Sequence[str]) -> str:
    """DeepSpeed's own Slurm launcher (srun starts a rank group per node; no SSH, no pdsh), from inside the allocation."""
    first = spec.nodes[0]
    return (f"{shlex.quote(spec.python[first])} -m deepspeed.launcher.runner --launcher slurm --hostfile hostfile "
            f"--master_addr {spec.master_addr} --master_port {spec.master_port} {script_line(script, args)}")


def llamafactory_lines(spec: JobSpec, config: str) -> Dict[str, str]:
    """LLaMA-Factory's multi-node environment (FORCE_TORCHRUN, NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT)."""
    return {node: f"FORCE_TORCHRUN=1 NNODES={len(spec.nodes)} NODE_RANK={spec.rank_of(node)} "
                  f"NPROC_PER_NODE={spec.nproc[node]} MASTER_ADDR={spec.master_addr} MASTER_PORT={spec.master_port} "
                  f"{assignments(spec.env[node])}llamafactory-cli train {shlex.quote(config)}"
            for node in spec.nodes}


def accelerate_config(spec: JobSpec, node: str) -> str:
    """accelerate's config file for one node (machine_rank differs per node)."""
    return "\n".join([
        "compute_environment: LOCAL_MACHINE",
        f"distributed_type: {'MULTI_GPU' if spec.gpus else 'MULTI_CPU'}",
        f"machine_rank: {spec.rank_of(node)}",
        f"main_process_ip: {spec.master_addr}",
        f"main_process_port: {spec.master_port}",
        "main_training_function: main",
        "mixed_precision: 'no'",
        f"num_machines: {len(spec.nodes)}",
        f"num_processes: {spec.world_size}",
        "rdzv_backend: static",
        "same_network: true",
        f"use_cpu: {'false' if spec.gpus else 'true'}",
        ""])


def render(spec: JobSpec, script: str, args: Sequence[str], config: Optional[str] = None) -> List[str]:
    """The launch recipes as text: one block per launcher."""
    out = ["How to launch (from what env and net verified):", *(f"  - {line}" for line in spec.how), ""]
    out += ["torchrun, one command per node:"]
    out += [f"  [{node}] {line}" for node, line in torchrun_lines(spec, script, args).items()]
    if not spec.uniform_env:
        differ = ", ".join(f"{n} {e.get('NCCL_SOCKET_IFNAME')}" for n, e in spec.env.items())
        out += ["", f"The nodes train over different interfaces ({differ}): one srun line or one .deepspeed_env "
                    "cannot carry them; use the torchrun lines above, one per node.", ""]
        return out
    out += ["", "Slurm, inside an allocation of these nodes:", f"  {srun_line(spec, script, args)}", ""]
    out += ["DeepSpeed, on the first node: `hostfile` and `.deepspeed_env` (in the directory you launch from), "
            "then the command (pdsh reaches the others over SSH):", "  hostfile:"]
    out += [f"    {line}" for line in hostfile(spec).splitlines()]
    out += ["  .deepspeed_env:", *(f"    {line}" for line in deepspeed_env(spec).splitlines())]
    out += [f"  {deepspeed_line(spec, script, args)}", "  under Slurm, from inside the allocation (srun, not pdsh):",
            f"  {deepspeed_slurm_line(spec, script, args)}", ""]
    out += ["LLaMA-Factory, one command per node:"]
    out += [f"  [{node}] {line}" for node, line in llamafactory_lines(spec, config or "train.yaml").items()]
    out += ["", f"accelerate (`accelerate launch --config_file accelerate.yaml {script_line(script, args)}`), "
                f"accelerate.yaml on {spec.nodes[0]} (machine_rank 0; the others differ only there):"]
    out += [f"    {line}" for line in accelerate_config(spec, spec.nodes[0]).splitlines()]
    return out


def from_run(run) -> "tuple[Optional[JobSpec], str]":
    """The spec from a run of env and net (a preflight, or `launch` itself), or why there is none."""
    by_name = {result.name: result for result in run.stages}
    env, net = by_name.get("env"), by_name.get("net")
    if not env or not net or not env.ran or not net.ran or env.facts is None or net.facts is None:
        return None, "env and net must both run to verify a launch"
    ports = list(net.facts.launch_ports) + list(net.facts.launch_ports[-1:])   # one port given: it is both
    try:
        return derive(env.facts.probed, net.facts.attempts(), ports[0], ports[1], run.findings), ""
    except NotReady as exc:
        return None, str(exc)


def healthy_spec(run, failed: Sequence[str]) -> "tuple[Optional[JobSpec], str]":
    """The spec for the nodes that passed: the failed ones left out (and every finding that names them), the
    world size, ranks and master recomputed from the others; a failure of the whole cluster still refuses."""
    if not failed:
        return from_run(run)
    by_name = {result.name: result for result in run.stages}
    env, net = by_name.get("env"), by_name.get("net")
    if not env or not net or not env.ran or not net.ran or env.facts is None or net.facts is None:
        return None, "env and net must both run to verify a launch"
    gone = set(failed)
    probed = [p for p in env.facts.probed if p.name not in gone]
    if not probed:
        return None, "no node passed"
    attempts = [a for a in net.facts.attempts() if a[0] not in gone and a[1] not in gone]
    findings = [f for f in run.findings if not set(f.nodes) & gone]
    ports = list(net.facts.launch_ports) + list(net.facts.launch_ports[-1:])
    try:
        return derive(probed, attempts, ports[0], ports[1], findings), ""
    except NotReady as exc:
        return None, str(exc)


def spec_from_report(path: str) -> JobSpec:
    """The healthy nodes' launch spec a preflight report's JSON holds (its every node's when none failed); bad
    input names the file: not JSON, not a clustercheck preflight report, or no node to launch on."""
    text = read_text_file(path, "preflight report (.json)")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InputError(f"not a clustercheck report: broken JSON ({str(exc).split(':')[0]})", path) from None
    if not isinstance(doc, dict) or doc.get("command") != "preflight" or "launch" not in doc:
        raise InputError("not a clustercheck preflight report (.json): no \"command\": \"preflight\" with a launch",
                         path)
    launch = doc.get("healthy_launch") if doc.get("failed_nodes") else doc.get("launch")
    if not isinstance(launch, dict) or not launch.get("spec"):
        why = (launch or {}).get("reason") or "no node passed"
        raise InputError(f"the report has no healthy node to launch on ({why})", path)
    try:
        return JobSpec(**launch["spec"])
    except TypeError as exc:
        raise InputError(f"the report's launch facts cannot be read ({exc})", path) from None


def from_report(path: str, script: str, args: Sequence[str], config: str, as_json: bool) -> str:
    """What `launch --from REPORT.json` prints: the commands for the report's healthy nodes."""
    spec = spec_from_report(path)
    return json.dumps(to_json(spec, "", script, args, config), indent=1) if as_json else \
        "\n".join(render(spec, script, args, config))


def markdown(run, script: str = "train.py", args: Sequence[str] = ()) -> List[str]:
    """The report's "How to launch" section."""
    spec, reason = from_run(run)
    if spec is None:
        return ["## How to launch", "", f"Not ready to launch: {reason}.", ""]
    return ["## How to launch", "", f"Replace `{script}` and its arguments with yours.", "", "```text",
            *render(spec, script, args), "```", ""]


def to_json(spec: Optional[JobSpec], reason: str, script: str, args: Sequence[str], config: str) -> Dict:
    commands = None
    if spec is not None:
        commands = {"torchrun": torchrun_lines(spec, script, args), "srun": srun_line(spec, script, args),
                    "hostfile": hostfile(spec), "deepspeed_env": deepspeed_env(spec),
                    "deepspeed": deepspeed_line(spec, script, args),
                    "deepspeed_slurm": deepspeed_slurm_line(spec, script, args),
                    "llamafactory": llamafactory_lines(spec, config),
                    "accelerate": {n: accelerate_config(spec, n) for n in spec.nodes}}
    return {"ready": spec is not None, "reason": reason or None, "spec": asdict(spec) if spec else None,
            "commands": commands}


def text(run, spec: Optional[JobSpec], reason: str, script: str, args: Sequence[str], config: str) -> str:
    """What `launch` prints: the checks' findings, then the recipes or why there are none."""
    lines = findings_lines(run.findings) + [""]
    lines += [f"Not launching: {reason}"] if spec is None else render(spec, script, args, config)
    return "\n".join(lines)
