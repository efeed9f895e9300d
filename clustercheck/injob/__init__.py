"""The check inside the job: the user's own ranks check their nodes before the first step, judged by the same
judges as env, device and bench, with one verdict and a policy (stop the job, or warn and train on).

Two ways in, one check: the launcher wrapper (`torchrun ... -m clustercheck.injob [options] -- train.py ARGS`,
__main__.py) and one call from a training script, before or after its init_process_group:

    import clustercheck.injob
    clustercheck.injob.check(budget=60, on_fail="stop")

Importing the package loads nothing heavy: torch and the stages load on the first call (run.py).
"""


def check(budget: float = 60.0, on_fail: str = "stop", reports_dir: str = "reports", report_name: str = "injob",
          pushgateway=None, quiet: bool = False, checkpoint_dir=None, watch: bool = False, watch_every: int = 20,
          watch_slower: float = 1.3, watch_windows: int = 2, watch_on_slow: str = "warn", stall_dump: float = 600.0):
    """Check the job's nodes from its own ranks, then apply the policy: on_fail="stop" makes every rank exit 2
    when the verdict is not READY; "warn" returns the verdict and training goes on. watch=True then times the
    steps and names a rank that makes them `watch_slower` times slower over `watch_windows` windows of
    `watch_every` steps (docs/guides/injob.md, "While the job trains"). The Flight Recorder is turned on where the
    job did not set it (before any process group: call check() first), and once no step came for `stall_dump`
    seconds each rank writes its record under reports_dir (0: never). See run.check."""
    from clustercheck.injob.run import check as run_check     # torch and the stages load on the first call
    return run_check(budget, on_fail, reports_dir, report_name, pushgateway, quiet, checkpoint_dir, watch=watch,
                     watch_every=watch_every, watch_slower=watch_slower, watch_windows=watch_windows,
                     watch_on_slow=watch_on_slow, stall_dump_s=stall_dump)


def watch(every: int = 20, slower: float = 1.3, windows: int = 2, on_slow: str = "warn", pushgateway=None,
          report_name: str = "injob"):
    """The watch alone, without the check: time the steps from here on, name a slow rank on rank 0's stderr
    (and the Pushgateway when given). Returns the Watch (its stop() removes its hooks)."""
    from clustercheck.injob.options import InjobOptions     # as check(): nothing heavy at import
    from clustercheck.injob.stepwatch import start
    InjobOptions(pushgateway=pushgateway, watch=True, watch_every=every, watch_slower=slower,
                 watch_windows=windows, watch_on_slow=on_slow)       # bad values said as the wrapper says them
    return start(every, slower, windows, on_slow, pushgateway=pushgateway, report_name=report_name)
