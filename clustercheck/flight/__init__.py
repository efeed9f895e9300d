"""PyTorch Flight Recorder dumps of a hung or failed job, read safely and judged: which collective of which process
group some ranks never entered, and which ranks called a collective with other sizes (a desync)."""
