"""The GPT-2 training loop of ../shared/data/traces/reference_workloads.py (12 layers, 768 wide, batch 8,
sequence 1024, AdamW, fp32, 4 steps) with PyTorch's own allocator or memfit's through
CUDAPluggableAllocator. One allocator per process (PyTorch allows one switch, before the first tensor).

    python3 gpu/pytorch_gpt2.py torch            > torch.json
    MEMFIT_GPT2_BATCH=24 ...                     (a bigger step: gpu/share_gpt2.sh runs two at once)
    XLA_PYTHON_CLIENT_PREALLOCATE=false python3 gpu/pytorch_gpt2.py memfit LIB.so > memfit_bfc.json

Prints one JSON line: the allocator, the loss of every step (equal across allocators: same seeds, same
kernels), seconds per step, and the peak reserved and in-use bytes.
"""
import json
import sys
import time


def main():
    which = sys.argv[1]
    lib = sys.argv[2] if len(sys.argv) > 2 else None
    import torch
    if which == "memfit":
        sys.path.insert(0, __file__.rsplit("/", 1)[0])
        import memfit_allocators
        memfit_allocators.use_in_pytorch(lib)
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator(device="cpu").manual_seed(0)
    losses, times = [], []
    import os
    batch = int(os.environ.get("MEMFIT_GPT2_BATCH", "8"))
    for _ in range(4):
        x = torch.randint(0, 50257, (batch, 1024), generator=g).cuda()
        torch.cuda.synchronize()
        t0 = time.time()
        out = model(input_ids=x, labels=x)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.time() - t0)
        losses.append(float(out.loss))
    rec = {"allocator": which, "batch": batch, "losses": losses, "step_s": times}
    if which == "memfit":
        import memfit_allocators
        rec["memfit_stats"] = memfit_allocators.stats(lib, 0)
    else:
        rec["max_memory_reserved"] = torch.cuda.max_memory_reserved()
        rec["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    print(json.dumps(rec))


if __name__ == "__main__":
    main()
