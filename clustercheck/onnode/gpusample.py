"""Each GPU's clocks, power, temperature, throttle reasons and PCIe link, read while the device probe loads it.

pynvml (asked by PCI address, so in torch's order whatever CUDA_VISIBLE_DEVICES says), else `nvidia-smi -q`
read by indentation (slower: every 2 s). Standard library only; shipped with device_probe.py.
"""

import shutil
import subprocess
import threading

try:  # imported as part of the clustercheck package (the tests)
    from .gpuprobe import THROTTLE_BITS
except ImportError:  # shipped to a node
    from gpuprobe import THROTTLE_BITS


class Sampler(threading.Thread):
    """Each GPU's clocks, power, temperature, throttle reasons and PCIe link, read while the work runs:
    pynvml, else `nvidia-smi -q` (slower: every 2 s)."""

    def __init__(self, pcis):
        super().__init__(daemon=True)
        self.pcis = pcis      # torch's order (CUDA_VISIBLE_DEVICES applies): NVML is asked by PCI address
        self.count, self.samples, self.stop = len(pcis), {i: [] for i in range(len(pcis))}, threading.Event()

    def run(self):
        try:
            import pynvml   # optional: without NVIDIA's bindings the samples come from nvidia-smi
            pynvml.nvmlInit()
        except Exception:
            return self.run_smi()
        handles = {}
        for index, pci in enumerate(self.pcis):
            try:
                handles[index] = pynvml.nvmlDeviceGetHandleByPciBusId(pci.encode() if pci else b"")
            except Exception:
                pass
        while not self.stop.wait(0.5):
            for index, handle in handles.items():
                self.samples[index].append(nvml_sample(pynvml, handle))

    def run_smi(self):
        smi = shutil.which("nvidia-smi")
        while smi and not self.stop.wait(2.0):
            try:
                text = subprocess.run([smi, "-q"], stdout=subprocess.PIPE, timeout=10).stdout.decode(errors="replace")
            except Exception:
                return
            by_pci = dict(zip(smi_q_pcis(text), smi_q_samples(text)))
            for index, pci in enumerate(self.pcis):
                if pci in by_pci:
                    self.samples[index].append(by_pci[pci])


REASON_SECTIONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")
POWER_SECTIONS = ("GPU Power Readings", "Power Readings")     # before driver 530: "Power Readings"


def smi_q_pcis(text):
    """The GPUs' PCI addresses in `nvidia-smi -q` order ("GPU 00000000:18:00.0" headers)."""
    return [line.split()[1].upper() for line in text.splitlines() if line.startswith("GPU 0")]


def smi_q_samples(text):
    """One sample per GPU, in the sampler's shape, from `nvidia-smi -q` text (sections by indentation)."""
    gpus, path = [], []
    for line in text.splitlines():
        if line.startswith("GPU 0"):
            gpus.append({"throttle": []})
            path = []
            continue
        if not gpus or not line.strip():
            continue
        level = (len(line) - len(line.lstrip())) // 4
        key, sep, value = (part.strip() for part in line.strip().partition(":"))
        if not sep:
            path = path[:max(level - 1, 0)] + [key]
            continue
        section = path[:max(level - 1, 0)]
        _smi_field(gpus[-1], section, key, value)
    return gpus


def _smi_field(sample, section, key, value):
    number = value.split()[0] if value.split() else ""
    try:
        number = float(number.rstrip("x"))
    except ValueError:
        number = None
    if any(s in REASON_SECTIONS for s in section) and value == "Active":
        sample["throttle"].append("gpu_idle" if key == "Idle" else key.lower().replace(" ", "_"))
    elif section[-1:] == ["PCIe Generation"] and key in ("Max", "Current") and number is not None:
        sample["pcie_gen_max" if key == "Max" else "pcie_gen"] = int(number)
    elif section[-1:] == ["Link Width"] and key in ("Max", "Current") and number is not None:
        sample["pcie_width_max" if key == "Max" else "pcie_width"] = int(number)
    elif section[-1:] in (["Clocks"], ["Max Clocks"]) and key == "SM" and number is not None:
        sample["sm_mhz" if section[-1] == "Clocks" else "max_sm_mhz"] = int(number)
    elif any(s in POWER_SECTIONS for s in section) and number is not None:
        # the GPU's own readings, however deep the driver nests them (610: the limits under "GPU Ceiling Power
        # Limit"); "GPU Memory" and "Module Power Readings" (Grace boards: GPU, CPU and memory) are other things
        if key == "Instantaneous Power Draw":      # driver 570 and later: instantaneous and average apart
            sample["power_w"] = number
        elif key in ("Power Draw", "Average Power Draw"):
            sample.setdefault("power_w", number)
        elif key in ("Current Power Limit", "Enforced Power Limit", "Power Limit"):
            sample.setdefault("power_limit_w", number)
    elif section[-1:] == ["Temperature"] and key == "GPU Current Temp" and number is not None:
        sample["temperature_c"] = int(number)


def nvml_sample(pynvml, handle):
    """One reading; a field NVML will not give (NotSupported) is left out, the others kept."""
    fields = {"sm_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
              "max_sm_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
              "power_w": lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
              "power_limit_w": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0,
              "temperature_c": lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
              "throttle": lambda: [name for bit, name in sorted(THROTTLE_BITS.items())
                                   if pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle) & bit],
              "pcie_gen": lambda: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle),
              "pcie_gen_max": lambda: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle),
              "pcie_width": lambda: pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle),
              "pcie_width_max": lambda: pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle)}
    sample = {}
    for key, read_field in fields.items():
        try:
            sample[key] = read_field()
        except Exception:
            pass
    return sample
