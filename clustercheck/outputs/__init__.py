"""What a tool prints, read and judged as pure functions in a layer below the stages, so that a stage over SSH
and explain over a user's file call the same judge: `dcgmi diag` (dcgm_read.py reads it into one shape whatever
DCGM version wrote it, dcgm_codes.py holds DCGM's failure codes as data, dcgm.py judges it per test and GPU),
nccl-tests' tables (nccl_tests.py: the collectives, their bus-bandwidth factors, the table written and read)."""
