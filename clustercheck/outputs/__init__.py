"""What NVIDIA's tools print, read and judged as pure functions in a layer below the stages, so that a stage
over SSH and explain over a user's file call the same judge: `dcgmi diag` (dcgm_read.py, dcgm_codes.py, dcgm.py),
nccl-tests' tables (nccl_tests.py)."""
