"""CUDA's error space: the runtime's cudaError_t (every code, its name and number, and the text
cudaGetErrorString gives for the ones training logs show) and the driver's CUresult names, which share the
numbers. Source: NVIDIA CUDA Runtime API reference, `enum cudaError` (driver_types.h), and CUDA Driver API
`CUresult` (cuda.h); the texts as torch prints them ("CUDA error: <text>", "cuda runtime error (N) : <text>").

Each code belongs to a family, and the family is the kind of failure (kinds.py): memory, setup (the driver,
the device's visibility or state), build (kernels not made for this GPU), hardware, kernel (a kernel failed).
Each code is one row of the table (table.py), matching it in every form the stack prints it.
"""

from __future__ import annotations

import re
from typing import Dict, List, NamedTuple

from clustercheck.vocabulary.spaces import Row


class CudaError(NamedTuple):
    number: int
    name: str           # cudaErrorIllegalAddress
    text: str           # cudaGetErrorString's, "" where logs never show it
    kind: str           # kinds.py


SETUP, BUILD, HW, KERNEL, OOM = "cuda-setup", "cuda-build", "gpu-hardware", "cuda-error", "oom"
_TABLE = """
1 InvalidValue invalid argument|cuda-error
2 MemoryAllocation out of memory|oom
3 InitializationError initialization error|cuda-setup
4 CudartUnloading driver shutting down|cuda-setup
34 StubLibrary CUDA driver is a stub library|cuda-setup
35 InsufficientDriver CUDA driver version is insufficient for CUDA runtime version|cuda-setup
36 CallRequiresNewerDriver API call is not supported in the installed CUDA driver|cuda-setup
46 DevicesUnavailable CUDA-capable device(s) is/are busy or unavailable|cuda-setup
49 IncompatibleDriverContext incompatible driver context|cuda-setup
98 InvalidDeviceFunction invalid device function|cuda-build
100 NoDevice no CUDA-capable device is detected|cuda-setup
101 InvalidDevice invalid device ordinal|cuda-setup
127 StartupFailure startup failure in cuda runtime|cuda-setup
200 InvalidKernelImage device kernel image is invalid|cuda-build
201 DeviceUninitialized invalid device context|cuda-setup
209 NoKernelImageForDevice no kernel image is available for execution on the device|cuda-build
214 ECCUncorrectable uncorrectable ECC error encountered|gpu-hardware
216 DeviceAlreadyInUse -|cuda-setup
217 PeerAccessUnsupported peer access is not supported between these two devices|cuda-setup
218 InvalidPtx a PTX JIT compilation failed|cuda-build
220 NvlinkUncorrectable uncorrectable NVLink error detected during the execution|gpu-hardware
221 JitCompilerNotFound PTX JIT compiler library not found|cuda-build
222 UnsupportedPtxVersion the provided PTX was compiled with an unsupported toolchain.|cuda-build
223 JitCompilationDisabled PTX JIT compilation was disabled|cuda-build
302 SharedObjectSymbolNotFound shared object symbol not found|cuda-build
303 SharedObjectInitFailed shared object initialization failed|cuda-setup
304 OperatingSystem OS call failed or operation not supported on this OS|cuda-setup
400 InvalidResourceHandle invalid resource handle|cuda-error
600 NotReady device not ready|cuda-error
700 IllegalAddress an illegal memory access was encountered|cuda-error
701 LaunchOutOfResources too many resources requested for launch|cuda-error
702 LaunchTimeout the launch timed out and was terminated|cuda-error
709 ContextIsDestroyed context is destroyed|cuda-error
710 Assert device-side assert triggered|cuda-error
714 HardwareStackError hardware stack error|gpu-hardware
715 IllegalInstruction an illegal instruction was encountered|cuda-error
716 MisalignedAddress misaligned address|cuda-error
717 InvalidAddressSpace operation not supported on global/shared address space|cuda-error
718 InvalidPc invalid program counter|cuda-error
719 LaunchFailure unspecified launch failure|cuda-error
720 CooperativeLaunchTooLarge -|cuda-error
800 NotPermitted operation not permitted|cuda-setup
801 NotSupported operation not supported|cuda-setup
802 SystemNotReady system not yet initialized|cuda-setup
803 SystemDriverMismatch system has unsupported display driver / cuda driver combination|cuda-setup
804 CompatNotSupportedOnDevice forward compatibility was attempted on non supported HW|cuda-setup
805 MpsConnectionFailed -|cuda-setup
909 Timeout wait operation timed out|cuda-error
999 Unknown unknown error|cuda-error
"""
# Codes that name a failed call (its argument, its handle, or nothing known), not a kernel's fault or the GPU's:
# where NCCL's CUDACHECK reports one ("Cuda failure 1 'invalid argument'", "Cuda failure 999 'unknown error'",
# checks.h), the call was NCCL's own (its transports' setup: CUDA IPC handles, cuMem, P2P), so the failure is
# NCCL's (lookup.py's context). A kernel's fault NCCL reports (700-720) stays the GPU's.
CALL_ERRORS = {"cudaErrorInvalidValue", "cudaErrorInvalidResourceHandle", "cudaErrorUnknown"}
ERRORS: List[CudaError] = []
for _row in _TABLE.strip().splitlines():
    _head, _kind = _row.split("|")
    _number, _name, _text = _head.split(" ", 2)
    ERRORS.append(CudaError(int(_number), "cudaError" + _name, "" if _text == "-" else _text, _kind))
# The driver's CUresult names where they are not the runtime's name in upper snake case (same numbers).
_DRIVER_ALIASES = {2: ["OUT_OF_MEMORY"], 3: ["NOT_INITIALIZED"], 4: ["DEINITIALIZED"], 209: ["NO_BINARY_FOR_GPU"],
                   719: ["LAUNCH_FAILED"], 201: ["INVALID_CONTEXT"], 200: ["INVALID_IMAGE"],
                   214: ["ECC_UNCORRECTABLE"], 220: ["NVLINK_UNCORRECTABLE"], 710: ["ASSERT"]}
_SAID = r"(?:CUDA (?:driver )?error|Cuda failure|CUDA failure|cuda runtime error \(\d+\))\s*:?\s*'?"
SOURCE = "CUDA Runtime API enum cudaError (driver_types.h), cudaGetErrorString; Driver API CUresult (cuda.h)"


def _snake(name: str) -> str:
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name[len("cudaError"):]).upper()


def _row(error: CudaError) -> Row:
    names = [_snake(error.name)] + _DRIVER_ALIASES.get(error.number, [])
    forms = [rf"\b{error.name}\b", rf"\bCUDA_ERROR_(?:{'|'.join(names)})\b",
             rf"(?i:cuda runtime error) \({error.number}\)", rf"CUDA error {error.number}\b",
             rf"Cuda failure {error.number}\b"]     # NCCL 2.19+: "Cuda failure %d '%s'" (its WARN, torch's Last error)
    if len(error.text) > 12:     # a text short enough to be any word is read only by name and number
        forms.append(rf"(?i:{_SAID}{re.escape(error.text.rstrip('.'))})")
    if error.text:               # c10/cuda/CUDAFunctions.cpp: "Error %d: %s"
        forms.append(rf"\bError {error.number}: {re.escape(error.text.rstrip('.'))}")
    return Row("cuda", "|".join(forms), error.kind, error.name, SOURCE)


ROWS: List[Row] = [_row(error) for error in ERRORS]
BY_NAME: Dict[str, CudaError] = {e.name: e for e in ERRORS}
