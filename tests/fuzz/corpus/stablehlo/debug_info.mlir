#loc1 = loc("x")
module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<1024x1024xf32> {mhlo.layout_mode = "default"} loc("x"), %arg1: tensor<1024x1024xf32> {mhlo.memory_kind = "pinned_host"} loc("y")) -> (tensor<1024x1024xf32> {jax.result_info = "result"}) {
    %0 = stablehlo.sine %arg0 : tensor<1024x1024xf32> loc(#loc8)
    %1 = stablehlo.dot_general %0, %0, contracting_dims = [1] x [0] : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32> loc(#loc9)
    %2 = stablehlo.cosine %1 : tensor<1024x1024xf32> loc(#loc10)
    return %2 : tensor<1024x1024xf32> loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
#loc2 = loc("/tmp/x.py":3:11)
#loc8 = loc("jit(f)/jit(main)/sin"(#loc2))
#loc9 = loc("jit(f)/jit(main)/dot_general"(#loc2))
#loc10 = loc("jit(f)/jit(main)/cos"(#loc2))
