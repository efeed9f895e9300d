"""clustercheck device probe: what each compute device of this node does under load, as one JSON document.

Shipped to every node and run with the interpreter that trains there; needs torch. Every node
starts its measurements at the same moment (--start-at, seconds since the epoch), so devices that
share something (a host's cores, a PCIe switch, a power budget) are measured under the same load.

- CUDA: every GPU at once (a thread each): a fixed-shape GEMM in each training dtype (TFLOPS; fp8
  where every GPU of the node has it: compute capability 8.9 and later, torch._scaled_mm),
  a device-to-device copy, pinned host-to-device and device-to-host copies (GB/s), and the
  peer-to-peer copy matrix between the node's GPUs; while they run, each GPU's clocks, power,
  temperature, throttle reasons and PCIe generation and width, current against maximum (pynvml).
- CPU only: the node is one device: an fp32 GEMM on one thread (GFLOPS) and a memory copy (GB/s).
- Every device multiplies the same seeded inputs; the SHA-256 of the result's bytes goes into the
  answer, so devices of one model can be compared bit for bit (silent data corruption).

It never raises: what could not be measured is said in "error" with the reason.

    python device_probe.py --seconds 8 [--start-at EPOCH] [--size N]
"""

import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time

try:  # imported as part of the clustercheck package (the tests)
    from .gpusample import Sampler
    from .nodelib import emit_json, sleep_until
except ImportError:  # shipped to a node: inline_command registers the helpers beside this program
    from gpusample import Sampler
    from nodelib import emit_json, sleep_until

CHECK_SIZE = 256          # the bit-for-bit check: small, one thread, the same on every device of a model
GPU_SIZE = 8192           # GEMM shape on a GPU (n x n x n): large enough to reach its peak
CPU_SIZE = 512
GPU_DTYPES = ("bfloat16", "float16", "tf32", "float32")
FP8 = "float8_e4m3fn"     # e4m3 with unit scales into bf16: what training's fp8 matmuls (Transformer Engine) use
COPY_MIB = {"cuda": 1024, "cpu": 256}
# Test-only fault, set on one sandbox node: its devices return one wrong element (silent data corruption).
WRONG_BITS = "CLUSTERCHECK_TEST_WRONG_BITS"


DCGM_DEADLINE_S = {1: 120, 2: 900, 3: 2700}   # dcgmi diag -r 1 takes seconds, -r 3 up to half an hour


def parse_args(argv):
    args = {"seconds": 8.0, "start_at": 0.0, "size": 0, "dcgm": 0}
    for i, arg in enumerate(argv):
        key = arg.lstrip("-").replace("-", "_")
        if key in args and i + 1 < len(argv):
            args[key] = float(argv[i + 1])
    return args


def checksum(torch, device, dtype):
    """SHA-256 of A @ B for seeded inputs: the same bits on every healthy device of one model."""
    generator = torch.Generator().manual_seed(20261124)
    a = torch.randn(CHECK_SIZE, CHECK_SIZE, generator=generator).to(device=device, dtype=dtype)
    b = torch.randn(CHECK_SIZE, CHECK_SIZE, generator=generator).to(device=device, dtype=dtype)
    result = multiply(torch, a, b)()
    if isinstance(result, tuple):     # torch._scaled_mm before torch 2.5: (result, amax)
        result = result[0]
    result = result.float().cpu().contiguous()
    if os.environ.get(WRONG_BITS):
        result[7, 7] += 1.0
    return hashlib.sha256(bytes(result.view(torch.uint8).flatten().tolist())).hexdigest()[:16]   # no numpy needed


def timed(run, sync, budget_s, least=3):
    """Seconds per call of run(): warmed up, then repeated for about budget_s."""
    run()
    sync()
    calls, start = 0, time.perf_counter()
    while calls < least or time.perf_counter() - start < budget_s:
        run()
        calls += 1
        if calls % 4 == 0 or calls < least:
            sync()
    sync()
    return (time.perf_counter() - start) / calls


def gemm_rate(torch, device, dtype, size, budget_s, sync):
    """FLOP/s of an n x n x n matmul into a preallocated result."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    per_call = timed(multiply(torch, a, b), sync, budget_s)
    return 2.0 * size ** 3 / per_call


def multiply(torch, a, b):
    """A call computing a @ b into a result allocated once. fp8 goes through torch._scaled_mm (unit scales, bf16
    out), its second operand column-major as cuBLASLt takes it: laid out here, outside the timed call."""
    if a.dtype != getattr(torch, FP8, None):
        out = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        return lambda: torch.mm(a, b, out=out)
    b = b.t().contiguous().t()
    one = torch.ones((), device=a.device)
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def fp8_missing(torch, count):
    """Why this node's GPUs are not measured in fp8 ("" when every one is): it takes compute capability 8.9 or
    later (Ada, Hopper, Blackwell) and a torch with float8 and _scaled_mm; ROCm's fp8 is another format."""
    if not hasattr(torch, FP8) or not hasattr(torch, "_scaled_mm"):
        return "torch %s has no float8 matmul" % torch.__version__
    if getattr(torch.version, "hip", None):
        return "ROCm's fp8 (e4m3fnuz) is not measured"
    for index in range(count):
        try:
            major, minor = torch.cuda.get_device_capability(index)
        except Exception as exc:    # that GPU's own thread says what is wrong with it
            return "GPU %d's compute capability could not be read: %s" % (index, str(exc).splitlines()[0][:100])
        if (major, minor) < (8, 9):
            return "GPU %d has compute capability %d.%d (fp8 matmul takes 8.9 or later)" % (index, major, minor)
    return ""


def copy_rate(torch, source, target, nbytes, budget_s, sync):
    """Bytes/s of copying a buffer of nbytes from source to target."""
    src = source()
    dst = target()
    per_call = timed(lambda: dst.copy_(src, non_blocking=True), sync, budget_s)
    return nbytes / per_call


def measure_cpu(torch, args):
    """The node as one device, on one thread: a node's share of its CPU shows in proportion (OpenMP's threads
    spin and yield when a host is oversubscribed, which the sandbox's nodes sharing two cores always are)."""
    torch.set_num_threads(1)
    budget = args["seconds"] / 2
    size = int(args["size"] or CPU_SIZE)
    nbytes = COPY_MIB["cpu"] * 2 ** 20
    no_sync = lambda: None  # noqa: E731
    device = {"index": 0, "kind": "cpu", "name": cpu_model(), "threads": torch.get_num_threads(),
              "gemm_flops": {"float32": gemm_rate(torch, "cpu", torch.float32, size, budget, no_sync)},
              "copy_bytes_s": copy_rate(torch, lambda: torch.ones(nbytes // 4), lambda: torch.empty(nbytes // 4),
                                        nbytes, budget, no_sync)}
    device["checksum"] = {"float32": checksum(torch, "cpu", torch.float32)}
    return [device]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def dtype_of(torch, name):
    return torch.float32 if name == "tf32" else getattr(torch, FP8 if name == "fp8" else name)


def together(phase, timeout):
    """Wait for every GPU's thread; False once one has failed (the barrier broken): TF32 is a process-wide
    switch, so what is measured after that could be in the wrong precision and is left out."""
    try:
        phase.wait(timeout=timeout)
        return True
    except threading.BrokenBarrierError:
        return False


def measure_gpu(torch, index, args, share, phase, dtypes=GPU_DTYPES):
    """One GPU's figures; runs in its own thread, all GPUs at once. `phase` (a Barrier of every GPU's thread)
    keeps them on one dtype at a time: TF32 is a process-wide switch, and the GPUs are loaded alike."""
    device = "cuda:%d" % index
    found = {"index": index, "kind": "cuda", "name": "?", "gemm_flops": {}, "checksum": {}}
    wait = 2 * share * 4 + 60
    try:
        found["name"] = torch.cuda.get_device_name(index)
        pin_to_local_cpus(pci_address(torch, index))
        with torch.cuda.device(index):
            sync = torch.cuda.synchronize
            size = int(args["size"] or GPU_SIZE)
            for name in dtypes:
                if not together(phase, wait):
                    found["skipped"] = "another GPU's thread failed: the rest of the dtypes were not measured"
                    break
                torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
                try:
                    found["gemm_flops"][name] = gemm_rate(torch, device, dtype_of(torch, name), size, share, sync)
                    found["checksum"][name] = checksum(torch, device, dtype_of(torch, name))
                except (RuntimeError, TypeError) as exc:   # fp8 is optional: a build without its kernels (or
                    # another _scaled_mm signature) says nothing of the GPU
                    if name != "fp8":
                        raise
                    found["gemm_flops"].pop(name, None)
                    found["not_measured"] = {"fp8": ("torch._scaled_mm failed: %s" % exc).splitlines()[0][:200]}
                if not together(phase, wait):
                    found["gemm_flops"].pop(name, None)
                    found["checksum"].pop(name, None)
            torch.backends.cuda.matmul.allow_tf32 = False
            nbytes = COPY_MIB["cuda"] * 2 ** 20
            on_gpu = lambda: torch.empty(nbytes, dtype=torch.uint8, device=device)  # noqa: E731
            pinned = lambda: torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)  # noqa: E731
            found["copy_bytes_s"] = copy_rate(torch, on_gpu, on_gpu, nbytes, share, sync)
            found["h2d_bytes_s"] = copy_rate(torch, pinned, on_gpu, nbytes, share, sync)
            found["d2h_bytes_s"] = copy_rate(torch, on_gpu, pinned, nbytes, share, sync)
    except Exception as exc:  # one GPU's failure is that GPU's result (and the others go on without it)
        phase.abort()
        found["error"] = ("%s: %s" % (type(exc).__name__, exc))[:300]
    return found


def pin_to_local_cpus(pci):
    """Run this thread on the CPUs of the GPU's own NUMA node, so its pinned buffers are local (sysfs
    local_cpulist; nothing where it cannot be read)."""
    try:
        path = "/sys/bus/pci/devices/%s/local_cpulist" % pci[4:].lower()
        cpus = set()
        for part in open(path).read().strip().split(","):
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
        if cpus:
            os.sched_setaffinity(0, cpus)
    except (OSError, ValueError, AttributeError):
        pass


def pci_address(torch, index):
    """"00000000:18:00.0" as nvidia-smi writes it, from torch's device properties ("" where it has none)."""
    try:
        props = torch.cuda.get_device_properties(index)
        return "%08X:%02X:%02X.0" % (props.pci_domain_id, props.pci_bus_id, props.pci_device_id)
    except Exception:
        return ""


def peer_matrix(torch, count, share):
    """Bytes/s of copying 256 MiB from GPU i to GPU j, every ordered pair (None where it failed)."""
    nbytes = 256 * 2 ** 20
    matrix = [[None] * count for _ in range(count)]
    for i in range(count):
        for j in range(count):
            if i == j:
                continue
            try:
                both = lambda i=i, j=j: (torch.cuda.synchronize(i), torch.cuda.synchronize(j))  # noqa: E731
                matrix[i][j] = copy_rate(torch, lambda: torch.empty(nbytes, dtype=torch.uint8, device="cuda:%d" % i),
                                         lambda: torch.empty(nbytes, dtype=torch.uint8, device="cuda:%d" % j),
                                         nbytes, share, both)
            except Exception:
                matrix[i][j] = None
    return matrix


def measure_gpus(torch, args):
    count = torch.cuda.device_count()
    no_fp8 = fp8_missing(torch, count)
    dtypes = GPU_DTYPES + (() if no_fp8 else ("fp8",))
    share = args["seconds"] / (len(dtypes) + 4)
    pair_share = max(0.05, args["seconds"] / 4 / max(1, count * (count - 1)))
    pcis = [pci_address(torch, index) for index in range(count)]
    sampler = Sampler(pcis)
    sampler.start()
    results = [None] * count
    phase = threading.Barrier(count)

    def run(i):
        results[i] = measure_gpu(torch, i, args, share, phase, dtypes)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=len(dtypes) * (4 * share + 120) + 60)
    sampler.stop.set()
    sampler.join(2)
    for index in range(count):
        found = results[index] or {"index": index, "kind": "cuda", "name": "?", "error": "no answer in time"}
        found["samples"] = sampler.samples[index][-200:]
        found["pci_bus_id"] = pcis[index]
        if no_fp8:
            found.setdefault("not_measured", {})["fp8"] = no_fp8
        results[index] = found
    return results, (peer_matrix(torch, count, pair_share) if count > 1 else [])


NVBANDWIDTH_TESTS = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce")
NVBANDWIDTH_DEADLINE_S = 180


def run_nvbandwidth():
    """nvbandwidth's copy-engine tests where the tool is installed (its text, read by the controller)."""
    tool = shutil.which("nvbandwidth")
    if not tool:
        return None
    argv = [tool] + [arg for test in NVBANDWIDTH_TESTS for arg in ("-t", test)]
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=NVBANDWIDTH_DEADLINE_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "nvbandwidth did not finish: %s" % exc
    return done.stdout.decode(errors="replace")[-200000:]


def run_dcgm(level):
    """dcgmi diag at that level, after the measurements (it loads the GPUs itself); None where DCGM is not
    installed. Not under MIG: the diagnostic needs whole GPUs."""
    dcgmi = shutil.which("dcgmi")
    if not level or not dcgmi:
        return None
    level = int(level)
    try:
        import pynvml   # optional: without NVIDIA's bindings MIG is not asked, dcgmi still runs
        pynvml.nvmlInit()
        for index in range(pynvml.nvmlDeviceGetCount()):
            if pynvml.nvmlDeviceGetMigMode(pynvml.nvmlDeviceGetHandleByIndex(index))[0] == 1:
                return {"level": level, "skipped": "MIG is enabled on GPU %d (the diagnostic needs whole GPUs)" % index}
    except Exception:
        pass
    try:
        done = subprocess.run([dcgmi, "diag", "-r", str(level), "-j"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=DCGM_DEADLINE_S.get(level, 120))
    except subprocess.TimeoutExpired:
        return {"level": level, "skipped": "no answer within %d s" % DCGM_DEADLINE_S.get(level, 120)}
    except OSError as exc:
        return {"level": level, "skipped": "could not start dcgmi: %s" % exc}
    out = done.stdout.decode(errors="replace")
    return {"level": level, "exit": done.returncode, "output": out[-200000:],
            "stderr": done.stderr.decode(errors="replace")[-2000:]}


def nvidia_gpus():
    """The GPUs the NVIDIA driver lists (/proc/driver/nvidia/gpus), whatever torch sees; 0 without the driver."""
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def probe(argv):
    args = parse_args(argv)
    doc = {"schema": 1, "started": time.time()}
    try:
        import torch   # optional: a node without it says so in its document
    except Exception as exc:
        doc["error"] = ("import torch: %s: %s" % (type(exc).__name__, exc))[:300]
        return doc
    doc["torch"] = torch.__version__
    sleep_until(args["start_at"], most=120)
    doc["measured_at"] = time.time()
    driver_gpus = nvidia_gpus()
    try:
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if driver_gpus and not visible:
            doc["error"] = ("the NVIDIA driver lists %d GPU(s) but torch %s cannot use any (a CPU-only wheel, a "
                            "driver too old for its CUDA, or CUDA_VISIBLE_DEVICES)" % (driver_gpus, torch.__version__))
            return doc
        doc["driver_gpus"] = driver_gpus
        doc["visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible:
            doc["kind"], doc["cuda"] = "cuda", torch.version.cuda
            doc["devices"], doc["peers_bytes_s"] = measure_gpus(torch, args)
            doc["nvbandwidth"] = run_nvbandwidth()
            doc["dcgm"] = run_dcgm(args["dcgm"])
        else:
            doc["kind"] = "cpu"
            doc["devices"] = measure_cpu(torch, args)
    except Exception as exc:
        doc["error"] = ("%s: %s" % (type(exc).__name__, exc))[:300]
    doc["finished"] = time.time()
    return doc


def main():
    emit_json(lambda: probe(sys.argv[1:]))
    # no interpreter teardown: a measuring thread still in native code (a hung GPU) would be unwound and abort
    os._exit(0)


if __name__ == "__main__":
    main()
