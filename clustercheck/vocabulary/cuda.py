"""CUDA's error space: the runtime's cudaError_t (every code, its name and number, and the text
cudaGetErrorString gives for the ones training logs show) and the driver's CUresult names, which share the
numbers. Source: NVIDIA CUDA Runtime API reference, `enum cudaError` (driver_types.h), and CUDA Driver API
`CUresult` (cuda.h); the texts as torch prints them ("CUDA error: <text>", "cuda runtime error (N) : <text>").

Each code belongs to a family, and the family is the kind of failure (kinds.py): memory, setup (the driver,
the device's visibility or state), build (kernels not made for this GPU), hardware, kernel (a kernel failed).
"""

from __future__ import annotations

import re
from typing import Dict, NamedTuple, Optional


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
ERRORS = []
for _row in _TABLE.strip().splitlines():
    _head, _kind = _row.split("|")
    _number, _name, _text = _head.split(" ", 2)
    ERRORS.append(CudaError(int(_number), "cudaError" + _name, "" if _text == "-" else _text, _kind))
BY_NUMBER: Dict[int, CudaError] = {e.number: e for e in ERRORS}
BY_NAME: Dict[str, CudaError] = {e.name.lower(): e for e in ERRORS}
# The driver's CUresult names where they are not the runtime's name in upper snake case (same numbers).
DRIVER_NAMES = {"OUT_OF_MEMORY": 2, "NOT_INITIALIZED": 3, "DEINITIALIZED": 4, "NO_BINARY_FOR_GPU": 209,
                "LAUNCH_FAILED": 719, "INVALID_CONTEXT": 201, "INVALID_IMAGE": 200, "ECC_UNCORRECTABLE": 214,
                "NVLINK_UNCORRECTABLE": 220, "ASSERT": 710}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name[len("cudaError"):]).upper()


for _error in ERRORS:
    DRIVER_NAMES.setdefault(_snake(_error.name), _error.number)
_TEXTS = sorted(((e.text.lower().rstrip("."), e) for e in ERRORS if len(e.text) > 12), key=lambda t: -len(t[0]))


def by_text(text: str) -> Optional[CudaError]:
    """The error whose cudaGetErrorString text starts `text` ("an illegal memory access was encountered ...")."""
    lowered = text.lower().strip()
    return next((e for t, e in _TEXTS if lowered.startswith(t)), None)


def find(line: str) -> Optional[CudaError]:
    """The CUDA error a line shows, in any of the forms torch, the driver, NCCL and cuBLAS print it."""
    match = re.search(r"\b(cudaError\w+)", line)
    if match and match.group(1).lower() in BY_NAME:
        return BY_NAME[match.group(1).lower()]
    match = re.search(r"\bCUDA_ERROR_([A-Z_]+)", line)
    if match and match.group(1) in DRIVER_NAMES:
        return BY_NUMBER.get(DRIVER_NAMES[match.group(1)])
    match = re.search(r"cuda runtime error \((\d+)\)", line, re.I) or re.search(r"CUDA error (\d+)\b", line)
    if match and int(match.group(1)) in BY_NUMBER:
        return BY_NUMBER[int(match.group(1))]
    match = re.search(r"(?:CUDA (?:driver )?error|Cuda failure|CUDA failure|cuda runtime error \(\d+\))\s*:?\s*'?([^'\n]+)",
                      line, re.I)
    if match and by_text(match.group(1)):
        return by_text(match.group(1))
    if re.search(r"CUBLAS_STATUS_EXECUTION_FAILED|CUBLAS_STATUS_INTERNAL_ERROR|CUDNN_STATUS_EXECUTION_FAILED", line):
        return BY_NUMBER[719]    # cuBLAS's / cuDNN's kernel failed: the launch failure family
    if re.search(r"CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED", line):
        return BY_NUMBER[2]
    if re.search(r"CUBLAS_STATUS_ARCH_MISMATCH|CUDNN_STATUS_ARCH_MISMATCH", line):
        return BY_NUMBER[209]
    return None
