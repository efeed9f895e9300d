"""Why a job failed, judged from facts alone: every node's lines (by rank where they say which) and how its
launcher ended, read through the vocabulary (clustercheck/vocabulary). A layer below the stages: smoke turns
its runs into these facts, explain its user's files; both call the same `classify`.

lines.py reads one line (a warning, an error, a launcher's wrapper, which rank printed it); classify.py is the
judge (each rank's most telling cause, across nodes the first failure, never a healthy node)."""
