"""Does torch's FSDP (1 and 2) train on the CPU over gloo? `torchrun --nproc_per_node 2 bench/fsdp_probe.py`.

Measured with torch 2.14.1 on the 2-core CI machine: FSDP2 (fully_shard) trains and gathers its state dict
(DTensor.full_tensor) over gloo; FSDP1 refuses: "FSDP needs a non-CPU accelerator device, but no accelerator
device is detected."
"""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
def model(): return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
results = {}
try:
    from torch.distributed.fsdp import fully_shard  # FSDP2
    m = model(); fully_shard(m[0]); fully_shard(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m(x[rank * 2:(rank + 1) * 2]).sum().backward(); opt.step()
    full = {k: v.full_tensor() for k, v in m.state_dict().items()}
    results["fsdp2"] = f"ok, gathered {sorted(full)[0]} {tuple(full[sorted(full)[0]].shape)}"
except Exception as exc:
    results["fsdp2"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
try:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    m = FSDP(model(), device_id=None)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m(x[rank * 2:(rank + 1) * 2]).sum().backward(); opt.step()
    results["fsdp1"] = "ok"
except Exception as exc:
    results["fsdp1"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
print(rank, results, flush=True)
dist.destroy_process_group()
