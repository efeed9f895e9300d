"""The reference trainer itself, two processes on this machine (Gloo): --resume continues
with the same losses as an uninterrupted run."""

import json
import os
import subprocess
import sys

from clustercheck.onnode import TRAINER_ENTRY, trainer_files

TRAIN = os.path.join(os.path.dirname(__file__), "..", "reference_train", "train.py")


def losses(tmp_path, name, *args):
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           TRAIN, "--log-every", "1", *args], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {e["step"]: e["loss"] for e in events if e["event"] == "step"}, events


def test_resume_reproduces_the_losses_of_an_uninterrupted_run(tmp_path):
    whole, _ = losses(tmp_path, "whole", "--steps", "12")
    ckpt = str(tmp_path / "ckpt")
    first, first_events = losses(tmp_path, "first", "--steps", "6", "--save-dir", ckpt, "--save-every", "6")
    second, events = losses(tmp_path, "second", "--steps", "12", "--save-dir", ckpt, "--resume")
    [resumed] = [e for e in events if e["event"] == "resumed"]
    assert resumed["step"] == 6 and resumed["load_s"] >= 0      # the load's time: smoke reports it
    [saved] = [e for e in first_events if e["event"] == "saved"]
    assert saved["step"] == 6 and saved["save_s"] >= 0 and saved["bytes"] > 0
    assert sorted(second) == list(range(7, 13))
    for step in range(7, 13):
        assert abs(second[step] - whole[step]) < 1e-5, (step, second[step], whole[step])
    assert all(abs(first[s] - whole[s]) < 1e-6 for s in first)


def test_summary_reports_reference_nan_free_losses_and_every_ranks_throughput(tmp_path):
    _, events = losses(tmp_path, "fsdp", "--mode", "fsdp", "--steps", "20", "--reference-steps", "6")
    [summary] = [e for e in events if e["event"] == "summary"]
    assert summary["nonfinite"] is None and summary["weights_agree"] is None   # sharded: agreement is no proof
    assert len(summary["reference"]) == 6
    for step, ref in enumerate(summary["reference"], 1):
        assert abs(summary["losses"][str(step)] - ref) < 1e-4 * ref, (step, summary["losses"], summary["reference"])
    assert summary["last_loss"] < 0.8 * summary["first_loss"]
    assert [r["rank"] for r in summary["ranks"]] == [0, 1] and all(r["tokens_per_s"] > 0 for r in summary["ranks"])


def shipped(directory):
    """The trainer as smoke ships it into a node's run directory (its entry, hooks and faults beside it)."""
    for name, data in trainer_files().items():
        (directory / name).write_bytes(data)
    return str(directory / TRAINER_ENTRY)


def test_a_rank_with_another_learning_rate_departs_from_the_reference(tmp_path):
    """The sandbox's rank fault, installed from outside the trainer by the shipped entry."""
    env = dict(os.environ, CLUSTERCHECK_TEST_LR_SCALE="1:1.5")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           shipped(tmp_path), "--mode", "fsdp", "--steps", "6", "--reference-steps", "6"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    [summary] = [json.loads(line) for line in proc.stdout.splitlines() if '"summary"' in line]
    worst = max(abs(summary["losses"][str(s)] - ref) / ref for s, ref in enumerate(summary["reference"], 1))
    assert worst > 1e-3, worst


def test_an_event_is_written_as_one_line_in_one_write_and_read_back_with_another_ranks_text_after_it(monkeypatch):
    """Seen in a fresh-clone run (PYTHONUNBUFFERED=1, as containers and batch scripts often set it): print() wrote
    the trainer's start event and its newline apart, rank 1's DeepSpeed warning landed between, and the line was no
    JSON. The trainer writes an event in one write; the tool reads an event that another process's text follows."""
    sys.path.insert(0, os.path.dirname(TRAIN))
    import checks
    from clustercheck.ranks.torchrun import event_of
    writes = []

    class Stdout:
        def write(self, text):
            writes.append(text)

        def flush(self):
            pass
    monkeypatch.setattr(checks.dist, "get_rank", lambda: 0)
    monkeypatch.setattr(sys, "stdout", Stdout())
    checks.log({"event": "start", "mode": "zero2-offload"})
    assert writes == ['{"event": "start", "mode": "zero2-offload"}\n']
    warning = ("[2026-12-03 10:15:05,492] [WARNING] [lr_schedules.py:759:get_lr] Attempting to get learning rate from "
               "scheduler before it has started")
    assert event_of('{"event": "start", "mode": "zero2-offload"}' + warning + "\n") == \
        ({"event": "start", "mode": "zero2-offload"}, warning + "\n")
    assert event_of(warning + "\n") == (None, warning + "\n")
    assert event_of('{"event": "st\n')[0] is None and event_of("[1, 2]\n")[0] is None
