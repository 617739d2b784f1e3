"""A stand-in training program for the README's first job: every task says where it
runs and which GPUs it was given, then takes a few steps.

phalanx sets PHALANX_TASK_RANK / PHALANX_TASK_COUNT / PHALANX_NODE_NAME (and Slurm's
SLURM_PROCID / SLURM_NTASKS / SLURMD_NODENAME) and CUDA_VISIBLE_DEVICES in every task.
"""

import os
import time

rank = int(os.environ.get("PHALANX_TASK_RANK", "0"))
size = int(os.environ.get("PHALANX_TASK_COUNT", "1"))
node = os.environ.get("PHALANX_NODE_NAME", "?")
gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
print(f"rank {rank}/{size} on {node} with GPUs {gpus}", flush=True)
for step in range(1, 4):
    time.sleep(0.5)
    print(f"rank {rank} step {step} loss {2.0 / step:.3f}", flush=True)
