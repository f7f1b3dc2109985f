"""CuPy on memfit's allocator (libmemfit_alloc.so through cupy.cuda.set_allocator): arrays made, computed on
and freed; the result must equal the same computation on CuPy's own pool, and memfit's stats must show the
arrays while they live and none after.

    python3 gpu/cupy_check.py build/gpu/src/libmemfit_alloc.so
"""
import json
import sys


def main():
    lib = sys.argv[1]
    import cupy
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import memfit_allocators

    def compute():
        rs = cupy.random.RandomState(0)
        a = rs.standard_normal((2048, 2048), dtype=cupy.float32)
        b = rs.standard_normal((2048, 2048), dtype=cupy.float32)
        return float((a @ b).sum())

    expected = compute()  # CuPy's own pool
    memfit_allocators.use_in_cupy(lib)
    before = memfit_allocators.stats(lib, 0)
    x = cupy.ones((1024, 1024), dtype=cupy.float32)  # 4 MiB held across the stats read
    during = memfit_allocators.stats(lib, 0)
    got = compute()
    del x
    after = memfit_allocators.stats(lib, 0)
    print(json.dumps({
        "sum_cupy_pool": expected, "sum_memfit": got, "equal": expected == got,
        "bytes_in_use_before": before["bytes_in_use"] if before else None,
        "bytes_in_use_during": during["bytes_in_use"], "bytes_in_use_after": after["bytes_in_use"],
        "num_allocs": after["num_allocs"], "peak_bytes_in_use": after["peak_bytes_in_use"],
    }))


if __name__ == "__main__":
    main()
