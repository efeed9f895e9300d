"""Issue 48 §1: READY only on what was read. explain is READY only where a log shows the job ended well; a log
with no error and no end is UNKNOWN (a hang in progress where it stops in the job's set-up or a collective); an
error no row knows is still quoted; a node's other lines refine a cause (a SIGBUS inside NCCL is /dev/shm); a
kernel log's lines are read as a node's log too. Lines below are instantiated from the cited sources' formats."""

import json

import pytest

from clustercheck.core.result import Finding, Status, note, verdict_line, worst
from clustercheck.failure.classify import NodeLines, classify
from clustercheck.failure.lines import is_error, is_wrapper
from tests.conftest import clustercheck


def test_a_verdict_over_nothing_or_notes_only_is_unknown_never_ready():
    assert worst([]) is Status.UNKNOWN and verdict_line([]).startswith("UNKNOWN: NOTHING WAS CHECKED")
    notes = [note("explain.skipped", "2 files skipped")]
    assert worst(notes) is Status.UNKNOWN and "1 note" in verdict_line(notes)
    passed = notes + [Finding("x", Status.OK, "checked")]
    assert worst(passed) is Status.OK and verdict_line(passed) == "READY (1 passed, 1 note)"
    with pytest.raises(ValueError):       # a note that fails checked something: not a note
        Finding("x", Status.FAIL, "bad", checked=False)


def explain(tmp_path, text, name="job.log"):
    path = tmp_path / name
    path.write_text(text)
    proc = clustercheck("explain", "--json", str(path))
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.parametrize("end", [
    # torch/distributed/elastic/agent/server/api.py _invoke_run / _exit_barrier
    "INFO:torch.distributed.elastic.agent.server.api:[default] worker group successfully finished. Waiting 300 "
    "seconds for other agents to finish.",
    "[2024-05-01 10:00:00,000] [INFO] [launch.py:351:main] Process 4242 exits successfully.",   # DeepSpeed launch.py
    "Training completed. Do not forget to share your model on huggingface.co/models =)",       # transformers trainer
    "`Trainer.fit` stopped: `max_steps=100` reached.",                                          # Lightning fit_loop
])
def test_a_log_is_ready_only_on_the_launchers_or_trainers_word_that_it_ended(tmp_path, end):
    body = "step 1 loss 2.0\nstep 2 loss 1.9\n"
    code, doc = explain(tmp_path, body + end + "\n")
    assert code == 0 and doc["verdict"] == "OK"
    [finding] = doc["findings"]
    assert finding["check"] == "explain.ended" and end[:30] in finding["evidence"][-1]
    code, doc = explain(tmp_path, body)          # the same log cut before that line: not READY
    assert code == 3 and doc["findings"][0]["check"] == "explain.no-end"


def test_a_log_that_stops_in_ncclS_setup_or_a_collective_is_a_hang_in_progress(tmp_path):
    lines = ["node1:1234:1234 [0] NCCL INFO Channel 00/02 :    0   1",
             "node1:1234:1234 [0] NCCL INFO Connected all rings",
             "node1:1234:1234 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE"]
    code, doc = explain(tmp_path, "\n".join(lines) + "\n")
    assert code == 3 and doc["cause"]["kind"] == "hang" and doc["cause"]["nodes"] == []
    assert any(f["check"] == "explain.hang" and f["status"] == "UNKNOWN" for f in doc["findings"])
    # DeepSpeed's engine set-up is the job's set-up too: the first step's collectives come next
    ds = ["1.1.1.1: [2023-06-16 15:32:15,379] [INFO] [config.py:955:print] DeepSpeedEngine configuration:",
          "1.1.1.1: [2023-06-16 15:32:15,379] [INFO] [config.py:959:print]   activation_checkpointing_config  {",
          '1.1.1.1:     "partition_activations": false,', "1.1.1.1: }"]
    code, doc = explain(tmp_path, "\n".join(ds) + "\n")
    assert code == 3 and doc["cause"]["kind"] == "hang"


@pytest.mark.parametrize("line", [
    "srun: error: Unable to resolve the bluebird",            # "prog: error:" of any program
    "[2024-01-01 10:00:00,123] [ERROR] [engine.py:42:step] the optimizer went away",
    "2024-01-01 10:00:00,123 - ERROR - the data server closed the stream",
    "[E1201 12:00:00.123456 something.cpp:12] an error of its own",
    "terminate called after throwing an instance of 'c10::Error'",
    "Fatal Python error: Segmentation fault",
])
def test_an_error_in_its_own_words_of_any_layer_is_an_error_line(line):
    assert is_error(line)


def test_srun_saying_a_task_exited_says_which_never_why():
    # SchedMD/slurm src/srun/step_launch.c: "%s: task%s %s: Exited with exit code %d", "... Terminated"
    for line in ["srun: error: node12: task 14: Exited with exit code 1", "srun: error: node3: tasks 2-7: Terminated"]:
        assert is_wrapper(line)


def test_what_no_row_knows_is_quoted_with_its_node_as_could_not_classify(tmp_path):
    code, doc = explain(tmp_path, "2024-01-01 10:00:00,123 - ERROR - the frobnicator refused the widget\n"
                                  "srun: error: node7: task 3: Exited with exit code 1\n")
    assert code == 3 and doc["cause"]["kind"] == "unclassified"
    assert "frobnicator" in doc["cause"]["summary"] and doc["cause"]["ranks"] in ([], [3])


def test_a_bus_error_whose_backtrace_runs_through_nccl_is_dev_shm():
    # UCX's signal handler's line, and the native backtrace frames naming NCCL (ncclGroupEnd, libnccl.so)
    lines = ["[8d6bf97c3bf4:3039 :0:3095] Caught signal 7 (Bus error: nonexistent physical address)",
             "==== backtrace (tid:   3095) ====", " 2 0x000000000007587d ncclGroupEnd()  ???:0",
             " 5 0x00000000000489b1 ???()  /usr/lib/x86_64-linux-gnu/libnccl.so.2:0"]
    assert classify({"n1": NodeLines(lines)}).kind == "shm"
    assert classify({"n1": NodeLines(lines[:2])}).kind == "crashed"     # no NCCL, no DataLoader: a crash


def test_a_kernel_log_is_read_as_the_nodes_log_too(tmp_path):
    dmesg = ["[1084456.074562] NVRM: Xid (PCI:0000:09:00): 79, pid=0, GPU has fallen off the bus.",
             "[1084460.000000] Out of memory: Killed process 4242 (python) total-vm:1000kB, anon-rss:900kB"]
    code, doc = explain(tmp_path, "\n".join(dmesg) + "\n", "dmesg.txt")
    assert code == 2 and doc["cause"]["kind"] == "gpu-hardware"
    assert any(f["check"] == "gpu.xid" for f in doc["findings"])      # and judged as the env stage judges it
