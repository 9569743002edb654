"""torch.distributed jobs loading and saving through libtzr.

    import torch.distributed as dist, tzr.distributed as tzd
    dist.init_process_group("gloo")            # or "nccl"; started by torchrun or
                                               # python3 -m tzr.distributed.launch -n N
    sd = tzd.load("model.tensors", mode="broadcast")   # the same on every rank
    tzd.load_into_module(model, "ckpt/model.tzr-index.json", mode="allgather")
    tzd.save(model, "ckpt/step-100/model")     # a shard per rank + the manifest

See load.py for what each mode costs; every failure, on any rank, raises
the same exception type on every rank."""
from .load import MODES, load, load_into_module
from .save import save

__all__ = ["load", "load_into_module", "save", "MODES"]
