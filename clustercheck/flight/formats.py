"""What a Flight Recorder dump holds, per recorder version, as torch writes it: the versions this code reads, the keys
every dump and every entry has, how a dump file is named, and which sizes each collective's ranks must agree on.

Sources: torch/csrc/distributed/c10d/FlightRecorder.hpp (`version_val`, the `*_key` constants: "minor when adding
fields, major when changing existing fields"), FlightRecorder.cpp (`dump_entries`, `dump_json`), and torch's own
analyzer, torch/distributed/flight_recorder/components/ (loader.py: `<prefix><rank>` file names; types.py:
`Op.match`, the sizes each collective compares). Read from torch 2.13.0, whose recorder writes version "2.10".
"""

from __future__ import annotations

from typing import Dict, NamedTuple


class Version(NamedTuple):
    seq_key: str        # the entry's sequence number of collectives in its process group
    p2p_seq_key: str    # ... of point-to-point operations
    source: str


# Every version from "2.2" on names the two sequence numbers so (the analyzer's types.EntryState reads them; 2.2
# is where collective_seq_id and p2p_seq_id were split from one seq_id); "2.10" is torch 2.13.0's, read on the
# dumps of tests/data/flight-recorder/. A version outside this table is refused: its fields may mean other things.
KNOWN_VERSIONS: Dict[str, Version] = {
    f"2.{minor}": Version("collective_seq_id", "p2p_seq_id",
                          "torch 2.13.0 (tests/data/flight-recorder)" if minor == 10 else "FlightRecorder.hpp history")
    for minor in range(2, 11)
}

DUMP_KEYS = ("version", "entries")             # a dump without them is not a Flight Recorder dump
ENTRY_KEYS = ("record_id", "process_group", "profiling_name", "input_sizes", "output_sizes", "input_dtypes",
              "output_dtypes", "state", "is_p2p", "time_created_ns")

# The file torch writes on a timeout: TORCH_FR_DUMP_TEMP_FILE (formerly TORCH_NCCL_DEBUG_INFO_TEMP_FILE), default
# /tmp/nccl_trace_rank_, followed by the rank; a JSON dump is named here the same with ".json" after it.
DEFAULT_PREFIX = "nccl_trace_rank_"
SUFFIXES = (".json", ".pkl", ".pickle")

# The states an entry goes through (FlightRecorder.cpp): scheduled when enqueued, started and completed when the
# watchdog sees its events (NCCL with TORCH_NCCL_ENABLE_TIMING); Gloo's entries stay "scheduled" and say they
# finished only by `retired` (and pg_status's last_completed_collective).
STATES = ("scheduled", "started", "completed")

# Which of their sizes the ranks of one collective must agree on (types.Op.match): all_to_all's and scatter's
# inputs and all_to_all's and gather's outputs may differ by rank; every other collective's sizes and dtypes match.
INPUTS_MAY_DIFFER = frozenset({"all_to_all", "all_to_all_single", "all_to_all_v_single", "scatter"})
OUTPUTS_MAY_DIFFER = frozenset({"all_to_all", "all_to_all_single", "all_to_all_v_single", "gather"})

# The largest dump read: 2,000 entries of a deep stack are about 1 MB as JSON; a file far larger is not one rank's
MAX_DUMP_BYTES = 256 * 2 ** 20
