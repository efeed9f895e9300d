"""`clustercheck explain`: a user's own job logs explained offline, as smoke explains its own run: which node and
rank failed first, the cause (the table of clustercheck/vocabulary, through the failure judge smoke uses too:
clustercheck/failure), the remedy and the lines that show it; and what else the files are that clustercheck
already reads (nvidia-smi, dcgmi, kernel logs with Xids, nccl-tests tables), judged by the judges env, device
and bench use (node/gpu_health.py, clustercheck/outputs). It imports no stage."""
