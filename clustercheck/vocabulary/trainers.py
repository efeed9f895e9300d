"""The trainers layer, the "trainers" space: the messages the frameworks around torch raise when their settings do
not fit the job or the node (PyTorch Lightning's MisconfigurationException / ValueError texts, accelerate's,
the Hugging Face Trainer's TrainingArguments checks, LLaMA-Factory's argument parser), DeepSpeed's launcher,
multinode runner and engine checks, pdsh's rcmd errors under DeepSpeed's runner, and torchrun's (torchelastic's)
argument and rendezvous-configuration errors. Each message is taken whole from the file that raises it.

The kind is what the user must change: a framework's setting ("trainer-config"), a DeepSpeed config value
("ds-config"), the launcher's own arguments or hostfile ("launch-args"), the login pdsh could not make ("ssh"), a
package the framework needs ("import"); a framework saying the node shows no GPU at all is the node's CUDA
("cuda-setup"). Left to other spaces, never repeated here: DeepSpeed's config module (space "deepspeed",
messages.py), torchelastic's RendezvousError classes and the c10d store ("c10d"), OpenSSH's words and DeepSpeed's
ssh check ("ssh": "ssh exited with exit code 255", "not reachable via ssh").

Healthy runs print none of these: "Unable to find hostfile, will proceed with training with local resources only"
(DeepSpeed's runner, a single node), "GPU available: True (cuda), used: True" (Lightning), the argument dumps
("fp16=True,", "ddp_find_unused_parameters=None,", "save_strategy=steps,") and INFO lines name no failure.
"""

from __future__ import annotations

from typing import List

from clustercheck.vocabulary.kinds import FAILED
from clustercheck.vocabulary.spaces import Row

# The sources, at the versions read (messages of older versions are kept where they were reworded).
PL = "Lightning-AI/pytorch-lightning (7f0c3436, and tags 1.3.0 / 1.6.0 / c4c4793d^ for the older texts) "
PL_CONNECTOR = (PL + "src/lightning/pytorch/trainer/connectors/accelerator_connector.py, "
                     "src/lightning/fabric/connector.py")
ACC = "huggingface/accelerate (16cb6eb8; v0.30.0 for the older texts) src/accelerate/"
HF = "huggingface/transformers (v4.20.0, v4.36.2, v4.46.3, v5.24.0) src/transformers/"
LF = "hiyouga/LLaMA-Factory (ff6d4d12; v0.3.0 to v0.9.0 for the older texts) src/llamafactory/hparams/parser.py"
DS = "deepspeedai/DeepSpeed (edaa7221; v0.3.0 to v0.19.0) deepspeed/"
TORCHRUN = "pytorch/pytorch (torch 2.13.0) torch/distributed/"

ROWS: List[Row] = [
    # ---- PyTorch Lightning: the accelerator connector, its device parser and cluster environments ---------------
    Row("trainers", r"You set `(?:devices|num_nodes)=[^`\n]*`(?: and `num_nodes=[^`\n]*`)? in Lightning, but the|"
                    r"You set `--ntasks=\d+` in your SLURM bash script, but this variable is not supported",
        "trainer-config", "Lightning devices x num_nodes",
        PL + "src/lightning/fabric/plugins/environments/slurm.py _validate_srun_variables: \"You set `devices=%d` in "
             "Lightning, but the number of tasks per node configured in SLURM `--ntasks-per-node=%d` does not "
             "match. HINT: Set `devices=%d`.\", \"You set `num_nodes=%d` in Lightning, but the number of nodes "
             "configured in SLURM `--nodes=%s` does not match\", \"You set `--ntasks=%s` in your SLURM bash script, "
             "but this variable is not supported.\"; torchelastic.py validate_settings: \"You set `devices=%d` and "
             "`num_nodes=%d` in Lightning, but the product (%d * %d) does not match the world size (%d).\""),
    Row("trainers", r"You selected an invalid strategy name: `strategy=|"
                    r"`Trainer\(strategy='[\w-]+'\)` is not a valid strategy|"
                    r"You selected `(?:Trainer|Fabric)\(strategy='[\w-]+'\)` but process forking is not supported|"
                    r"strategies from the DDP family are not supported on the MPS accelerator|"
                    r"The strategy `fsdp` requires a GPU accelerator|"
                    r"You selected the FSDP strategy but FSDP is only available on GPU|"
                    r"You selected strategy to be `fsdp`, but GPU accelerator is not used|"
                    r"is not compatible with an interactive environment\. Run your code as a script|"
                    r"Incompatible values set in `strategy` and `accelerator` arguments|"
                    r"and you can only specify one strategy, but you have passed|"
                    r"strategy \S+ already set through `strategy` flag, but have also passed",
        "trainer-config", "Lightning strategy",
        PL_CONNECTOR + ": \"You selected an invalid strategy name: `strategy=%r`. It must be either a string or an "
                       "instance of `lightning.pytorch.strategies.Strategy`\"; (1.6 to 1.9) \"`Trainer(strategy="
                       "'ddp_cpu')` is not a valid strategy, you can use `Trainer(strategy='ddp'|'ddp_spawn', "
                       "accelerator='cpu')` instead.\"; \"The strategy `fsdp` requires a GPU accelerator, but "
                       "received `accelerator=%r`\"; \"`Trainer(strategy=%r)` is not compatible with an interactive "
                       "environment. Run your code as a script\"; (1.6) \"Incompatible values set in `strategy` and "
                       "`accelerator` arguments\""),
    Row("trainers", r"You selected an invalid accelerator name: `accelerator=|"
                    r"When passing string value for the `accelerator` argument of `Trainer`, it can only be one of|"
                    r"accelerator set through both strategy class and accelerator flag, choose one|"
                    r"(?:CPU|GPU) parallel_devices set through \w+ class, but accelerator set to|"
                    r"HPU is currently not supported\. Please contact|"
                    r"The `(?:XLA|TPU|HPU)Accelerator` can only be used with a `",
        "trainer-config", "Lightning accelerator",
        PL_CONNECTOR + ": \"You selected an invalid accelerator name: `accelerator=%r`. Available names are: auto, "
                       "%s.\", \"accelerator set through both strategy class and accelerator flag, choose one\", "
                       "\"GPU parallel_devices set through %s class, but accelerator set to %s, please choose one "
                       "device type\"; (1.6) \"When passing string value for the `accelerator` argument of `Trainer`, "
                       "it can only be one of %s.\""),
    # the node shows Lightning no GPU at all: its CUDA, not a setting
    Row("trainers", r"`?\w*Accelerator`? can not run on your system since the accelerator is not available|"
                    r"MisconfigurationException: No supported gpu backend found!|"
                    r"GPUs requested but none are available|"
                    r"You requested to find \d+ devices but there are no visible CUDA devices on this machine",
        "cuda-setup", "Lightning sees no GPU",
        PL_CONNECTOR + ": \"`%s` can not run on your system since the accelerator is not available. The following "
                       "accelerator(s) is available and can be passed into `accelerator` argument of `Trainer`: "
                       "%s.\", \"No supported gpu backend found!\"; src/lightning/fabric/utilities/device_parser.py "
                       "\"GPUs requested but none are available.\"; src/lightning/fabric/accelerators/cuda.py "
                       "find_usable_cuda_devices \"You requested to find %d devices but there are no visible CUDA "
                       "devices on this machine.\""),
    Row("trainers", r"`(?:Trainer|Fabric)\(devices=[^`\n]*\)` value is not a valid input using|"
                    r"You requested (?:gpu|GPUs): \[|But your machine only has: \[|"
                    r"You requested to find \d+ devices but (?:this machine only has \d+ GPUs|only \d+ are currently "
                    r"available)|Device ID's \(GPU\) must be unique|"
                    r"You passed `devices=[^`\n]*` but haven't specified `accelerator=|"
                    r"`num_nodes` must be a positive integer, but got",
        "trainer-config", "Lightning devices",
        PL_CONNECTOR + ": \"`Trainer(devices=%r)` value is not a valid input using %s accelerator.\", \"`num_nodes` "
                       "must be a positive integer, but got %s.\"; src/lightning/fabric/utilities/device_parser.py "
                       "\"You requested gpu: %s\\n But your machine only has: %s\" (1.5: \"You requested GPUs:\"), "
                       "\"Device ID's (GPU) must be unique.\"; accelerators/cuda.py \"You requested to find %d devices "
                       "but this machine only has %d GPUs.\""),
    Row("trainers", r"Precision \S+ is invalid\. Allowed precision values|Received both `precision=[^`\n]*` and "
                    r"`plugins=|precision set through both strategy class and plugins, choose one|"
                    r"You have asked for native AMP on CPU, but AMP is only available on GPU|"
                    r"You have asked for Apex AMP but you have not installed it|"
                    r"`Trainer\(accelerator='\w+', precision=[^)\n]*\)` is not (?:implemented|supported)|"
                    r"does not support `Fabric\(\.\.\., precision=|Bitsandbytes is only supported on CUDA GPUs|"
                    r"You passed `Trainer\(amp_type=|You passed `Trainer\(accelerator='cpu', precision=16, "
                    r"amp_type='apex'\)`|You have asked for `amp_level=",
        "trainer-config", "Lightning precision",
        PL_CONNECTOR + ": _convert_precision_to_unified_args \"Precision %r is invalid. Allowed precision values: "
                       "%s\", \"Received both `precision=%s` and `plugins=%s`. Choose one.\", \"The "
                       "`ModelParallelStrategy` does not support `Fabric(..., precision=%r)`\", \"Bitsandbytes is only "
                       "supported on CUDA GPUs.\"; (1.3) \"You have asked for native AMP on CPU, but AMP is only "
                       "available on GPU.\"; (1.6) \"`Trainer(accelerator='hpu', precision=%r)` is not supported.\""),
    Row("trainers", r"Found invalid type for plugin \S+\. Expected one of|Received multiple values for [\w, ]+ flags "
                    r"in `plugins`|You set `Trainer\(sync_batchnorm=True\)` and provided a|"
                    r"(?:checkpoint_io|cluster_environment) set through both strategy class and plugins",
        "trainer-config", "Lightning plugins",
        PL_CONNECTOR + ": \"Found invalid type for plugin %s. Expected one of: Precision, CheckpointIO, "
                       "ClusterEnvironment, or LayerSync.\", \"Received multiple values for %s flags in `plugins`.\""),
    Row("trainers", r"The DeepSpeed strategy is only supported on CUDA GPUs but|"
                    r"Currently only one optimizer is supported with DeepSpeed|"
                    r"DeepSpeed currently only supports single optimizer, single optional scheduler|"
                    r"DeepSpeed does not support clipping gradients by value",
        "trainer-config", "Lightning DeepSpeedStrategy",
        PL + "src/lightning/pytorch/strategies/deepspeed.py: \"The DeepSpeed strategy is only supported on CUDA GPUs "
             "but `%s` is used.\", \"Currently only one optimizer is supported with DeepSpeed.\", \"DeepSpeed does not "
             "support clipping gradients by value.\""),
    Row("trainers", r"You passed in a path to a DeepSpeed config but the path does not exist", "missing-file",
        "Lightning DeepSpeed config path",
        PL + "src/lightning/pytorch/strategies/deepspeed.py _load_config: \"You passed in a path to a DeepSpeed "
             "config but the path does not exist: %s\""),
    # ---- the frameworks' missing packages -----------------------------------------------------------------------
    Row("trainers", r"To use the `DeepSpeedStrategy`, you must have DeepSpeed installed|"
                    r"PyTorch >= [\d.]+ requires DeepSpeed >= [\d.]+\. Detected DeepSpeed version|"
                    r"DeepSpeed is not (?:installed|available) =>|DeepSpeed (?:MLU |MUSA )?version must be >= [\d.]+\. "
                    r"Please update DeepSpeed|--deepspeed requires Accelerate to be installed|"
                    r"Megatron is not installed\. please build it from source",
        "import", "framework needs a package",
        PL + "src/lightning/pytorch/strategies/deepspeed.py: \"To use the `DeepSpeedStrategy`, you must have "
             "DeepSpeed installed. Install it by running `pip install -U deepspeed`.\"; " + ACC + "commands/launch.py "
             "\"DeepSpeed is not installed => run `pip3 install deepspeed` or build it from source.\", state.py "
             "\"DeepSpeed is not available => install it using `pip3 install deepspeed`\", accelerator.py \"DeepSpeed "
             "version must be >= 0.9.3. Please update DeepSpeed.\"; " + HF + "training_args.py \"--deepspeed requires "
             "Accelerate to be installed: `pip install accelerate`.\""),
    # ---- accelerate: state.py, accelerator.py, launchers.py, commands/launch.py ---------------------------------
    Row("trainers", r"You can only use one of `--cpu`, `--multi_gpu`, `--tpu`, `--use_deepspeed`, `--use_fsdp` at a "
                    r"time|You need to use at least 2 processes to use `--multi_gpu`|"
                    r"Less than two GPU ids were configured and tried to run on multiple GPUs|"
                    r"You need to manually pass in `--num_processes` using this config yaml|"
                    r"You have to specify the number of (?:devices|GPUs) you would like to use, add `num_processes=|"
                    r"The node_rank must be less than the number of nodes|"
                    r"You cannot use `--use_parallelism_config` without `--use_fsdp`",
        "trainer-config", "accelerate launch",
        ACC + "commands/launch.py _validate_launch_command: \"You can only use one of `--cpu`, `--multi_gpu`, `--tpu`, "
              "`--use_deepspeed`, `--use_fsdp` at a time.\", \"You need to use at least 2 processes to use "
              "`--multi_gpu`.\", \"Less than two GPU ids were configured and tried to run on multiple GPUs.\", \"You "
              "need to manually pass in `--num_processes` using this config yaml.\"; launchers.py notebook_launcher "
              "\"You have to specify the number of devices you would like to use, add `num_processes=...` to your "
              "call.\", \"The node_rank must be less than the number of nodes.\""),
    Row("trainers", r"Tried to launch on distributed with multinode, but `MASTER_ADDR` env was not set|"
                    r"Your assigned backend \S+ is not available, please use|"
                    r"Using RTX 4000 series doesn't support faster communication broadband via P2P or IB|"
                    r"AcceleratorState has already been initialized and cannot be changed|"
                    r"Please make sure to properly initialize your accelerator via `accelerator = Accelerator\(\)`|"
                    r"The `PartialState` or `Accelerator` must be initialized before calling",
        "trainer-config", "accelerate state",
        ACC + "state.py PartialState.__init__: \"Tried to launch on distributed with multinode, but `MASTER_ADDR` env "
              "was not set, please try exporting rank 0's hostname as `MASTER_ADDR`\", \"Your assigned backend %s is "
              "not available, please use %s\", \"Using RTX 4000 series doesn't support faster communication "
              "broadband via P2P or IB. Please set `NCCL_P2P_DISABLE=\\\"1\\\"` and `NCCL_IB_DISABLE=\\\"1\\\"`\"; "
              "AcceleratorState._check_initialized \"AcceleratorState has already been initialized and cannot be "
              "changed, restart your runtime completely and pass `%s` to `Accelerator()`.\""),
    Row("trainers", r"fp16 mixed precision with MPS device requires|"
                    r"bf16 mixed precision with MPS device requires|Unknown mixed_precision mode: \S+\. Choose between|"
                    r"Using `fp8` precision requires `transformer_engine` or `MS-AMP` to be installed|"
                    r"Can only use `downcast_bf16` when using `mixed_precision='bf16'`|"
                    r"Passing in an FP8 configuration requires setting `mixed_precision='fp8'`",
        "trainer-config", "accelerate mixed precision",
        ACC + "accelerator.py Accelerator.__init__: \"fp16 mixed precision with MPS device requires a Pytorch >= "
              "2.5.0\", \"Unknown mixed_precision mode: %s. Choose between %s\"; state.py \"Using `fp8` precision "
              "requires `transformer_engine` or `MS-AMP` to be installed.\""),
    Row("trainers", r"You can't use same `Accelerator\(\)` instance with multiple models when using|"
                    r"You can't train a model that has been loaded with `device_map='auto'` in any distributed mode|"
                    r"You can't train a model that has been loaded in 8-bit or 4-bit precision (?:on multiple devices|"
                    r"on a different device|with CPU or disk offload)|"
                    r"You can't customize device placements with DeepSpeed or Megatron-LM|"
                    r"Only one model is supported when using FSDP2|"
                    r"When using FSDP2, a model and optimizer must be passed together",
        "trainer-config", "accelerate prepare",
        ACC + "accelerator.py prepare / _prepare_deepspeed / prepare_model: \"You can't use same `Accelerator()` "
              "instance with multiple models when using DeepSpeed\", \"You can't train a model that has been loaded "
              "with `device_map='auto'` in any distributed mode.\", \"You can't train a model that has been loaded in "
              "8-bit or 4-bit precision on multiple devices in any distributed mode.\""),
    Row("trainers", r"`accelerate\.prepare\(\)` requires you to pass at least one of training or evaluation "
                    r"dataloaders|has `None` as batch size\. Please set an integer value in "
                    r"`train_micro_batch_size_per_gpu`|You cannot specify an? (?:optimizer|scheduler) in the config "
                    r"file and in the code at the same time|You cannot create a `DummyOptim` without specifying an "
                    r"optimizer in the config file|"
                    r"You can only specify `accelerate\.utils\.DummyScheduler` in the code when using",
        "ds-config", "accelerate DeepSpeed config",
        ACC + "accelerator.py _prepare_deepspeed: \"When using DeepSpeed, `accelerate.prepare()` requires you to "
              "pass at least one of training or evaluation dataloaders with `batch_size` attribute returning an "
              "integer value or alternatively set an integer value in `train_micro_batch_size_per_gpu` in the "
              "deepspeed config file\", \"You cannot specify an optimizer in the config file and in the code at the "
              "same time.\""),
    # ---- the Hugging Face Trainer: TrainingArguments.__post_init__ and Trainer.__init__ -------------------------
    Row("trainers", r"--tf32 requires Ampere or a newer GPU arch|At most one of fp16 and bf16 can be True|"
                    r"`--half_precision_backend apex`: GPU bf16 is not supported by apex|"
                    r"--optim adamw_torch_fused with --fp16 requires PyTorch>2\.0|"
                    r"SageMaker Model Parallelism does not support BF16 yet",
        "trainer-config", "TrainingArguments precision",
        HF + "training_args.py __post_init__: \"--tf32 requires Ampere or a newer GPU arch, cuda>=11 and "
             "torch>=1.7\", \"At most one of fp16 and bf16 can be True, but not both\", \"`--half_precision_backend "
             "apex`: GPU bf16 is not supported by apex.\", \"--optim adamw_torch_fused with --fp16 requires "
             "PyTorch>2.0\""),
    # A half-precision setting refused for want of a CUDA device proves only that torch saw none: where the rank
    # also says why (CUDA initialization: the driver too old, no driver), that is the cause (tier FAILED: any
    # cause the rank shows says more); alone, it is the setting (a CPU node, a GPU without bf16).
    Row("trainers", r"Mixed precision training with AMP(?: or APEX)? \(`--(?:fp16|bf16)`[^)\n]*\)[^\n]*"
                    r"can only be used on|Tried to use `fp16` but it is not supported on cpu|"
                    r"Your setup doesn't support bf16|"
                    r"fp16 mixed precision requires a (?:GPU|device in)|"
                    r"bf16 mixed precision requires PyTorch >= 1\.10 and a supported device",
        "trainer-config", "half precision needs a GPU",
        HF + "training_args.py __post_init__: \"FP16 Mixed precision training with AMP or APEX (`--fp16`) and FP16 "
             "half precision evaluation (`--fp16_full_eval`) can only be used on CUDA devices.\" (4.36: \"... on CUDA "
             "or NPU devices or certain XPU devices (with IPEX).\"), \"BF16 Mixed precision training with AMP "
             "(`--bf16`) ... can only be used on CUDA or CPU devices.\", \"Your setup doesn't support bf16/gpu. You "
             "need torch>=1.10, using Ampere GPU with cuda>=11.0\" (4.20: \"Your setup doesn't support bf16. You need "
             "torch>=1.10, using Ampere GPU with cuda>=11.0 or using CPU (no_cuda)\"); trainer.py \"Tried to use "
             "`fp16` but it is not supported on cpu\"; " + ACC + "accelerator.py \"fp16 mixed precision requires a "
             "GPU (not %r).\" (v0.30; since: \"fp16 mixed precision requires a device in %s (not %r).\"), \"bf16 "
             "mixed precision requires PyTorch >= 1.10 and a supported device.\"",
        tier=FAILED),
    Row("trainers", r"Using --fsdp xxx together with --deepspeed is not possible|"
                    r"Using fsdp only works in distributed training|`--fsdp offload` can't work on its own|"
                    r"`--fsdp full_shard` is not compatible with `--fsdp shard_grad_op`|"
                    r"`--sharded_ddp (?:offload` can't work on its own|simple` is not compatible|zero_dp_2` is not "
                    r"compatible)|sharded_ddp is not supported with bf16|Unknown `fsdp` option: |"
                    r"Looks like distributed multinode run but MASTER_ADDR env not set|"
                    r"CPU distributed training backend is (?:not properly set|ccl\. but CCL_WORKER_COUNT)|"
                    r"Passing `optimizers` is not allowed if (?:Deepspeed or )?PyTorch FSDP is enabled",
        "trainer-config", "TrainingArguments distributed",
        HF + "trainer.py Trainer.__init__: \"Using --fsdp xxx together with --deepspeed is not possible, deactivate "
             "one of those flags.\", \"Using fsdp only works in distributed training.\"; training_args.py: \"`--fsdp "
             "offload` can't work on its own.\", \"Unknown `fsdp` option: %s\", (4.20) \"`--sharded_ddp simple` is not "
             "compatible with any other option.\", \"Looks like distributed multinode run but MASTER_ADDR env not "
             "set, please try exporting rank 0's hostname as MASTER_ADDR\""),
    Row("trainers", r"--load_best_model_at_end requires the sav(?:e and eval strategy to match|ing steps to be a)|"
                    r"evaluation strategy \S+ requires either non-zero --eval_steps or|"
                    r"logging strategy \S+ requires non-zero --logging_steps|"
                    r"--(?:logging|eval|save)_steps must be an integer if bigger than 1|"
                    r"Setting `strategy` as 'steps' requires a positive value for `steps`|"
                    r"--dataloader_prefetch_factor can only be set when data is loaded in a different process|"
                    r"You cannot perform fine-tuning on purely quantized models|"
                    r"The model you want to train is loaded in 8-bit precision|"
                    r"Output directory (?:\([^)\n]*\) )?already exists and is not empty",
        "trainer-config", "TrainingArguments steps and outputs",
        HF + "training_args.py __post_init__: \"--load_best_model_at_end requires the save and eval strategy to "
             "match\", \"evaluation strategy %s requires either non-zero --eval_steps or --logging_steps\", "
             "\"--save_steps must be an integer if bigger than 1: %s\"; trainer.py \"You cannot perform fine-tuning "
             "on purely quantized models.\"; the examples' run_*.py and hiyouga/LLaMA-Factory's parser.py \"Output "
             "directory already exists and is not empty. Please set `overwrite_output_dir`.\""),
    # ---- LLaMA-Factory: hparams/parser.py (_check_extra_dependencies, get_train_args) ---------------------------
    Row("trainers", r"Please specify `max_steps` in streaming mode|"
                    r"Please launch distributed training with `llamafactory-cli` or `torchrun`|"
                    r"Please use `FORCE_TORCHRUN=1` to launch DeepSpeed training|"
                    r"This device does not support `pure_bf16`|"
                    r"Turn off mixed precision training when using `pure_bf16`|"
                    r"Distributed training does not support layer-wise (?:GaLore|APOLLO)|"
                    r"BAdam does not yet support distributed training|Layer-wise BAdam only supports DeepSpeed ZeRO-3|"
                    r"Cannot use device map for quantized models in training|"
                    r"Some specified arguments are not used by the HfArgumentParser|"
                    r"Total Megatron Bridge parallel size \(\d+\) (?:exceeds|must divide) `world_size`",
        "trainer-config", "LLaMA-Factory arguments",
        LF + " get_train_args: \"Please specify `max_steps` in streaming mode.\", \"Please launch distributed training "
             "with `llamafactory-cli` or `torchrun`.\", \"Please use `FORCE_TORCHRUN=1` to launch DeepSpeed "
             "training.\", \"This device does not support `pure_bf16`.\", \"Distributed training does not support "
             "layer-wise GaLore.\"; _parse_args \"Some specified arguments are not used by the HfArgumentParser: "
             "%s\""),
    Row("trainers", r"DeepSpeed ZeRO-3 is incompatible with|is incompatible with DeepSpeed(?: ZeRO-3)?(?: or FSDP)?"
                    r"(?: yet)?\.|are incompatible with DeepSpeed(?: yet)?\.",
        "trainer-config", "LLaMA-Factory with DeepSpeed",
        LF + ": (v0.3) \"DeepSpeed ZeRO-3 is incompatible with quantization.\", (v0.7) \"DeepSpeed ZeRO-3 is "
             "incompatible with quantized models.\", \"Unsloth is incompatible with DeepSpeed ZeRO-3.\", \"`pure_bf16` "
             "is incompatible with DeepSpeed ZeRO-3.\", \"GaLore and BAdam are incompatible with DeepSpeed yet.\", "
             "\"Megatron Bridge is incompatible with DeepSpeed.\"; model/model_utils/quantization.py (v0.9) \"HQQ "
             "quantization is incompatible with DeepSpeed ZeRO-3 or FSDP.\""),
    # ---- DeepSpeed's launcher (launcher/runner.py, multinode_runner.py) -----------------------------------------
    Row("trainers", r"Hostfile is (?:empty or )?not formatted correctly|Hostfile contains (?:multiple entries for \S+|"
                    r"a bad entry)|Bad hostfile text:",
        "launch-args", "DeepSpeed hostfile",
        DS + "launcher/runner.py _parse_hostfile: \"Hostfile is empty or not formatted correctly, unable to proceed "
             "with launching.\" (v0.3: \"Hostfile is not formatted correctly, unable to proceed with launching.\"), "
             "\"Hostfile contains multiple entries for %s, unable to proceed with launching\", \"Bad hostfile text: "
             "%s\" (not fetch_hostfile's \"Unable to find hostfile, will proceed with training with local resources "
             "only.\": a single node's healthy start)"),
    Row("trainers", r"Hostname '[^'\n]*' not found in hostfile|No slot '[^'\n]*' specified on host|"
                    r"include_str and exclude_str are mutually exclusive|"
                    r"Cannot specify num_nodes/gpus with include/exclude|"
                    r"Num nodes is >1 but no extra nodes available via hostfile|"
                    r"num_nodes \S+ is not in MIN:MAX format|MIN:MAX format is only supported in elastic training|"
                    r"Master Addr is required when elastic training is enabled|"
                    r"Launching training without ssh, but --node_rank is not set correctly|"
                    r"(?:MPICH|Intel MPI|mvapich) requires same number of devices per node|"
                    r"backend does not support (?:worker include/exclusion|limiting num nodes/gpus)",
        "launch-args", "DeepSpeed resources",
        DS + "launcher/runner.py parse_resource_filter: \"Hostname '%s' not found in hostfile\", \"No slot '%s' "
             "specified on host '%s'\"; main: \"Cannot specify num_nodes/gpus with include/exclude\", \"Num nodes is "
             ">1 but no extra nodes available via hostfile\", parse_num_nodes \"num_nodes %s is not in MIN:MAX "
             "format\"; multinode_runner.py \"MPICH requires same number of devices per node\", \"%s backend does "
             "not support worker include/exclusion\""),
    Row("trainers", r"Unable to proceed, no GPU resources available", "cuda-setup", "DeepSpeed sees no GPU",
        DS + "launcher/runner.py main: \"Unable to proceed, no GPU resources available\" (the accelerator counts no "
             "device on the launching node)"),
    Row("trainers", r"pdsh is not installed, unable to proceed|launcher '[\w-]+' not installed\.", "missing-file",
        "DeepSpeed launcher missing",
        DS + "launcher/runner.py main: \"launcher '%s' not installed.\" (v0.3: \"pdsh is not installed, unable to "
             "proceed\")"),
    Row("trainers", r"Unable to detect suitable master address via .hostname -I.", "ssh", "DeepSpeed master address",
        DS + "launcher/runner.py main: \"Unable to detect suitable master address via 'hostname -I', please manually "
             "specify one via --master_addr\" (the ssh to the first host failed)"),
    # pdsh's rcmd module: without PDSH_RCMD_TYPE=ssh (DeepSpeed's runner sets it for its own pdsh) pdsh logs in with
    # rsh, which needs a privileged port and an rshd; pdsh's own ssh failures are the ssh space's
    Row("trainers", r"pdsh@[\w.-]+: [\w.-]+: (?:rcmd: socket: |connect: )|"
                    r"pdsh@[\w.-]+: unable to initialize an rcmd module",
        "ssh", "pdsh rcmd",
        "chaos/pdsh (21f59962) src/modules/xrcmd.c: \"%p: %S: rcmd: socket: %m\", \"%p: %S: connect: %m\"; "
        "src/pdsh/dsh.c \"%p: unable to initialize an rcmd module\"; " + DS + "launcher/multinode_runner.py "
        "PDSHRunner: environment['PDSH_RCMD_TYPE'] = 'ssh'"),
    # ---- DeepSpeed's engine (runtime/engine.py): what it asserts of the launch and of its config ----------------
    Row("trainers", r"DeepSpeed requires the LOCAL_RANK environment variable|"
                    r"Mismatch in local rank setting, args\.local_rank=|"
                    r"LOCAL_RANK \(\d+\) != OMPI_COMM_WORLD_LOCAL_RANK \(\d+\)",
        "launch-args", "DeepSpeed LOCAL_RANK",
        DS + "runtime/engine.py _do_args_sanity_check: \"DeepSpeed requires the LOCAL_RANK environment variable, it is "
             "set by the deepspeed launcher, deepspeed.init_distributed, or the torch's launcher.\", \"Mismatch in "
             "local rank setting, args.local_rank=%d but env['LOCAL_RANK']=%d.\"; _set_distributed_vars \"LOCAL_RANK "
             "(%d) != OMPI_COMM_WORLD_LOCAL_RANK (%d)\""),
    Row("trainers", r"Type (?:fp16|bf16) is not supported on your device|is not a supported DeepSpeed Optimizer|"
                    r"DeepSpeed does not recognize LR scheduler|DeepSpeed \S+ optimizer requires dynamic loss scaling|"
                    r"Amp and ZeRO are not currently compatible|MoE not supported with Stage 3|"
                    r"Native DeepSpeed MoE is not supported with ZeRO Stage 3|"
                    r"Elasticity is not currently supported with model parallelism",
        "ds-config", "DeepSpeed engine",
        DS + "runtime/engine.py _do_sanity_check: \"Type fp16 is not supported on your device.\", \"%s is not a "
             "supported DeepSpeed Optimizer\", \"DeepSpeed does not recognize LR scheduler %s\", \"DeepSpeed %s "
             "optimizer requires dynamic loss scaling\"; _configure_zero_optimizer \"MoE not supported with Stage "
             "3\"; _configure_optimizer \"Amp and ZeRO are not currently compatible\""),
    # ---- torchrun / torchelastic: its arguments and its rendezvous configuration --------------------------------
    Row("trainers", r"Unsupported nproc_per_node value: |nnodes=\S+ is not in \"MIN:MAX\" format|"
                    r"min_nodes must be > 0 and <= max_nodes|max_restarts must be >= 0|"
                    r"--local_ranks_filter must be a comma-separated list of integers|"
                    r"^\s*(?:torchrun|deepspeed): error: ",
        "launch-args", "torchrun arguments",
        TORCHRUN + "run.py determine_local_world_size \"Unsupported nproc_per_node value: %s\", parse_min_max_nnodes "
                   "'nnodes=%s is not in \"MIN:MAX\" format', config_from_args \"min_nodes must be > 0 and <= "
                   "max_nodes\"; argparse's \"torchrun: error: %s\" (the deepspeed runner's: \"deepspeed: error:\")"),
    Row("trainers", r"The (?:port number|hostname) of the rendezvous endpoint '[^'\n]*' must be|"
                    r"The rendezvous configuration (?:string must be in format|option '[^'\n]*' (?:must have a value "
                    r"specified|does not represent a valid))|The rendezvous backend '[^'\n]*' is not registered|"
                    r"The (?:minimum|maximum) number of (?:rendezvous )?nodes \(-?\d+\) must be|"
                    r"Endpoint is missing in endpoint\. Try to add --master-addr|port is missing in endpoint: |"
                    r"Port is absent in endpoint: |(?:rank|endpoint) is absent in RendezvousParameters|"
                    r"The (?:join|last_call|close|heartbeat) timeout \([^)\n]*\) must be positive",
        "launch-args", "torchrun rendezvous arguments",
        TORCHRUN + "elastic/rendezvous/utils.py parse_rendezvous_endpoint: \"The port number of the rendezvous "
                   "endpoint '%s' must be an integer between 0 and 65536.\", \"The hostname of the rendezvous "
                   "endpoint '%s' must be a dot-separated list of labels, an IPv4 address, or an IPv6 address.\"; "
                   "_parse_rendezvous_config; api.py RendezvousParameters / RendezvousHandlerRegistry \"The "
                   "rendezvous backend '%s' is not registered. Did you forget to call `register`?\"; "
                   "static_tcp_rendezvous.py \"rank is absent in RendezvousParameters.Try add --node-rank to the cmd "
                   "request\"; launcher/api.py _get_addr_and_port \"Endpoint is missing in endpoint. Try to add "
                   "--master-addr and --master-port\""),
    Row("trainers", r"ValueError: Cuda is not available\.", "cuda-setup", "torchrun --nproc-per-node=gpu",
        TORCHRUN + "run.py determine_local_world_size: \"Cuda is not available.\" (--nproc-per-node=gpu on a node "
                   "where torch sees no GPU)"),
]
