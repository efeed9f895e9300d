"""NVML's error space (`nvmlReturn_t`, every NVML_ERROR_*) with the text nvmlErrorString gives, and nvidia-smi's
own failures and exit codes, which are NVML's numbers.

Sources: nvml.h `nvmlReturn_t` (the numbers, as nvidia-ml-py's pynvml lists them); NVIDIA DCGM's
nvml_error_strings.h (nvmlErrorString's texts); the nvidia-smi manual, RETURN VALUE (exit codes 2-15 are NVML's
codes); nvidia-smi's messages ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
"Failed to initialize NVML: %s", "Unable to determine the device handle for GPU %s: %s"). A text is read only
where NVML or nvidia-smi said it: "Not Found" or "Timeout" alone are anyone's words.
"""

from __future__ import annotations

import re
from typing import List

from clustercheck.vocabulary.spaces import Row

SETUP, HW = "cuda-setup", "gpu-hardware"
# number NAME|nvmlErrorString's text|kind
_TABLE = """
1 UNINITIALIZED|Uninitialized|cuda-setup
2 INVALID_ARGUMENT|Invalid Argument|cuda-setup
3 NOT_SUPPORTED|Not Supported|cuda-setup
4 NO_PERMISSION|Insufficient Permissions|cuda-setup
5 ALREADY_INITIALIZED|Already Initialized|cuda-setup
6 NOT_FOUND|Not Found|cuda-setup
7 INSUFFICIENT_SIZE|Insufficient Size|cuda-setup
8 INSUFFICIENT_POWER|Insufficient External Power|gpu-hardware
9 DRIVER_NOT_LOADED|Driver Not Loaded|cuda-setup
10 TIMEOUT|Timeout|cuda-setup
11 IRQ_ISSUE|Interrupt Request Issue|gpu-hardware
12 LIBRARY_NOT_FOUND|NVML Shared Library Not Found|cuda-setup
13 FUNCTION_NOT_FOUND|Function Not Found|cuda-setup
14 CORRUPTED_INFOROM|Corrupted infoROM|gpu-hardware
15 GPU_IS_LOST|GPU is lost|gpu-hardware
16 RESET_REQUIRED|GPU requires reset|gpu-hardware
17 OPERATING_SYSTEM|GPU access blocked by the operating system|cuda-setup
18 LIB_RM_VERSION_MISMATCH|Driver/library version mismatch|cuda-setup
19 IN_USE|In use by another client|cuda-setup
20 MEMORY|Insufficient Memory|cuda-setup
21 NO_DATA|No data|cuda-setup
22 VGPU_ECC_NOT_SUPPORTED|VGPU ECC not supported|cuda-setup
23 INSUFFICIENT_RESOURCES|Insufficient Resources|cuda-setup
24 FREQ_NOT_SUPPORTED|Frequency not supported|cuda-setup
25 ARGUMENT_VERSION_MISMATCH|Argument version mismatch|cuda-setup
26 DEPRECATED|Deprecated|cuda-setup
27 NOT_READY|Not ready|cuda-setup
28 GPU_NOT_FOUND|GPU not found|gpu-hardware
29 INVALID_STATE|Invalid state|cuda-setup
999 UNKNOWN|Unknown Error|cuda-setup
"""
# Where NVML (or nvidia-smi) says it: pynvml's NVMLError's str is the text alone, after its class name
_SAID = r"(?:Failed to initialize NVML|NVMLError\w*|(?i:nvml)[\w ]*(?:error|failed|returned)|Unable to determine " \
        r"the device handle for GPU ?[\w:.]*)\s*:?\s*"
_SOURCE = "nvml.h nvmlReturn_t NVML_ERROR_{name} ({number}); nvmlErrorString: {text!r} (DCGM nvml_error_strings.h)"


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _row(line: str) -> Row:
    head, text, kind = line.split("|")
    number, name = head.split(" ")
    forms = [rf"\bNVML_ERROR_{name}\b", rf"\bNVMLError_{_camel(name)}\b", _SAID + f"(?i:{re.escape(text)})"]
    if int(number) in range(2, 16):   # nvidia-smi's exit codes are NVML's numbers
        forms.append(rf"nvidia-smi\b[^\n]*(?:exit status|exit code|returned non-zero exit status)\s*{number}\b")
    return Row("nvml", "|".join(forms), kind, f"NVML_ERROR_{name}",
               _SOURCE.format(name=name, number=number, text=text))


ROWS: List[Row] = [_row(line) for line in _TABLE.strip().splitlines()]
# The driver's Xid events where a log carries them (NVIDIA's Xid catalogue): hardware, or an application's fault
_XID = "NVIDIA Xid catalogue (docs.nvidia.com/deploy/xid-errors): NVRM: Xid (PCI:%s): %d, ..."
ROWS += [
    Row("xid", r"NVRM: Xid \([^)]*\): (?:48|63|64|74|79|92|94|95|119|120|140)\b|GPU has fallen off the bus",
        HW, "Xid hardware", _XID + " (48 DBE, 63/64 row remapping, 74 NVLink, 79 off the bus, 94/95 ECC, 119/120 "
                                   "GSP)"),
    Row("xid", r"NVRM: Xid \([^)]*\): (?:13|31|43)\b", "cuda-error", "Xid application fault",
        _XID + " (13 graphics engine exception, 31 MMU fault, 43 channel stopped: the application's kernel)"),
]
ROWS += [
    Row("nvml", r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", SETUP,
        "nvidia-smi: no driver", "nvidia-smi: \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                                 "driver. Make sure that the latest NVIDIA driver is installed and running.\""),
    Row("nvml", r"NVML_SUCCESS == r INTERNAL ASSERT FAILED|NVML_SUCCESS == \w+\(", SETUP, "NVML call in torch",
        "pytorch c10/cuda/CUDACachingAllocator.cpp: TORCH_INTERNAL_ASSERT(NVML_SUCCESS == r) on an NVML call"),
]
