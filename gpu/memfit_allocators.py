"""memfit's allocators in PyTorch and CuPy, through libmemfit_alloc.so (include/memfit/c/memfit_alloc.h).

    import memfit_allocators
    memfit_allocators.use_in_pytorch("build/gpu/src/libmemfit_alloc.so")   # before the first CUDA tensor
    memfit_allocators.use_in_cupy("build/gpu/src/libmemfit_alloc.so")

The allocator and its limit come from the XLA variables, as in JAX: XLA_PYTHON_CLIENT_ALLOCATOR=bfc (default,
preallocates XLA_CLIENT_MEM_FRACTION of the GPU), XLA_PYTHON_CLIENT_PREALLOCATE=false (grows), =platform.
"""
import ctypes
import json


def _lib(path):
    lib = ctypes.CDLL(path)
    lib.memfit_alloc.restype = ctypes.c_void_p
    lib.memfit_alloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.memfit_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.memfit_stats_json.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    lib.memfit_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.memfit_empty_cache.argtypes = [ctypes.c_int]
    return lib


def stats(path, device=0):
    """JAX's memory_stats() keys for the memfit allocator of `device`."""
    lib = _lib(path)
    buf = ctypes.create_string_buffer(1 << 16)
    n = lib.memfit_stats_json(device, buf, len(buf))
    return json.loads(buf.value.decode()) if n > 0 else None


def empty_cache(path, device=0):
    """Gives the page-mapped pool's cached pages back to the GPU once their work is done
    (torch.cuda.empty_cache() for memfit's allocator). 0 on success."""
    return _lib(path).memfit_empty_cache(device)


def last_error(path):
    lib = _lib(path)
    buf = ctypes.create_string_buffer(1 << 16)
    lib.memfit_last_error(buf, len(buf))
    return buf.value.decode()


def use_in_pytorch(path):
    import torch
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "memfit_alloc", "memfit_free")
    torch.cuda.memory.change_current_allocator(alloc)
    return alloc


def use_in_cupy(path):
    """cupy.cuda.set_allocator: each block is memfit's, freed when CuPy drops its last reference."""
    import cupy
    lib = _lib(path)

    class _Owner:
        def __init__(self, ptr, size, device):
            self.ptr, self.size, self.device = ptr, size, device

        def __del__(self):
            lib.memfit_free(self.ptr, self.size, self.device, None)

    def allocator(size):
        device = cupy.cuda.runtime.getDevice()
        ptr = lib.memfit_alloc(size, device, None)
        if not ptr:
            raise cupy.cuda.memory.OutOfMemoryError(size, 0, 0)
        mem = cupy.cuda.memory.UnownedMemory(ptr, size, _Owner(ptr, size, device), device_id=device)
        return cupy.cuda.memory.MemoryPointer(mem, 0)

    cupy.cuda.set_allocator(allocator)
    return allocator
