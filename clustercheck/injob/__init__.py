"""The check inside the job: the user's own ranks check their nodes before the first step, judged by the same
judges as env, device and bench, with one verdict and a policy (stop the job, or warn and train on).

Two ways in, one check: the launcher wrapper (`torchrun ... -m clustercheck.injob [options] -- train.py ARGS`,
__main__.py) and one call from a training script (`clustercheck.injob.check(...)`, check.py).
"""

from clustercheck.injob.check import check  # noqa: F401
