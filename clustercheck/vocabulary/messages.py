"""The spaces whose entries are messages, each taken from the project that prints it: the dynamic loader (glibc),
the Hugging Face hub, DeepSpeed's config, torch.distributed's store, rendezvous and watchdog (torchelastic of every
version), Python's import machinery, torch's own checks (DDP's reducer, load_state_dict, devices, shapes), SSH.
Each row cites the file (or function) whose message it reads. The schedulers' messages (Slurm, PBS, LSF) are
scheduler.py's, the MPI launchers' mpi.py's."""

from __future__ import annotations

from typing import List

from clustercheck.vocabulary.spaces import Row

TORCH = "pytorch/pytorch "
DS = "deepspeedai/DeepSpeed deepspeed/"
ROWS: List[Row] = [
    # ---- the dynamic loader (glibc elf/dl-load.c, elf/dl-version.c, elf/dl-lookup.c) ------------------------------
    Row("loader", r"cannot open shared object file", "loader", "cannot open shared object file",
        "glibc elf/dl-load.c: \"%s: cannot open shared object file: No such file or directory\""),
    Row("loader", r"version [`']GLIBC(?:XX)?_[\d.]+' not found|version [`'][\w.]+' not found \(required by",
        "loader", "version not found", "glibc elf/dl-version.c: \"version `%s' not found (required by %s)\""),
    Row("loader", r"undefined symbol: \S+", "loader", "undefined symbol",
        "glibc elf/dl-lookup.c: \"%s: undefined symbol: %s\""),
    Row("loader", r"cannot enable executable stack as shared object requires", "loader", "executable stack",
        "glibc 2.41 elf/dl-load.c: \"cannot enable executable stack as shared object requires: Invalid argument\""),
    Row("loader", r"wrong ELF class: ELFCLASS\d+|ELF load command address/offset not|invalid ELF header", "loader",
        "wrong ELF class", "glibc elf/dl-load.c: \"wrong ELF class: ELFCLASS32\", \"invalid ELF header\""),
    # ---- the Hugging Face hub (huggingface_hub/errors.py, file_download.py; transformers/utils/hub.py) ---------
    Row("hub", r"LocalEntryNotFoundError|OfflineModeIsEnabled|outgoing traffic has been disabled|"
               r"We couldn't connect to '[^']*huggingface|couldn't connect to 'https://huggingface\.co'|"
               r"Connection to huggingface\.co timed out|host='(?:cdn-lfs\.)?huggingface\.co'|"
               r"HTTPSConnectionPool\(host='[\w.-]*(?:huggingface\.co|hf\.co|hf-mirror\.com)'|"
               r"Couldn't reach '[^']*' on the Hub|Couldn't reach https?://(?:huggingface\.co|hf\.co)|"
               r"We have no connection or you passed local_files_only",
        "hub-offline", "hub unreachable",
        "huggingface_hub errors.py LocalEntryNotFoundError, OfflineModeIsEnabled; file_download.py \"Cannot find the "
        "requested files in the disk cache and outgoing traffic has been disabled\"; transformers utils/hub.py "
        "\"We couldn't connect to '%s' to load the files\""),
    # ---- DeepSpeed's config: every assert and raise of deepspeed/runtime/config.py, zero/config.py, ---------
    # ---- zero/offload_config.py, config_utils.py and elasticity (v0.3 to v0.19), and transformers' integration --
    # A message is matched by its first words, which a wrapped traceback (rich's boxes, a terminal) keeps on the
    # exception's own line: "AssertionError: Check batch related parameters. train_batch_size is not" + next line.
    Row("deepspeed", r"Check batch related parameters\.|train_batch_size is not equal to micro_batch_per_gpu|"
                     r"(?:Train batch size|Micro batch size per gpu|Gradient accumulation steps): -?\d+ has to be "
                     r"greater than 0|Either train_batch_size or (?:train_)?micro_batch(?:_size)?_per_gpu needs to be "
                     r"provided", "ds-config", "batch size",
        DS + "runtime/config.py _batch_assertion: \"Check batch related parameters. train_batch_size is not equal "
             "to micro_batch_per_gpu * gradient_acc_step * world_size %d != %d * %d * %d\", \"Train batch size: %d "
             "has to be greater than 0\" (and micro batch, accumulation steps); _set_batch_related_parameters: "
             "\"Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided\" (v0.3: "
             "micro_batch_per_gpu)"),
    Row("deepspeed", r"DeepSpeedConfig: (?:\w+ is not defined|Maximum supported ZeRO stage is|ZeRO is only supported "
                     r"if fp16 is enabled|cpu-offload supported ZeRO stage is)|"
                     r"(?:Fp16|Bf16)_master_weights_and_grads is only supported with ZeRO|"
                     r"bf16_optimizer_states (?:is only supported with ZeRO|requires bf16_master_weights_and_grads)|"
                     r"bfloat16 and fp16 modes cannot be simultaneously enabled|"
                     r"='sum' is not supported with (?:ZeRO stage|ZenFlow|DeepCompile)|"
                     r"is only supported with ZeRO Stage|is not supported with ZeRO stage|"
                     r"Eigenvalue based MoQ is temporarily disabled|bfloat16 mode is only enabled for Zero",
        "ds-config", "config check",
        DS + "runtime/config.py _do_error_check: \"DeepSpeedConfig: %s is not defined\", \"DeepSpeedConfig: "
             "Maximum supported ZeRO stage is %d\", \"Fp16_master_weights_and_grads is only supported with ZeRO "
             "Stage 2 for now\" (1, 2, or 3 since), \"gradient_allreduce_op='sum' is not supported with ZeRO stage "
             "3\"; __init__: \"bfloat16 and fp16 modes cannot be simultaneously enabled\"; v0.3: \"DeepSpeedConfig: "
             "ZeRO is only supported if fp16 is enabled\", \"cpu-offload supported ZeRO stage is %d\""),
    Row("deepspeed", r"DeepSpeedConfigError|Invalid communication_data_type\. Supported data types|"
                     r"Invalid gradient_allreduce_op\. Supported operations|Invalid dtype for torch autocast|"
                     r"Invalid module names for torch autocast|Checkpoint config contains invalid tag_validation|"
                     r"checkpoint::parallel_write::pipeline_stage value of|"
                     r"Expected a string path to an existing deepspeed config|Duplicate keys in DeepSpeed config|"
                     r"Given sparsity mode, \S+, has not been implemented", "ds-config", "config value",
        DS + "runtime/config.py: DeepSpeedConfigError (a removed key: \"... has been removed; ... is no longer "
             "supported\"), get_communication_data_type \"Invalid communication_data_type. Supported data types\", "
             "get_checkpoint_tag_validation_mode, DeepSpeedConfig.__init__ \"Expected a string path to an existing "
             "deepspeed config, or a dictionary\"; config_utils.py dict_raise_error_on_duplicate_keys \"Duplicate "
             "keys in DeepSpeed config\""),
    Row("deepspeed", r"validation errors? for DeepSpeed\w*Config|DeepSpeedZeroConfig: 'stage' must be defined before|"
                     r"Partial offloading only supported for ZeRO Stage 3|Cannot provide deprecated parameter '|"
                     r"Invalid (?:parameter|optimizer) offloading device specified|"
                     r"' is a required field and does not have a default value|' is not a field in <class 'deepspeed\.|"
                     r"ZeRO inference only makes sense with ZeRO Stage 3|"
                     r"You are using an untested ZeRO Optimizer", "ds-config", "ZeRO config",
        DS + "runtime/zero/config.py (pydantic: \"1 validation error for DeepSpeedZeroConfig\"; \"Partial "
             "offloading only supported for ZeRO Stage 3.\", \"DeepSpeedZeroConfig: 'stage' must be defined before "
             "'overlap_comm'\"), offload_config.py (v0.6) \"Invalid optimizer offloading device specified\", "
             "config_utils.py DeepSpeedConfigModel \"Cannot provide deprecated parameter '%s' and "
             "replacing parameter '%s' together\"; engine.py \"You are using an untested ZeRO Optimizer\""),
    Row("deepspeed", r"ElasticityConfigError|One or more batch related parameters were found in your ds_config|"
                     r"Model-Parallel size cannot be less than 1|NUmber of GPUs per node cannot be less than 1",
        "ds-config", "elasticity",
        DS + "runtime/config.py (v0.5 to v0.18) elasticity: ElasticityConfigError \"One or more batch related "
             "parameters were found in your ds_config\", \"Model-Parallel size cannot be less than 1\""),
    Row("deepspeed", r"ZeRO Offload can only work with DeepSpeed optimizers|"
                     r"--adafactor was passed, but also found `optimizer` configured in the DeepSpeed config|"
                     r"DeepSpeed config values that mismatch TrainingArguments|"
                     r"not possible to automatically fill out the following `auto` entries|"
                     r"expecting either a path to a config file or a pre-populated dict",
        "ds-config", "transformers integration",
        "huggingface/transformers deepspeed.py (4.6 to 4.30; integrations/deepspeed.py since) deepspeed_init / "
        "deepspeed_optim_sched: \"ZeRO Offload can only work with DeepSpeed optimizers\", \"--adafactor was "
        "passed, but also found `optimizer` configured in the DeepSpeed config\"; trainer_config_finalize: "
        "\"Please correct the following DeepSpeed config values that mismatch TrainingArguments values\", \"it's "
        "not possible to automatically fill out the following `auto` entries\"; HfDeepSpeedConfig: \"expecting "
        "either a path to a config file or a pre-populated dict\"; deepspeed_init: \"ZeRO inference "
        "only makes sense with ZeRO Stage 3\" (the ZeRO row)"),
    # ---- torch.distributed: c10d store, rendezvous, watchdog (c10d/TCPStore.cpp, ProcessGroupNCCL.cpp, ------
    # ---- torch/distributed/elastic/rendezvous/api.py, dynamic_rendezvous.py) ------------------------------
    Row("c10d", r"Watchdog caught collective operation timeout|\bran for \d+ milliseconds before timing out|"
                r"ProcessGroupNCCL's watchdog got stuck", "watchdog", "collective timeout",
        TORCH + "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp: \"Watchdog caught collective operation timeout: "
                "WorkNCCL(...) ran for %d milliseconds before timing out\""),
    Row("c10d", r"Heartbeat monitor timed out|\] Timeout at NCCL work: \d+", "watchdog", "NCCL watchdog",
        TORCH + "ProcessGroupNCCL.cpp (2.x): \"Heartbeat monitor timed out! Process will be terminated\", \"Timeout "
                "at NCCL work: %d\" (not \"Some NCCL operations have failed or timed out\": either)"),
    Row("c10d", r"Failed to recv, got 0 bytes|Connection was likely closed\. Did the remote server shutdown",
        "peer-lost", "store connection closed",
        TORCH + "torch/csrc/distributed/c10d/Utils.hpp recvBytes (2.3+): \"Failed to recv, got 0 bytes. Connection "
                "was likely closed. Did the remote server shutdown or crash?\""),
    # Gloo binds to the address its own host name resolves to (or GLOO_SOCKET_IFNAME's): a name that resolves to none
    Row("c10d", r"Unable to find address for:? \S+", "hostname", "Gloo host name",
        "pytorch/gloo gloo/transport/tcp/device.cc lookupAddrForHostname: GLOO_ENFORCE(rp != nullptr, \"Unable to "
        "find address for: \", hostname) (torch's libtorch_cpu.so carries it)"),
    Row("c10d", r"Rendezvous(?:Timeout|Closed|Connection|State)Error|RendezvousTimeoutError", "rendezvous",
        "RendezvousError", TORCH + "torch/distributed/elastic/rendezvous/api.py RendezvousError subclasses"),
    Row("c10d", r"DistStoreError|Timed out (?:after \d+ seconds )?waiting for clients|"
                r"Socket Timeout|client socket has timed out|TCPStore\b[^\n]*(?:timed out|timeout)|"
                r"The server socket has failed to listen|c10d\][^\n]*timed out|connect\(\) timed out|"
                r"Timed out initializing process group in store based barrier", "rendezvous", "c10d store",
        TORCH + "torch/csrc/distributed/c10d/TCPStore.cpp, socket.cpp: \"The client socket has timed out after "
                "%dms while trying to connect to (%s, %d)\"; distributed_c10d.py _store_based_barrier"),
    # ---- Python's interpreter and import machinery -------------------------------------------------------
    Row("python", r"unrecognized arguments: --local[-_]rank", "launch-args", "--local-rank",
        "argparse \"unrecognized arguments: %s\" on torch.distributed.launch's --local-rank"),
    Row("python", r"(?:ModuleNotFound|Import)Error\b|No module named '|cannot import name '|"
                  r"partially initialized module '[^']+' has no attribute", "import",
        "ImportError", "CPython Python/import.c: \"No module named %R\", \"cannot import name %R from %R\""),
    Row("python", r"^\s*(?:\S+:\s*)?MemoryError\b", "host-oom", "MemoryError", "CPython MemoryError"),
    # ---- torch's own checks ---------------------------------------------------------------------------------
    Row("torch", r"Expected all tensors to be on the same device|shapes cannot be multiplied|"
                 r"(?i:expected (?:object of )?scalar type)|must match the size of tensor|mat1 and mat2 shapes|"
                 r"expected mat1 and mat2 to have the same dtype|Input type \([\w.]+\) and weight type \([\w.]+\) "
                 r"should be the same|Sizes of tensors must match except in dimension|index out of range in self|"
                 r"Target -?\d+ is out of bounds|Expected input batch_size \(\d+\) to match target batch_size|"
                 r"Trying to backward through the graph a second time|does not require grad and does not have a "
                 r"grad_fn|modified by an inplace operation|view size is not compatible with input tensor|"
                 r"Tensors must be CUDA and dense|No backend type associated with device type", "code",
        "tensor mismatch", TORCH + "aten TensorIterator / _prims_common: \"Expected all tensors to be on the same "
                                   "device, but found at least two devices\"; aten's shape, dtype and index checks, "
                                   "autograd's engine, ProcessGroupNCCL's tensor checks"),
    Row("torch", r"Detected mismatch between collectives on ranks", "desync", "collective fingerprints",
        TORCH + "torch/csrc/distributed/c10d/ProcessGroupWrapper.cpp (TORCH_DISTRIBUTED_DEBUG=DETAIL): \"Detected "
                "mismatch between collectives on ranks. Rank %d is running collective: CollectiveFingerPrint(...)\""),
    Row("c10d", r"op\.preamble\.length <= op\.nbytes|Received data size doesn't match expected size", "desync",
        "Gloo size check", "pytorch/gloo gloo/transport/tcp/pair.cc: GLOO_ENFORCE_LE(op.preamble.length, op.nbytes, "
                           "\"Received data size doesn't match expected size. Is there a distributed collective "
                           "mismatch in your code?\"): the rank whose buffer is the smaller aborts (gloo::EnforceNotMet, "
                           "SIGABRT); its peers then fail on the closed connection"),
    Row("torch", r"DefaultCPUAllocator: can't allocate memory|std::bad_alloc", "host-oom", "CPU allocator",
        TORCH + "c10/core/impl/alloc_cpu.cpp: \"DefaultCPUAllocator: can't allocate memory: you tried to allocate %d "
                "bytes\"; C++'s std::bad_alloc"),
    Row("torch", r"size mismatch for \S+: copying a param with shape|Missing key\(s\) in state_dict|"
                 r"Unexpected key\(s\) in state_dict|Error\(s\) in loading state_dict for", "checkpoint-mismatch",
        "load_state_dict", TORCH + "torch/nn/modules/module.py load_state_dict: \"size mismatch for %s: copying a "
                                   "param with shape\", \"Missing key(s) in state_dict\", \"Unexpected key(s)\""),
    Row("torch", r"Expected to have finished reduction in the prior iteration|"
                 r"Expected to mark a variable ready only once|has been marked as ready twice|"
                 r"Parameter indices which did not receive grad", "ddp-unused", "DDP reducer",
        TORCH + "torch/csrc/distributed/c10d/reducer.cpp: \"Expected to have finished reduction in the prior "
                "iteration before starting a new one\", \"Expected to mark a variable ready only once\", "
                "\"Parameter at index %d has been marked as ready twice\""),
    Row("torch", r"Must flatten tensors (?:with uniform|on the same device)|"
                 r"`?FlatParameter`? requires uniform|must be uniform but got|"
                 r"Inconsistent compute device and `device_id`|FSDP only supports|"
                 r"FSDP does not support", "code", "FSDP flattening",
        TORCH + "torch/distributed/fsdp/_flat_param.py: \"Must flatten tensors with uniform dtype but got\""),
    Row("torch", r"Unexpected bus error encountered in worker", "shm", "DataLoader worker SIGBUS",
        TORCH + "torch/csrc/DataLoader.cpp: \"ERROR: Unexpected bus error encountered in worker. This might be caused "
                "by insufficient shared memory (shm).\""),
    Row("torch", r"Unexpected (?:segmentation fault|floating-point exception) encountered in worker", "crashed",
        "DataLoader worker SIGSEGV", TORCH + "torch/csrc/DataLoader.cpp: \"ERROR: Unexpected segmentation fault "
                                             "encountered in worker.\""),
    Row("torch", r"torch\.(?:cuda\.)?OutOfMemoryError|CUDA out of memory", "oom", "OutOfMemoryError",
        TORCH + "c10/cuda/CUDACachingAllocator.cpp: \"CUDA out of memory. Tried to allocate\""),
    # ---- SSH (OpenSSH's messages, pdsh / DeepSpeed's launcher around them) ----------------------------------
    Row("ssh", r"Permission denied \((?:publickey|password|gssapi)|Host key verification failed|"
               r"ssh: connect to host \S+ port \d+|ssh exited with exit code 255|ssh check has failed|"
               r"not reachable via ssh|'ssh [^']*' returned non-zero exit status 255", "ssh", "ssh",
        "OpenSSH ssh.c / sshconnect.c messages; deepspeed/launcher/runner.py's ssh check"),
]
