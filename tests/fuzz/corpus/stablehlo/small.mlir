module @jit_f attributes {mhlo.num_partitions = 1 : i32} {
  func.func public @main(%arg0: tensor<4x8xf32> {tf.aliasing_output = 1 : i32}, %arg1: tensor<8xf32>) -> (tensor<4xf32> {jax.result_info = "[0]"}, tensor<4x8xf32>) {
    %0 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<8xf32>) -> tensor<4x8xf32>
    %1 = stablehlo.multiply %arg0, %0 : tensor<4x8xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %2 = stablehlo.reduce(%1 init: %cst) applies stablehlo.add across dimensions = [1] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4xf32>
    %3:2 = call @pair(%2, %1) : (tensor<4xf32>, tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4x8xi1>)
    %4 = stablehlo.select %3#1, %1, %0 : tensor<4x8xi1>, tensor<4x8xf32>
    return %3#0, %4 : tensor<4xf32>, tensor<4x8xf32>
  }
  func.func private @pair(%arg0: tensor<4xf32>, %arg1: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4x8xi1>) {
    %c = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<4x8xf32>
    %1 = stablehlo.compare  GT, %arg1, %0,  FLOAT : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
    return %arg0, %1 : tensor<4xf32>, tensor<4x8xi1>
  }
}
