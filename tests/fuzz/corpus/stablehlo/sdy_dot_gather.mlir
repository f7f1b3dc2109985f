module @jit_step attributes {mhlo.num_partitions = 8 : i32} {
  sdy.mesh @mesh = <["data"=2, "model"=4]>
  func.func public @main(%arg0: tensor<64x512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, %arg1: tensor<512x2048xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %arg2: tensor<2048x512xf32> {jax.buffer_donor = true, sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}, %arg3: tensor<64x8x1xi32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}, {}]>}) -> (tensor<64x512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, tensor<64x8x512xf32>) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<64x512xf32>, tensor<512x2048xf32>) -> tensor<64x2048xf32>
    %1 = stablehlo.tanh %0 : tensor<64x2048xf32>
    %2 = stablehlo.dot_general %1, %arg2, contracting_dims = [1] x [0] : (tensor<64x2048xf32>, tensor<2048x512xf32>) -> tensor<64x512xf32>
    %3 = stablehlo.broadcast_in_dim %arg0, dims = [0, 2] : (tensor<64x512xf32>) -> tensor<64x8x512xf32>
    %4 = "stablehlo.gather"(%3, %arg3) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [1], operand_batching_dims = [0], start_indices_batching_dims = [0], start_index_map = [1], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 1, 512>}> : (tensor<64x8x512xf32>, tensor<64x8x1xi32>) -> tensor<64x8x512xf32>
    return %2, %4 : tensor<64x512xf32>, tensor<64x8x512xf32>
  }
}
