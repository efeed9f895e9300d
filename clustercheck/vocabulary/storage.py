"""The storage layer, the "storage" space: what torch.save / torch.load (torch/serialization.py and the zip archive's
reader and writer, caffe2/serialize/inline_container.cc over miniz), pickle, safetensors and filelock say when a
file on disk fails the job, the network filesystem's stale handle (ESTALE), the forms of a full disk or quota the
errno rows (system.py) do not read, and /dev/shm as NCCL's and torch's shared-memory code report it.

Read before the errno space: "PytorchStreamWriter failed writing file data/3: file write failed" is the disk that
filled during a save, "unable to write to file </torch_...>: No space left on device" is /dev/shm, not the disk.

What a reader of the checkpoint says is decided by what it proves: a truncated or foreign file ("failed finding
central directory", "invalid load key", "Ran out of input", safetensors' header errors) is "checkpoint-corrupt"; the
writer failing mid-file is "disk-full"; torch 2.6's "Weights only load failed" for a global it does not allow is
the code's (torch.load's weights_only default changed: pass weights_only=False for a trusted file, or allow the
global), but its WeightsUnpickler refusing an opcode ("Unsupported operand 118", the 'v' of a git-lfs pointer) is a
file that is no checkpoint at all.
"""

from __future__ import annotations

import errno
import os
import re
from typing import List

from clustercheck.vocabulary.spaces import Row
from clustercheck.vocabulary.system import ERRNO_KINDS

TORCH = "pytorch/pytorch (torch 2.13.0 wheel; caffe2/serialize/inline_container.cc at 02b040c1) "
MINIZ = "miniz's mz_zip_get_error_string texts (\"failed finding central directory\", \"file write failed\")"
ESTALE = os.strerror(errno.ESTALE)          # glibc: "Stale file handle" (before 2.18: "Stale NFS file handle")

# The errno rows name ENOSPC and EDQUOT disk-full and do not name ESTALE: this space's forms must agree with them.
assert ERRNO_KINDS.get("ENOSPC") == ERRNO_KINDS.get("EDQUOT") == "disk-full", "system.py names ENOSPC otherwise"
assert ERRNO_KINDS.get("ESTALE", "stale-file") == "stale-file", "system.py names ESTALE another kind than storage.py"

ROWS: List[Row] = [
    # ---- torch.load: the zip reader (PyTorchStreamReader::valid, init), the legacy loader, pickle -----------------
    Row("storage", r"PytorchStreamReader failed (?:reading|checking|getting|retrieving|closing)|"
                   r"archive does not contain any files|file in archive is not in a subdirectory|"
                   r"Invalid magic number; corrupt file\?|unexpected EOF, expected \d+ more bytes\. The file might be "
                   r"corrupted|storage has wrong byte size: expected",
        "checkpoint-corrupt", "PytorchStreamReader",
        TORCH + "inline_container.cc PyTorchStreamReader::valid: \"PytorchStreamReader failed \" what info \": \" "
                "(\"reading zip archive: failed finding central directory\", \"reading file data/0: invalid header or "
                "archive is corrupted\"), init \"archive does not contain any files\"; " + MINIZ + "; "
                "torch/serialization.py _legacy_load \"Invalid magic number; corrupt file?\"; torch/csrc/"
                "serialization.cpp \"unexpected EOF, expected %d more bytes. The file might be corrupted.\""),
    Row("storage", r"UnpicklingError: (?:invalid load key|pickle data was truncated|could not find MARK|"
                   r"unpickling stack underflow)|invalid load key, '|"
                   r"^\s*(?:\[rank\d+\]:\s*)?EOFError: Ran out of input|"
                   r"WeightsUnpickler error: Unsupported operand \d+",
        "checkpoint-corrupt", "UnpicklingError",
        "CPython Modules/_pickle.c: \"invalid load key, '%c'.\", \"pickle data was truncated\", EOFError \"Ran out of "
        "input\" (an empty or cut file); " + TORCH + "torch/_weights_only_unpickler.py \"Unsupported operand %d\" "
        "(bytes that are no pickle: a git-lfs pointer's 'v' is 118)"),
    Row("storage", r"Weights only load failed|WeightsUnpickler error: Unsupported global|"
                   r"was not an allowed global by default|"
                   r"is a zip archive \(did you mean to use torch\.jit\.load\(\)\?\)|"
                   r"Attempting to deserialize object on CUDA device \d+ but torch\.cuda\.device_count\(\) is \d+",
        "code", "torch.load arguments",
        TORCH + "torch/serialization.py _get_wo_message: \"Weights only load failed. This file can still be loaded, to "
                "do so you have two options\" with the unpickler's \"GLOBAL %s was not an allowed global by "
                "default\" (torch 2.6 made weights_only=True the default); _legacy_load \"%s is a zip archive (did "
                "you mean to use torch.jit.load()?)\"; validate_cuda_device \"Attempting to deserialize object on "
                "CUDA device %d but torch.cuda.device_count() is %d. Please use torch.load with map_location\""),
    Row("storage", r"Attempting to deserialize object on (?:a )?CUDA device but torch\.cuda\.is_available\(\) is False",
        "cuda-setup", "torch.load sees no GPU",
        TORCH + "torch/serialization.py validate_cuda_device: \"Attempting to deserialize object on a CUDA device but "
                "torch.cuda.is_available() is False. If you are running on a CPU-only machine, please use torch.load "
                "with map_location=torch.device('cpu')\""),
    # ---- torch.save: the zip writer (ostream_write_func, PyTorchStreamWriter::valid, setup) ----------------------
    Row("storage", r"PytorchStreamWriter failed writing (?:file|central directory)|\bunexpected pos \d+ vs \d+",
        "disk-full", "PytorchStreamWriter",
        TORCH + "inline_container.cc PyTorchStreamWriter::valid: \"PytorchStreamWriter failed writing file %s: file "
                "write failed\" (the stream refused the bytes: a full disk or quota), ostream_write_func \"unexpected "
                "pos %d vs %d\" (a short write, then the next record's offset disagrees)"),
    Row("storage", r"Parent directory (?:of )?\S+ does not exist\.", "missing-file", "torch.save directory",
        TORCH + "inline_container.cc PyTorchStreamWriter::setup: \"Parent directory %s does not exist.\" (torch/csrc/"
                "jit: \"Parent directory of %s does not exist.\")"),
    # ---- safetensors (safetensors/src/tensor.rs SafeTensorError; bindings/python/src/lib.rs) -----------------------
    Row("storage", r"Error while deserializing header|Error while deserializing: |\b(?:HeaderTooLarge|HeaderTooSmall|"
                   r"InvalidHeaderLength|MetadataIncompleteBuffer|InvalidHeaderDeserialization)\b|"
                   r"incomplete metadata, file not fully covered|SafetensorError: (?:header too (?:large|small)|"
                   r"invalid header length|invalid JSON in header)",
        "checkpoint-corrupt", "SafetensorError",
        "huggingface/safetensors (24b0b285) bindings/python/src/lib.rs \"Error while deserializing header: %s\" "
        "with safetensors/src/tensor.rs SafeTensorError (Debug before 0.5: HeaderTooLarge, MetadataIncompleteBuffer, "
        "InvalidHeaderDeserialization; Display since: \"header too large\", \"incomplete metadata, file not fully "
        "covered\", \"invalid JSON in header: %s\")"),
    # ---- the network filesystem: ESTALE; filelock's lock nobody released --------------------------------------------
    Row("storage", rf"\[Errno {errno.ESTALE}\]|\bESTALE\b|(?i:{re.escape(ESTALE)})|(?i:stale NFS file handle)",
        "stale-file", "ESTALE",
        f"the platform's errno ESTALE ({errno.ESTALE}, os.strerror: {ESTALE!r}; glibc before 2.18 and Go's "
        "syscall: \"stale NFS file handle\")"),
    Row("storage", r"The file lock '[^'\n]*' could not be acquired", "file-lock", "filelock Timeout",
        "tox-dev/filelock src/filelock/_error.py Timeout.__str__: \"The file lock '%s' could not be acquired.\" (a "
        "lock left by a killed job on a shared filesystem, or another rank holding it)"),
    # ---- a full disk or quota in the forms the errno rows miss ---------------------------------------------------
    Row("storage", rf"\b{re.escape(os.strerror(errno.ENOSPC).lower())}\b|"
                   rf"\b{re.escape(os.strerror(errno.EDQUOT).lower())}\b|Not enough disk space\. Needed: ",
        "disk-full", "disk full (lowercase, datasets)",
        "Go's syscall errno texts (container runtimes, the hub's and the cloud's tools: \"write /x: no space left on "
        "device\", \"disk quota exceeded\"), huggingface/datasets builder.py download_and_prepare: \"Not enough disk "
        "space. Needed: %s (download: %s, generated: %s, post-processed: %s)\""),
    # ---- /dev/shm: NCCL's segment after torch's "Last error:", torch's shared-memory allocator, the DataLoader ----
    Row("storage", r"Error while (?:creating|attaching to) shared memory segment|failed to extend /dev/shm/\S+ to|"
                   r"unable to (?:write to file|allocate shared memory\(shm\) for file) </torch_|"
                   r"Couldn't allocate shared memory segment|"
                   r"dataloader's workers are out of shared memory\. Please try to raise your shared memory limit",
        "shm", "shared memory",
        "NVIDIA/nccl (5067397c) src/os/linux.cc: \"Error while %s shared memory segment %s (size %ld), error: %s "
        "(%d)\", \"Error: failed to extend %s to %ld bytes\" (torch's ncclSystemError repeats the last WARN after "
        "\"Last error:\", without NCCL's prefix); pytorch/tensorpipe transport/shm/context_impl.cc \"Couldn't "
        "allocate shared memory segment: \"; " + TORCH +
        "aten/src/ATen/MapAllocator.cpp \"unable to write to file <%s>: %s (%d)\", \"unable to allocate shared "
        "memory(shm) for file <%s>\"; torch/csrc/DataLoader.cpp \"DataLoader worker (pid %d) is killed by signal: "
        "Bus error. It is possible that dataloader's workers are out of shared memory. Please try to raise your "
        "shared memory limit.\""),
]
