"""`clustercheck bench`: collective bandwidth sweeps, reported like nccl-tests, and the slow node.

The worker (clustercheck/onnode/bench_worker.py) runs on the nodes under torchrun;
gather.py launches it and collects events into facts.py's BenchFacts; table.py knows the
collectives' bus-bandwidth factors and the nccl-tests table; figures.py computes the
bandwidths once; expected.py holds the published figures; baseline.py reads earlier runs;
rules.py judges; render.py and plots.py show; stage.py wires them into the runner;
options.py holds the flags.
"""
