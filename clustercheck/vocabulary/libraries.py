"""The CUDA libraries' status codes (cuBLAS, cuDNN, cuFFT, cuSOLVER, cuRAND), each code a row, and torch's
`CUDA initialization:` warnings, which are the cause where they say the devices were set to zero.

Sources: cublas_api.h `cublasStatus_t`, cudnn_graph.h (cudnn.h before 9) `cudnnStatus_t`, cufft.h `cufftResult`,
cusolver_common.h `cusolverStatus_t`, curand.h `curandStatus_t`; pytorch c10/cuda/CUDAFunctions.cpp
(device_count_impl: "CUDA initialization: %s ... Setting the available devices to be zero.") and
torch/cuda/__init__.py (_check_driver: "Found no NVIDIA driver on your system", "The NVIDIA driver on your system
is too old").
"""

from __future__ import annotations

from typing import List

from clustercheck.vocabulary.spaces import Row

# library, header, the status names (without their prefix) and the kind each leads to
_STATUS = {
    ("CUBLAS_STATUS_", "cublas_api.h cublasStatus_t"): {
        "NOT_INITIALIZED": "oom",          # cublasCreate could not allocate its workspace: memory held or exhausted
        "ALLOC_FAILED": "oom", "INVALID_VALUE": "cuda-error", "ARCH_MISMATCH": "cuda-build",
        "MAPPING_ERROR": "cuda-error", "EXECUTION_FAILED": "cuda-error", "INTERNAL_ERROR": "cuda-error",
        "NOT_SUPPORTED": "cuda-build", "LICENSE_ERROR": "cuda-setup"},
    ("CUDNN_STATUS_", "cudnn_graph.h cudnnStatus_t"): {
        "NOT_INITIALIZED": "cuda-setup", "ALLOC_FAILED": "oom", "BAD_PARAM": "code", "INTERNAL_ERROR": "cuda-error",
        "INVALID_VALUE": "cuda-error", "ARCH_MISMATCH": "cuda-build", "MAPPING_ERROR": "cuda-error",
        "EXECUTION_FAILED": "cuda-error", "NOT_SUPPORTED": "code", "LICENSE_ERROR": "cuda-setup",
        "RUNTIME_PREREQUISITE_MISSING": "cuda-setup", "VERSION_MISMATCH": "cuda-setup",
        "SUBLIBRARY_VERSION_MISMATCH": "cuda-setup", "SUBLIBRARY_LOADING_FAILED": "loader"},
    ("CUFFT_", "cufft.h cufftResult"): {
        "INVALID_PLAN": "code", "ALLOC_FAILED": "oom", "INVALID_TYPE": "code", "INVALID_VALUE": "code",
        "INTERNAL_ERROR": "cuda-error", "EXEC_FAILED": "cuda-error", "SETUP_FAILED": "cuda-setup",
        "INVALID_SIZE": "code", "INCOMPLETE_PARAMETER_LIST": "code", "INVALID_DEVICE": "cuda-setup",
        "NO_WORKSPACE": "code", "NOT_IMPLEMENTED": "code", "NOT_SUPPORTED": "code"},
    ("CUSOLVER_STATUS_", "cusolver_common.h cusolverStatus_t"): {
        "NOT_INITIALIZED": "cuda-setup", "ALLOC_FAILED": "oom", "INVALID_VALUE": "code",
        "ARCH_MISMATCH": "cuda-build", "MAPPING_ERROR": "cuda-error", "EXECUTION_FAILED": "cuda-error",
        "INTERNAL_ERROR": "cuda-error", "MATRIX_TYPE_NOT_SUPPORTED": "code", "NOT_SUPPORTED": "code"},
    ("CURAND_STATUS_", "curand.h curandStatus_t"): {
        "VERSION_MISMATCH": "cuda-setup", "NOT_INITIALIZED": "cuda-setup", "ALLOCATION_FAILED": "oom",
        "TYPE_ERROR": "code", "OUT_OF_RANGE": "code", "LENGTH_NOT_MULTIPLE": "code",
        "DOUBLE_PRECISION_REQUIRED": "cuda-build", "LAUNCH_FAILURE": "cuda-error",
        "PREEXISTING_FAILURE": "cuda-error", "INITIALIZATION_FAILED": "cuda-setup", "ARCH_MISMATCH": "cuda-build",
        "INTERNAL_ERROR": "cuda-error"},
}
ROWS: List[Row] = [Row("cuda-libs", rf"\b{prefix}{name}\b", kind, prefix + name, f"NVIDIA {header}")
                   for (prefix, header), names in _STATUS.items() for name, kind in names.items()]

_INIT = "pytorch c10/cuda/CUDAFunctions.cpp device_count_impl, torch/cuda/__init__.py _check_driver: "
ROWS += [
    Row("cuda-init", r"CUDA initialization: (?:The NVIDIA driver on your system is too old|CUDA driver version is "
                     r"insufficient)|The NVIDIA driver on your system is too old \(found version", "cuda-setup",
        "driver too old", _INIT + "\"The NVIDIA driver on your system is too old (found version %d)\"", warns=True),
    Row("cuda-init", r"Found no NVIDIA driver on your system|CUDA driver initialization failed, you might not have a "
                     r"CUDA gpu|No CUDA GPUs are available", "cuda-setup", "no driver",
        _INIT + "\"Found no NVIDIA driver on your system\"", warns=True),
    Row("cuda-init", r"Unexpected error from cudaGetDeviceCount\(\)", "cuda-setup", "cudaGetDeviceCount",
        _INIT + "\"CUDA initialization: Unexpected error from cudaGetDeviceCount(). ... Error %d: %s\"", via="cuda",
        warns=True),
    Row("cuda-init", r"Setting the available devices to be zero", "cuda-setup", "devices set to zero",
        _INIT + "\"CUDA initialization: %s ... Setting the available devices to be zero.\"", warns=True),
]
