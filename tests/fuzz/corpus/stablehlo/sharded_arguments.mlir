module @jit_f attributes {mhlo.num_partitions = 8 : i32} {
  sdy.mesh @mesh = <["x"=4, "y"=2]>
  func.func public @main(%arg0: tensor<1000x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x", "y"}, {}]>}, %arg1: tensor<64x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x":(1)2}]>}, %arg2: tensor<64x30xf32> {mhlo.sharding = "{devices=[1,4,2]<=[8] last_tile_dim_replicate}"}, %arg3: tensor<64xf32> {jax.buffer_donor = true, sdy.sharding = #sdy.sharding<@mesh, [{"y"}]>}) -> (tensor<64xf32>) {
    %0 = stablehlo.negate %arg3 : tensor<64xf32>
    return %0 : tensor<64xf32>
  }
}
