"""The check inside the job: the user's own ranks check their nodes before the first step, judged by the same
judges as env, device and bench, with one verdict and a policy (stop the job, or warn and train on).

Two ways in, one check: the launcher wrapper (`torchrun ... -m clustercheck.injob [options] -- train.py ARGS`,
__main__.py) and one call from a training script, before or after its init_process_group:

    import clustercheck.injob
    clustercheck.injob.check(budget=60, on_fail="stop")

Importing the package loads nothing heavy: torch and the stages load on the first call (run.py).
"""


def check(budget: float = 60.0, on_fail: str = "stop", reports_dir: str = "reports", report_name: str = "injob",
          pushgateway=None, quiet: bool = False, checkpoint_dir=None):
    """Check the job's nodes from its own ranks, then apply the policy: on_fail="stop" makes every rank exit 2
    when the verdict is not READY; "warn" returns the verdict and training goes on. See run.check."""
    from clustercheck.injob.run import check as run_check
    return run_check(budget, on_fail, reports_dir, report_name, pushgateway, quiet, checkpoint_dir)
