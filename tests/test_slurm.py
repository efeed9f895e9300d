"""What Slurm says about the nodes (scontrol), judged; the srun transport's command; node-check's line."""

import glob
import os

from clustercheck.core.errors import EXIT_BAD_INPUT
from clustercheck.core.result import Finding, Status
from clustercheck.node.slurm import SlurmView, gres_gpus, parse_scontrol, split_fields
from clustercheck.stages.env.slurm_rules import judge_slurm
from clustercheck.tools.node_health import reason, verdict
from clustercheck.transport.srun import srun_argv
from tests.conftest import clustercheck

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "slurm")
ONE_LINE = ("NodeName=gpu07 Arch=x86_64 CoresPerSocket=32 CPUAlloc=0 CPUTot=128 Gres=gpu:h100:8(S:0-1) "
            "NodeAddr=gpu07 State=IDLE+DRAIN ThreadsPerCore=2 Reason=Xid 79 GPU 3 [admin@2026-11-20T09:12:44]")


def test_fields_keep_a_reason_with_spaces_and_gres_counts_gpus():
    fields = split_fields(ONE_LINE)
    assert fields["Reason"] == "Xid 79 GPU 3 [admin@2026-11-20T09:12:44]"
    assert fields["State"] == "IDLE+DRAIN"
    assert gres_gpus("gpu:h100:8(S:0-1)") == 8
    assert gres_gpus("gpu:a100:4,gpu:a10:2,mps:100") == 6
    assert gres_gpus("gpu:4") == 4
    assert gres_gpus("(null)") is None and gres_gpus("") is None


def test_a_drained_node_fails_with_its_reason_and_the_others_pass():
    text = ONE_LINE + "\n\n" + ONE_LINE.replace("gpu07", "gpu08").replace("IDLE+DRAIN", "ALLOCATED").replace(
        " Reason=Xid 79 GPU 3 [admin@2026-11-20T09:12:44]", "")
    view = SlurmView(parse_scontrol(text))
    findings = judge_slurm(view, ["gpu07", "gpu08"], {"gpu07": 8, "gpu08": 8})
    [state] = [f for f in findings if f.check == "slurm.state"]
    assert state.status is Status.FAIL and state.nodes == ["gpu07"]
    assert state.summary == "Slurm lists gpu07 as drain: Xid 79 GPU 3 [admin@2026-11-20T09:12:44]"
    [gres] = [f for f in findings if f.check == "slurm.gres"]
    assert gres.status is Status.OK


def test_not_responding_and_a_gpu_count_that_differs_are_named():
    text = ONE_LINE.replace("IDLE+DRAIN", "IDLE*").replace("Reason=Xid 79 GPU 3 [admin@2026-11-20T09:12:44]",
                                                           "Reason=Not responding [slurm@2026-11-21T01:00:00]")
    view = SlurmView(parse_scontrol(text))
    findings = judge_slurm(view, ["gpu07"], {"gpu07": 7})
    state = [f for f in findings if f.check == "slurm.state"][0]
    assert state.status is Status.FAIL and "not responding" in state.summary
    gres = [f for f in findings if f.check == "slurm.gres"][0]
    assert gres.status is Status.FAIL and gres.summary == "Slurm hands out 8 GPUs on gpu07, which has 7"


def test_slurm_that_cannot_be_asked_is_unknown_never_ok():
    [finding] = judge_slurm(SlurmView(problem="scontrol gave no answer within 20 s"), ["a", "b"], {})
    assert finding.status is Status.UNKNOWN and finding.nodes == ["a", "b"]


def test_recorded_scontrol_outputs_parse():
    files = sorted(glob.glob(os.path.join(DATA, "scontrol_show_node*.txt")))
    assert files, "tests/data/slurm holds recorded scontrol outputs"
    states = {}
    for path in files:
        for name, node in parse_scontrol(open(path).read()).items():
            assert node.state and node.state != "?", (path, name)
            states[name] = node
    assert any(node.unfit and node.reason for node in states.values()), states
    assert any(node.gpus for node in states.values()), states


def test_srun_steps_overlap_inside_the_allocation_on_one_node():
    argv = srun_argv("1234", "gpu07")
    assert "srun" in argv and "--jobid=1234" in argv and "SLURM_NTASKS_PER_NODE" in argv and "--nodelist=gpu07" in argv
    assert "--overlap" in argv and "--nodes=1" in argv and "--ntasks=1" in argv and "--unbuffered" in argv


def test_via_srun_outside_an_allocation_is_bad_input():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    proc = clustercheck("run", "--via", "srun", "--", "true", env=env)
    assert proc.returncode == EXIT_BAD_INPUT and "SLURM_JOB_ID is not set" in proc.stderr


def test_node_check_says_one_line_a_drain_reason_can_carry():
    findings = [Finding("gpu.health", Status.FAIL, "GPU health: localhost has a GPU fallen off the bus",
                        ["localhost: GPU 0000:b3:00: Xid 79 (fallen off the bus)"], "drain it", ["localhost"]),
                Finding("shm", Status.OK, "/dev/shm is at least 1.0 GiB everywhere")]
    code, line = verdict(findings)
    assert code == 2 and line == "CLUSTERCHECK CRITICAL - GPU 0000:b3:00: Xid 79 (fallen off the bus)"
    assert reason([Finding("shm", Status.OK, "fine")]) == ""
    assert verdict([Finding("shm", Status.OK, "fine")]) == (0, "CLUSTERCHECK OK - 1 check passed")


def test_a_reason_holding_key_equals_and_a_blank_line_before_it_is_kept_whole():
    text = ("NodeName=gpu07 Arch=x86_64\n   Gres=gpu:8\n   State=IDLE+DRAIN ThreadsPerCore=2\n   \n"
            "   Reason=GPU 3 fell off the bus: Xid=79 [admin@2026-11-20T09:12:44]\n")
    [node] = parse_scontrol(text).values()
    assert node.reason == "GPU 3 fell off the bus: Xid=79 [admin@2026-11-20T09:12:44]"
    recorded = parse_scontrol(open(os.path.join(DATA, "scontrol_show_node_drained_gpu.txt")).read())
    assert all(n.reason for n in recorded.values()), recorded


def test_maintenance_warns_and_a_partial_allocation_or_mig_is_not_a_gpu_mismatch():
    maint = SlurmView(parse_scontrol(ONE_LINE.replace("IDLE+DRAIN", "ALLOCATED+MAINT")))
    [state] = [f for f in judge_slurm(maint, ["gpu07"], {}) if f.check == "slurm.state"]
    assert state.status is Status.WARN
    partial = SlurmView(parse_scontrol(ONE_LINE.replace("IDLE+DRAIN", "MIXED")), job_gpus=2)
    assert [f.status for f in judge_slurm(partial, ["gpu07"], {"gpu07": 2}) if f.check == "slurm.gres"] == [Status.OK]
    assert gres_gpus("gpu:1g.10gb:7") is None


def test_node_check_counts_the_gpus_on_the_pci_bus_and_fails_when_the_driver_lists_fewer(tmp_path):
    from clustercheck.tools.node_health import gpus_present, pci_gpus
    for index, (vendor, klass) in enumerate([("0x10de", "0x030200"), ("0x10de", "0x030200"), ("0x10de", "0x068000"),
                                             ("0x15b3", "0x020700")]):
        device = tmp_path / "bus" / "pci" / "devices" / f"0000:{index:02x}:00.0"
        device.mkdir(parents=True)
        (device / "vendor").write_text(vendor + "\n")
        (device / "class").write_text(klass + "\n")
    assert pci_gpus(str(tmp_path)) == 2          # the NVSwitch (0x0680) and the HCA are not GPUs
    [finding] = gpus_present(2, 1, "the PCI bus")
    assert finding.status is Status.FAIL and finding.summary == "the driver lists 1 of 2 GPUs (the PCI bus)"
    assert gpus_present(2, None, "the PCI bus") == [] and gpus_present(0, 0, "the PCI bus") == []
