"""`clustercheck explain`: a user's own job logs explained offline, as smoke explains its own run: which node and
rank failed first, the cause (the error spaces of clustercheck/vocabulary, through smoke's classifier), the
remedy and the lines that show it; and what else the files are that clustercheck already reads (nvidia-smi,
dcgmi, kernel logs with Xids, nccl-tests tables), judged as env, device and bench judge them."""
