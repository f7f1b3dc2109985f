module @jit_f attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=8]>
  func.func public @main(%arg0: tensor<8192x1024xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}, %arg1: tensor<1024x1024xf8E4M3FN>, %arg2: tensor<1x2x2x1xf32>) -> (tensor<1024xf32> {jax.result_info = "result[0]"}, tensor<1024x1024xbf16>, tensor<8x1024xf32>) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x"}, {}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%arg3: tensor<1024x1024xf32>) {
      %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %3 = stablehlo.reduce(%arg3 init: %cst) applies stablehlo.add across dimensions = [0] : (tensor<1024x1024xf32>, tensor<f32>) -> tensor<1024xf32>
      %4 = "stablehlo.all_reduce"(%3) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({
      ^bb0(%arg4: tensor<f32>, %arg5: tensor<f32>):
        %5 = stablehlo.add %arg4, %arg5 : tensor<f32>
        stablehlo.return %5 : tensor<f32>
      }) : (tensor<1024xf32>) -> tensor<1024xf32>
      sdy.return %4 : tensor<1024xf32>
    } : (tensor<8192x1024xf32>) -> tensor<1024xf32>
    %1 = stablehlo.convert %arg1 : (tensor<1024x1024xf8E4M3FN>) -> tensor<1024x1024xbf16>
    %2 = "stablehlo.all_gather"(%0) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> : (tensor<1024xf32>) -> tensor<8192xf32>
    %6 = stablehlo.reshape %2 : (tensor<8192xf32>) -> tensor<8x1024xf32>
    return %0, %1, %6 : tensor<1024xf32>, tensor<1024x1024xbf16>, tensor<8x1024xf32>
  }
}
