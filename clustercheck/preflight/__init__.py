"""`clustercheck preflight`: the runner over env, net, bench and smoke, one readiness report.

The stages run in that order over one set of connections (clustercheck.runner.stage.run_stages);
each stage's own skip rule says which later stages its result makes pointless. What this
package adds: the choice of stages and their options for a short, whole check (sequence.py,
options.py), the report (report.py), what changed since an earlier one (diff.py), and how
the run is shown (view.py).
"""
