"""The runner and its output: the Stage interface and run_stages (stage.py), options that are also flags
(options.py), the one output path and exit code of every check command (output.py), Ctrl-C (interrupt.py).
"""
