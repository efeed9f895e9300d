"""Progress a user can see (issue 42): a stage that runs long says which step, how many nodes answered and how
long, within FIRST_S and then at least every EVERY_S (a line per step on a pipe, one live line on a terminal),
and its total time at the end; a short one says nothing; stdout is never touched. The clock is a fake one
here: what is checked is which lines a user sees at which moment, not how fast anything runs (the real
gaps are checked on a pipe in tests/test_sandbox_storage.py)."""

import io

from clustercheck.core.inventory import Node
from clustercheck.core.result import Finding, Status
from clustercheck.display import progress
from clustercheck.runner.stage import Stage, run_stages
from clustercheck.transport.base import NodeResult, Outcome
from clustercheck.transport.fanout import FanoutOptions


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Terminal(io.StringIO):
    def isatty(self):
        return True


def beat(stream=None, clock=None):
    return progress.Printer(stream if stream is not None else io.StringIO(), clock or Clock(), ticking=False)


def test_a_stage_done_within_the_first_seconds_prints_nothing():
    heart = beat()
    heart.begin("env")
    heart.clock.now += progress.FIRST_S - 0.5
    heart.tick()
    heart.end("[env] done: OK")
    assert heart.stream.getvalue() == ""


def test_on_a_pipe_a_long_stage_says_its_step_then_every_few_seconds_then_its_total_time():
    heart = beat()
    clock = heart.clock
    heart.begin("device")
    heart.step("measuring the GPUs", 3)
    clock.now += progress.FIRST_S
    heart.tick()
    heart.answered()
    clock.now += 1
    heart.tick()        # nothing new and not quiet long: no line
    clock.now += progress.EVERY_S
    heart.tick()
    clock.now += 1
    heart.end("[device] done: OK")
    lines = heart.stream.getvalue().splitlines()
    assert lines == ["[device] 2 s: measuring the GPUs, 0 of 3 nodes answered",
                     "[device] 11 s: measuring the GPUs, 1 of 3 nodes answered",
                     "[device] done: OK in 12.0 s"]
    assert progress.FIRST_S <= 5 and progress.EVERY_S <= 10   # the promise the issue makes to users


def test_on_a_pipe_a_new_step_is_a_new_line_and_the_ranks_last_word_is_part_of_it():
    heart = beat()
    heart.begin("bench")
    heart.clock.now += progress.FIRST_S
    heart.step("probing the nodes", 2)
    heart.tick()
    heart.step("bench running under torchrun", 2, counted="ended")
    heart.hear("row from node01")
    heart.tick()
    assert heart.stream.getvalue().splitlines() == [
        "[bench] 2 s: probing the nodes, 0 of 2 nodes answered",
        "[bench] 2 s: bench running under torchrun, 0 of 2 nodes ended; last: row from node01"]


def test_a_stage_printer_line_counts_as_a_word_so_the_heartbeat_does_not_repeat_it_at_once():
    heart = beat()
    heart.begin("smoke")
    heart.say("[smoke] step 1: loss 2.3")
    heart.clock.now += progress.FIRST_S
    heart.tick()        # the step has not changed since the stage's own line: only the first status line
    heart.clock.now += 1
    heart.tick()
    assert heart.stream.getvalue().splitlines() == ["[smoke] step 1: loss 2.3", "[smoke] 2 s: starting"]


def test_on_a_terminal_one_live_line_is_rewritten_and_ended_by_the_total_time():
    heart = beat(Terminal())
    heart.begin("storage")
    heart.step("writing", 2)
    heart.clock.now += progress.FIRST_S
    heart.tick()
    heart.say("[storage] slot 1: 1.0 GB/s", live=True)
    heart.clock.now += 1
    heart.end("[storage] done: OK")
    out = heart.stream.getvalue()
    assert out.count("\n") == 1 and out.endswith("[storage] done: OK in 3.0 s\n")
    assert "\r\033[K[storage] 2 s: writing, 0 of 2 nodes answered\r" in out
    assert "\r\033[K[storage] 2 s: writing, 0 of 2 nodes answered; last: slot 1: 1.0 GB/s\r" in out


def test_a_closed_stream_never_crashes_the_run():
    stream = io.StringIO()
    heart = beat(stream)
    heart.begin("net")
    stream.close()
    heart.clock.now += progress.FIRST_S
    heart.tick()
    heart.end("[net] done: OK")


class Counting(Stage):
    """A stage whose one fan-out step takes a while on each node."""

    name = "counting"

    def __init__(self, clock):
        super().__init__(None)
        self.clock = clock

    def gather(self, layer):
        def slow(transport, node):
            self.clock.now += 4
            progress.current().tick()
            return NodeResult(node.name, Outcome.OK)
        return layer.cluster.each(slow, what="counting sheep")

    def judge(self, facts):
        return [Finding("counting.done", Status.OK, f"{len(facts)} nodes counted")]


def test_the_runner_and_the_fan_out_tell_the_heartbeat_which_step_and_how_many_answered(monkeypatch, capsys):
    clock, stream, real = Clock(), io.StringIO(), progress.Printer
    monkeypatch.setattr(progress, "Printer", lambda: real(stream, clock, ticking=False))
    run = run_stages([Counting(clock)], [Node("localhost")], FanoutOptions(fanout=1))
    assert run.exit_code == 0
    lines = stream.getvalue().splitlines()
    assert lines[0] == "[counting] 4 s: counting sheep, 0 of 1 node answered"
    assert lines[-1] == "[counting] done: OK in 4.0 s"
    assert capsys.readouterr().out == ""                  # --json's stdout stays a document
    assert isinstance(progress.current(), progress.Progress)  # and the heartbeat is gone with the run


def test_a_stderr_nobody_reads_blocks_only_the_writer_never_a_node_answering():
    """A full pipe blocks the write; the fan-out's workers counting their nodes must go on (else the run hangs)."""
    import threading

    release = threading.Event()

    class Stuck(io.StringIO):
        def write(self, text):
            release.wait()
            return super().write(text)

    heart = beat(Stuck())
    heart.begin("bench")
    writer = threading.Thread(target=heart.say, args=("[bench] 4 ranks up (gloo)",), daemon=True)
    writer.start()
    worker = threading.Thread(target=lambda: (heart.step("probing the nodes", 2), heart.answered()), daemon=True)
    worker.start()
    worker.join(30)
    done = not worker.is_alive()
    release.set()
    writer.join(30)
    assert done and heart.answered_n == 1
    assert heart.stream.getvalue() == "[bench] 4 ranks up (gloo)\n"
