"""The trainers and storage spaces (clustercheck/vocabulary/trainers.py, storage.py): every row reads the message
its source raises, as Python (or the tool) prints it; the texts are the sources' own, each row cites its file:
Lightning, accelerate, transformers, LLaMA-Factory, DeepSpeed, pdsh, torchrun; torch's serialization, pickle,
safetensors, filelock, NCCL's and torch's shared memory. What healthy runs print reads as nothing, and whole logs of
failed runs are named for the cause the row proves, on the node that printed it."""

import pytest

from clustercheck.ranks.runs import NodeRun
from clustercheck.stages.smoke.classify import classify
from clustercheck.vocabulary import read_line, storage, trainers
from clustercheck.vocabulary.system import ERRNO_KINDS
from clustercheck.vocabulary.table import ROWS

# (line, kind, code): the sources' messages as a failed run prints them.
LINES = [
    ('RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory',
     'checkpoint-corrupt', 'PytorchStreamReader'),
    ('RuntimeError: PytorchStreamReader failed reading file data/0: invalid header or archive is corrupted',
     'checkpoint-corrupt', 'PytorchStreamReader'),
    ('RuntimeError: Invalid magic number; corrupt file?',
     'checkpoint-corrupt', 'PytorchStreamReader'),
    ("_pickle.UnpicklingError: invalid load key, 'v'.",
     'checkpoint-corrupt', 'UnpicklingError'),
    ('EOFError: Ran out of input',
     'checkpoint-corrupt', 'UnpicklingError'),
    ('[rank3]: EOFError: Ran out of input',
     'checkpoint-corrupt', 'UnpicklingError'),
    ('_pickle.UnpicklingError: pickle data was truncated',
     'checkpoint-corrupt', 'UnpicklingError'),
    ('\tWeightsUnpickler error: Unsupported operand 118',
     'checkpoint-corrupt', 'UnpicklingError'),
    ('_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do so you have two '
     'options, do those steps only if you trust the source of the checkpoint.',
     'code', 'torch.load arguments'),
    ('\tWeightsUnpickler error: Unsupported global: GLOBAL numpy.core.multiarray._reconstruct was not an allowed '
     'global by default. Please use `torch.serialization.add_safe_globals([_reconstruct])` to allowlist this '
     'global if you trust this class/function.',
     'code', 'torch.load arguments'),
    ('RuntimeError: Attempting to deserialize object on CUDA device 3 but torch.cuda.device_count() is 1. Please '
     'use torch.load with map_location to map your storages to an existing device.',
     'code', 'torch.load arguments'),
    ('RuntimeError: Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. If '
     "you are running on a CPU-only machine, please use torch.load with map_location=torch.device('cpu') to map "
     'your storages to the CPU.',
     'cuda-setup', 'torch.load sees no GPU'),
    ('RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 1664 vs 1558',
     'disk-full', 'PytorchStreamWriter'),
    ('RuntimeError: [enforce fail at inline_container.cc:471] . PytorchStreamWriter failed writing file data/93: '
     'file write failed',
     'disk-full', 'PytorchStreamWriter'),
    ('RuntimeError: Parent directory /scratch/ckpt/run1 does not exist.',
     'missing-file', 'torch.save directory'),
    ('safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge',
     'checkpoint-corrupt', 'SafetensorError'),
    ('safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer',
     'checkpoint-corrupt', 'SafetensorError'),
    ('safetensors_rust.SafetensorError: Error while deserializing header: InvalidHeaderDeserialization',
     'checkpoint-corrupt', 'SafetensorError'),
    ('safetensors_rust.SafetensorError: Error while deserializing header: incomplete metadata, file not fully '
     'covered',
     'checkpoint-corrupt', 'SafetensorError'),
    ('safetensors_rust.SafetensorError: Error while deserializing header: header too large',
     'checkpoint-corrupt', 'SafetensorError'),
    ('OSError: [Errno 116] Stale file handle',
     'stale-file', 'ESTALE'),
    ("OSError: [Errno 116] Stale file handle: '/nfs/ckpt/latest'",
     'stale-file', 'ESTALE'),
    ("cp: cannot stat '/mnt/nfs/data/shard-0001.bin': Stale NFS file handle",
     'stale-file', 'ESTALE'),
    ('filelock._error.Timeout: The file lock '
     "'/root/.cache/huggingface/hub/.locks/models--meta-llama--Llama-2-7b-hf/abc.lock' could not be acquired.",
     'file-lock', 'filelock Timeout'),
    ('docker: Error response from daemon: write /var/lib/docker/tmp/GetImageBlob123: no space left on device.',
     'disk-full', 'disk full (lowercase, datasets)'),
    ('OSError: Not enough disk space. Needed: 134.92 GiB (download: 41.97 GiB, generated: 92.95 GiB, '
     'post-processed: Unknown size)',
     'disk-full', 'disk full (lowercase, datasets)'),
    ("OSError: [Errno 122] Disk quota exceeded: '/home/u/ckpt/optimizer.pt'",
     'disk-full', 'EDQUOT'),
    ('OSError: [Errno 28] No space left on device',
     'disk-full', 'ENOSPC'),
    ('Error while creating shared memory segment /dev/shm/nccl-vzIpS6 (size 9637888)',
     'shm', 'shared memory'),
    ('Error: failed to extend /dev/shm/nccl-4lYVIl to 9637892 bytes, error: No space left on device (28)',
     'shm', 'shared memory'),
    ('RuntimeError: unable to write to file </torch_1253_3541838870_0>: No space left on device (28)',
     'shm', 'shared memory'),
    ('RuntimeError: DataLoader worker (pid 3978) is killed by signal: Bus error. It is possible that '
     "dataloader's workers are out of shared memory. Please try to raise your shared memory limit.",
     'shm', 'shared memory'),
    ('ValueError: You set `devices=8` in Lightning, but the number of tasks per node configured in SLURM '
     '`--ntasks-per-node=1` does not match. HINT: Set `devices=1`.',
     'trainer-config', 'Lightning devices x num_nodes'),
    ('ValueError: You set `num_nodes=2` in Lightning, but the number of nodes configured in SLURM `--nodes=4` '
     'does not match. HINT: Set `num_nodes=4`.',
     'trainer-config', 'Lightning devices x num_nodes'),
    ('ValueError: You set `devices=4` and `num_nodes=2` in Lightning, but the product (4 * 2) does not match the '
     'world size (4).',
     'trainer-config', 'Lightning devices x num_nodes'),
    ('RuntimeError: You set `--ntasks=8` in your SLURM bash script, but this variable is not supported. HINT: '
     'Use `--ntasks-per-node=8` instead.',
     'trainer-config', 'Lightning devices x num_nodes'),
    ("pytorch_lightning.utilities.exceptions.MisconfigurationException: `Trainer(strategy='ddp_cpu')` is not a "
     "valid strategy, you can use `Trainer(strategy='ddp'|'ddp_spawn', accelerator='cpu')` instead.",
     'trainer-config', 'Lightning strategy'),
    ("ValueError: You selected an invalid strategy name: `strategy='dpp'`. It must be either a string or an "
     'instance of `lightning.pytorch.strategies.Strategy`. Example choices: auto, ddp, ddp_spawn, deepspeed, ... '
     'Find a complete list of options in our documentation at https://lightning.ai',
     'trainer-config', 'Lightning strategy'),
    ("ValueError: You selected an invalid accelerator name: `accelerator='cuda:0'`. Available names are: auto, "
     'cpu, cuda, mps, tpu.',
     'trainer-config', 'Lightning accelerator'),
    ('lightning_fabric.utilities.exceptions.MisconfigurationException: `CUDAAccelerator` can not run on your '
     'system since the accelerator is not available. The following accelerator(s) is available and can be passed '
     "into `accelerator` argument of `Trainer`: ['cpu'].",
     'cuda-setup', 'Lightning sees no GPU'),
    ('lightning_fabric.utilities.exceptions.MisconfigurationException: No supported gpu backend found!',
     'cuda-setup', 'Lightning sees no GPU'),
    ('lightning_fabric.utilities.exceptions.MisconfigurationException: You requested gpu: [0, 1, 2, 3]',
     'trainer-config', 'Lightning devices'),
    (' But your machine only has: [0, 1]',
     'trainer-config', 'Lightning devices'),
    ('pytorch_lightning.utilities.exceptions.MisconfigurationException: `Trainer(devices=0)` value is not a '
     'valid input using cuda accelerator.',
     'trainer-config', 'Lightning devices'),
    ("ValueError: Precision 'fp16' is invalid. Allowed precision values: ('transformer-engine', '16-true', "
     "'16-mixed', 'bf16-true', 'bf16-mixed', '32-true', '64-true')",
     'trainer-config', 'Lightning precision'),
    ('pytorch_lightning.utilities.exceptions.MisconfigurationException: You have asked for native AMP on CPU, '
     'but AMP is only available on GPU.',
     'trainer-config', 'Lightning precision'),
    ('lightning_fabric.utilities.exceptions.MisconfigurationException: Received multiple values for Precision '
     'flags in `plugins`. Expected one value for each type at most.',
     'trainer-config', 'Lightning plugins'),
    ('RuntimeError: The DeepSpeed strategy is only supported on CUDA GPUs but `CPUAccelerator` is used.',
     'trainer-config', 'Lightning DeepSpeedStrategy'),
    ('lightning_fabric.utilities.exceptions.MisconfigurationException: You passed in a path to a DeepSpeed '
     'config but the path does not exist: ds_config.json',
     'missing-file', 'Lightning DeepSpeed config path'),
    ('lightning_fabric.utilities.exceptions.MisconfigurationException: To use the `DeepSpeedStrategy`, you must '
     'have DeepSpeed installed. Install it by running `pip install -U deepspeed`.',
     'import', 'framework needs a package'),
    ('ImportError: DeepSpeed is not installed => run `pip3 install deepspeed` or build it from source.',
     'import', 'framework needs a package'),
    ('ValueError: You need to use at least 2 processes to use `--multi_gpu`.',
     'trainer-config', 'accelerate launch'),
    ('ValueError: You need to manually pass in `--num_processes` using this config yaml.',
     'trainer-config', 'accelerate launch'),
    ('ValueError: Tried to launch on distributed with multinode, but `MASTER_ADDR` env was not set, please try '
     "exporting rank 0's hostname as `MASTER_ADDR`",
     'trainer-config', 'accelerate state'),
    ("ValueError: fp16 mixed precision requires a GPU (not 'cpu').",
     'trainer-config', 'half precision needs a GPU'),
    ("ValueError: fp16 mixed precision requires a device in ('xpu', 'cuda', 'npu', 'xla', 'mlu', 'musa', 'hpu', "
     "'sdaa', 'mps') (not 'cpu').",
     'trainer-config', 'half precision needs a GPU'),
    ("ValueError: Unknown mixed_precision mode: fp32. Choose between ['no', 'fp8', 'fp16', 'bf16'].",
     'trainer-config', 'accelerate mixed precision'),
    ("AssertionError: You can't use same `Accelerator()` instance with multiple models when using DeepSpeed",
     'trainer-config', 'accelerate prepare'),
    ("ValueError: You can't train a model that has been loaded in 8-bit or 4-bit precision on a different device "
     "than the one you're training on. Make sure you loaded the model on the correct device using for example "
     "`device_map={'':torch.cuda.current_device()}`",
     'trainer-config', 'accelerate prepare'),
    ('ValueError: When using DeepSpeed, `accelerate.prepare()` requires you to pass at least one of training or '
     'evaluation dataloaders with `batch_size` attribute returning an integer value or alternatively set an '
     'integer value in `train_micro_batch_size_per_gpu` in the deepspeed config file or assign integer value to '
     "`AcceleratorState().deepspeed_plugin.deepspeed_config['train_micro_batch_size_per_gpu']`.",
     'ds-config', 'accelerate DeepSpeed config'),
    ('ValueError: FP16 Mixed precision training with AMP or APEX (`--fp16`) and FP16 half precision evaluation '
     '(`--fp16_full_eval`) can only be used on CUDA devices.',
     'trainer-config', 'half precision needs a GPU'),
    ('ValueError: FP16 Mixed precision training with AMP or APEX (`--fp16`) and FP16 half precision evaluation '
     '(`--fp16_full_eval`) can only be used on CUDA or MLU devices or NPU devices or certain XPU devices (with '
     'IPEX).',
     'trainer-config', 'half precision needs a GPU'),
    ('ValueError: Mixed precision training with AMP or APEX (`--fp16` or `--bf16`) and half precision evaluation '
     '(`--fp16_full_eval` or `--bf16_full_eval`) can only be used on CUDA devices.',
     'trainer-config', 'half precision needs a GPU'),
    ("ValueError: Your setup doesn't support bf16/gpu. You need torch>=1.10, using Ampere GPU with cuda>=11.0",
     'trainer-config', 'half precision needs a GPU'),
    ('ValueError: --tf32 requires Ampere or a newer GPU arch, cuda>=11 and torch>=1.7',
     'trainer-config', 'TrainingArguments precision'),
    ('ValueError: Using fsdp only works in distributed training.',
     'trainer-config', 'TrainingArguments distributed'),
    ('ValueError: --load_best_model_at_end requires the save and eval strategy to match, but found',
     'trainer-config', 'TrainingArguments steps and outputs'),
    ('ValueError: Output directory (/out/run1) already exists and is not empty. Use --overwrite_output_dir to '
     'overcome.',
     'trainer-config', 'TrainingArguments steps and outputs'),
    ('ValueError: Please specify `max_steps` in streaming mode.',
     'trainer-config', 'LLaMA-Factory arguments'),
    ('ValueError: Please use `FORCE_TORCHRUN=1` to launch DeepSpeed training.',
     'trainer-config', 'LLaMA-Factory arguments'),
    ("ValueError: Some specified arguments are not used by the HfArgumentParser: ['--deepspeed_config']",
     'trainer-config', 'LLaMA-Factory arguments'),
    ('ValueError: DeepSpeed ZeRO-3 is incompatible with quantization.',
     'trainer-config', 'LLaMA-Factory with DeepSpeed'),
    ('ValueError: Unsloth is incompatible with DeepSpeed ZeRO-3.',
     'trainer-config', 'LLaMA-Factory with DeepSpeed'),
    ('ValueError: GaLore and BAdam are incompatible with DeepSpeed yet.',
     'trainer-config', 'LLaMA-Factory with DeepSpeed'),
    ('ValueError: Hostfile is empty or not formatted correctly, unable to proceed with launching.',
     'launch-args', 'DeepSpeed hostfile'),
    ('[2021-01-05 10:00:00,000] [ERROR] [runner.py:131:fetch_hostfile] Hostfile is not formatted correctly, '
     'unable to proceed with launching.',
     'launch-args', 'DeepSpeed hostfile'),
    ("ValueError: Hostname 'worker-3' not found in hostfile",
     'launch-args', 'DeepSpeed resources'),
    ('ValueError: Num nodes is >1 but no extra nodes available via hostfile',
     'launch-args', 'DeepSpeed resources'),
    ('RuntimeError: Unable to proceed, no GPU resources available',
     'cuda-setup', 'DeepSpeed sees no GPU'),
    ("RuntimeError: launcher 'pdsh' not installed.",
     'missing-file', 'DeepSpeed launcher missing'),
    ("[ERROR] [runner.py:505:main] Unable to detect suitable master address via 'hostname -I', please manually "
     'specify one via --master_addr',
     'ssh', 'DeepSpeed master address'),
    ('pdsh@gpu01: gpu02: rcmd: socket: Permission denied',
     'ssh', 'pdsh rcmd'),
    ('pdsh@gpu01: gpu02: connect: Connection refused',
     'ssh', 'pdsh rcmd'),
    ('AssertionError: DeepSpeed requires the LOCAL_RANK environment variable, it is set by the deepspeed '
     "launcher, deepspeed.init_distributed, or the torch's launcher. If using a different launcher please ensure "
     'LOCAL_RANK is set prior to initializing deepspeed.',
     'launch-args', 'DeepSpeed LOCAL_RANK'),
    ('ValueError: Type bf16 is not supported on your device.',
     'ds-config', 'DeepSpeed engine'),
    ('AssertionError: MoE not supported with Stage 3',
     'ds-config', 'DeepSpeed engine'),
    ('ValueError: Unsupported nproc_per_node value: 8gpus',
     'launch-args', 'torchrun arguments'),
    ('torchrun: error: the following arguments are required: training_script, training_script_args',
     'launch-args', 'torchrun arguments'),
    ('RuntimeError: nnodes=1-2 is not in "MIN:MAX" format',
     'launch-args', 'torchrun arguments'),
    ("ValueError: The port number of the rendezvous endpoint 'node1:29x00' must be an integer between 0 and 65536.",
     'launch-args', 'torchrun rendezvous arguments'),
    ("ValueError: The rendezvous backend 'etcd-v3' is not registered. Did you forget to call `register`?",
     'launch-args', 'torchrun rendezvous arguments'),
    ('ValueError: Endpoint is missing in endpoint. Try to add --master-addr and --master-port',
     'launch-args', 'torchrun rendezvous arguments'),
    ('ValueError: Cuda is not available.',
     'cuda-setup', 'torchrun --nproc-per-node=gpu'),
]

# What healthy runs print: a single node's DeepSpeed start, Lightning's device report, the Trainer's argument
# dump, INFO lines, checkpoint saves and loads, df's /dev/shm line, accelerate's defaults, torchrun's usage.
HEALTHY = [
    '[2024-05-01 10:00:00,123] [WARNING] [runner.py:202:fetch_hostfile] Unable to find hostfile, will proceed '
    'with training with local resources only.',
    'GPU available: True (cuda), used: True',
    'TPU available: False, using: 0 TPU cores',
    'HPU available: False, using: 0 HPUs',
    'save_strategy=steps,',
    'fp16=True,',
    'bf16=False,',
    'ddp_find_unused_parameters=None,',
    'half_precision_backend=auto,',
    'load_best_model_at_end=False,',
    'save_safetensors=True,',
    'overwrite_output_dir=False,',
    '[INFO|trainer.py:3478] 2024-05-01 10:00:00,000 >> Saving model checkpoint to /out/checkpoint-500',
    'Using 16bit Automatic Mixed Precision (AMP)',
    'Using bfloat16 Automatic Mixed Precision (AMP)',
    '[2024-05-01 10:00:00,000] [INFO] [multinode_runner.py:80:get_cmd] Running on the following workers: '
    'gpu01,gpu02',
    "INFO:torch.distributed.elastic.rendezvous.dynamic_rendezvous:The node 'gpu01_1234_0' has joined round 0 of "
    "the rendezvous 'none' as rank 0 in a world of size 2.",
    'Distributed environment: MULTI_GPU  Backend: nccl',
    'Mixed precision type: bf16',
    'Model weights saved in /out/checkpoint-500/model.safetensors',
    '[2024-05-01 10:00:00,000] [INFO] [torch_checkpoint_engine.py:21:save] [Torch] Saving '
    '/ckpt/global_step100/mp_rank_00_model_states.pt...',
    'Loading checkpoint shards: 100%|##########| 4/4 [00:05<00:00,  1.30s/it]',
    'usage: torchrun [-h] [--nnodes NNODES] [--nproc-per-node NPROC_PER_NODE]',
    'shm              64M     0   64M   0% /dev/shm',
    'The following values were not passed to `accelerate launch` and had defaults used instead:',
    '\t`--num_processes` was set to a value of `8`',
    'LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0,1,2,3,4,5,6,7]',
    '[INFO] [launch.py:163:main] dist_world_size=16',
    'Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/16',
    '  | Name  | Type | Params | Mode',
    '`Trainer.fit` stopped: `max_steps=1000` reached.',
    'streaming: false',
    'deepspeed: examples/deepspeed/ds_z3_config.json',
    'Saving the dataset (1/1 shards): 100%|##########| 1000/1000',
    'Lock 140234 acquired on /root/.cache/huggingface/hub/.locks/x.lock',
    'Precision: bf16-mixed',
]



@pytest.mark.parametrize("line, kind, code", LINES, ids=[line[:50] for line, _, _ in LINES])
def test_each_message_reads_as_its_kind(line, kind, code):
    meaning = read_line(line)
    assert meaning is not None and (meaning.kind, meaning.code) == (kind, code), meaning


def test_every_row_of_both_spaces_reads_a_line_here():
    read = {(meaning.space, meaning.code) for meaning in map(read_line, (line for line, _, _ in LINES)) if meaning}
    rows = trainers.ROWS + storage.ROWS
    assert {row.space for row in rows} == {"trainers", "storage"}
    assert all(row in ROWS for row in rows)
    assert [row.code for row in rows if (row.space, row.code) not in read] == []


@pytest.mark.parametrize("line", HEALTHY)
def test_what_healthy_runs_print_reads_as_nothing(line):
    assert read_line(line) is None, read_line(line)


def test_the_errno_rows_and_the_storage_rows_agree_on_a_full_disk_and_a_stale_handle():
    """ESTALE is read here, as stale-file, whatever its form; the errno space names it no other kind, and its
    ENOSPC / EDQUOT rows still read the capitalised texts Python prints."""
    assert ERRNO_KINDS.get("ESTALE", "stale-file") == "stale-file"
    for line in ["OSError: [Errno 116] Stale file handle", "IOError: errno 116 ESTALE",
                 "ls: cannot access '/nfs/x': stale file handle"]:
        assert (read_line(line).kind, read_line(line).space) == ("stale-file", "storage"), line
    for line, code in [("OSError: [Errno 28] No space left on device: '/ckpt/x.pt'", "ENOSPC"),
                       ("OSError: [Errno 122] Disk quota exceeded", "EDQUOT")]:
        assert (read_line(line).kind, read_line(line).space, read_line(line).code) == ("disk-full", "errno", code)


LIGHTNING_SLURM = """GPU available: True (cuda), used: True
TPU available: False, using: 0 TPU cores
HPU available: False, using: 0 HPUs
Traceback (most recent call last):
  File "/home/u/train.py", line 58, in <module>
    trainer.fit(model, datamodule=dm)
  File "/opt/conda/lib/python3.10/site-packages/lightning/fabric/plugins/environments/slurm.py", line 163, in \
_validate_srun_variables
    raise ValueError(
ValueError: You set `devices=8` in Lightning, but the number of tasks per node configured in SLURM \
`--ntasks-per-node=1` does not match. HINT: Set `devices=1`.
srun: error: gpu-07: task 0: Exited with exit code 1"""

SAVE_DISK_FULL = """[INFO|trainer.py:3478] 2024-05-01 10:00:00,000 >> Saving model checkpoint to /scratch/out/ckpt-2000
[INFO|configuration_utils.py:472] 2024-05-01 10:00:00,100 >> Configuration saved in /scratch/out/ckpt-2000/config.json
[rank0]: Traceback (most recent call last):
[rank0]:   File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py", line 628, in save
[rank0]:     _save(obj, opened_zipfile, pickle_module, pickle_protocol, _disable_byteorder_record)
[rank0]: RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 1664 vs 1558
[rank0]: During handling of the above exception, another exception occurred:
[rank0]: RuntimeError: [enforce fail at inline_container.cc:471] . PytorchStreamWriter failed writing file data/93: \
file write failed
[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4001, \
OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800088 milliseconds before timing out."""

PDSH_RSH = """[2024-05-01 10:00:00,000] [INFO] [runner.py:463:main] Using IP address of 10.0.0.1 for node gpu01
[2024-05-01 10:00:00,000] [INFO] [multinode_runner.py:80:get_cmd] Running on the following workers: gpu01,gpu02
[2024-05-01 10:00:00,000] [INFO] [runner.py:568:main] cmd = pdsh -S -f 1024 -w gpu01,gpu02 export PYTHONPATH=/home/u; \
cd /home/u; /usr/bin/python -u -m deepspeed.launcher.launch --world_info=eyJ9 --node_rank=%n --master_addr=10.0.0.1 \
--master_port=29500 train.py --deepspeed ds.json
pdsh@gpu01: gpu02: rcmd: socket: Permission denied
pdsh@gpu01: gpu01: rcmd: socket: Permission denied"""

LOAD_CORRUPT = """[rank2]: Traceback (most recent call last):
[rank2]:   File "/home/u/train.py", line 120, in <module>
[rank2]:     state = torch.load(args.resume, map_location="cpu")
[rank2]:   File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py", line 456, in __init__
[rank2]:     super().__init__(torch._C.PyTorchFileReader(name_or_buffer))
[rank2]: RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory"""

NCCL_SHM = """[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/\
ProcessGroupNCCL.cpp:1691, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3
[rank0]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.
[rank0]: Last error:
[rank0]: Error while creating shared memory segment /dev/shm/nccl-vzIpS6 (size 9637888)"""

SINGLE_NODE_OOM = """[2024-05-01 10:00:00,000] [WARNING] [runner.py:202:fetch_hostfile] Unable to find hostfile, will \
proceed with training with local resources only.
[2024-05-01 10:00:00,000] [INFO] [runner.py:568:main] cmd = /usr/bin/python -u -m deepspeed.launcher.launch \
--world_info=eyJsb2NhbGhvc3QiOiBbMF19 --master_addr=127.0.0.1 --master_port=29500 train.py
[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of \
79.15 GiB of which 1.02 GiB is free."""

WEIGHTS_ONLY = """Traceback (most recent call last):
  File "/home/u/eval.py", line 40, in <module>
    ckpt = torch.load("ckpt/last.pt")
_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do so you have two options, \
\x1b[1mdo those steps only if you trust the source of the checkpoint\x1b[0m.
\t(1) In PyTorch 2.6, we changed the default value of the `weights_only` argument in `torch.load` from `False` to \
`True`. Re-running `torch.load` with `weights_only` set to `False` will likely succeed, but it can result in \
arbitrary code execution. Do it only if you got the file from a trusted source.
\t(2) Alternatively, to load with `weights_only=True` please check the recommended steps in the following error \
message.
\tWeightsUnpickler error: Unsupported global: GLOBAL argparse.Namespace was not an allowed global by default. Please \
use `torch.serialization.add_safe_globals([Namespace])` to allowlist this global if you trust this class/function."""

# the same load of a git-lfs pointer ("version https://git-lfs..."): the unpickler refuses its first byte
LFS_POINTER = WEIGHTS_ONLY.rsplit("\n", 1)[0] + "\n\tWeightsUnpickler error: Unsupported operand 118"

ECHO = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:12717"


@pytest.mark.parametrize("text, kind, ranks", [
    (LIGHTNING_SLURM, "trainer-config", []),
    (SAVE_DISK_FULL, "disk-full", [0]),       # rank 1's watchdog is the others' wait for rank 0
    (PDSH_RSH, "ssh", []),
    (LOAD_CORRUPT, "checkpoint-corrupt", [2]),
    (NCCL_SHM, "shm", [0]),                    # NCCL's system error says which: /dev/shm
    (SINGLE_NODE_OOM, "oom", [0]),             # a single node's missing hostfile is no failure
    (WEIGHTS_ONLY, "code", []),
    (LFS_POINTER, "checkpoint-corrupt", []),
], ids=["lightning-slurm", "save-disk-full", "pdsh-rsh", "load-corrupt", "nccl-shm", "single-node-oom",
        "weights-only", "lfs-pointer"])
def test_a_failed_runs_log_is_named_for_its_cause_on_its_node(text, kind, ranks):
    for order in (("n1", "n2"), ("n2", "n1")):
        runs = {name: NodeRun(name, exit_code=1, stderr=text if name == "n1" else ECHO) for name in order}
        cause = classify(runs, 600)
        assert (cause.kind, cause.nodes, cause.ranks) == (kind, ["n1"], ranks), cause


def test_half_precision_refused_for_want_of_cuda_yields_to_what_says_why():
    """transformers' "--fp16 ... can only be used on CUDA devices" proves only that torch saw no GPU: beside torch's
    own CUDA warning (the driver too old) the node's CUDA is the cause; alone, the setting is."""
    fp16 = ("ValueError: FP16 Mixed precision training with AMP or APEX (`--fp16`) and FP16 half precision evaluation "
            "(`--fp16_full_eval`) can only be used on CUDA devices.")
    driver = ("UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 11040). "
              "Please update your GPU driver by downloading and installing a new version from the URL: "
              "http://www.nvidia.com/Download/index.aspx")
    both = classify({"n1": NodeRun("n1", exit_code=1, stderr="\n".join([driver, fp16]))}, 600)
    assert (both.kind, both.nodes) == ("cuda-setup", ["n1"])
    alone = classify({"n1": NodeRun("n1", exit_code=1, stderr=fp16)}, 600)
    assert (alone.kind, alone.nodes) == ("trainer-config", ["n1"])
    # bf16 on a GPU without it (a V100, a T4): no CUDA warning, the setting
    bf16 = "ValueError: Your setup doesn't support bf16/gpu. You need torch>=1.10, using Ampere GPU with cuda>=11.0"
    assert classify({"n1": NodeRun("n1", exit_code=1, stderr=bf16)}, 600).kind == "trainer-config"
