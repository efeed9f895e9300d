"""The click commands: each a thin body over a library (at most 15 lines), registered in cli.py.
"""
