module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<1024x1024xf32>, %arg1: tensor<i32>, %arg2: tensor<2xui32>) -> (tensor<1024x1024xf32> {jax.result_info = "result[0]"}, tensor<1024xi32> {jax.result_info = "result[1]"}, tensor<16x16xcomplex<f32>>, tensor<1024x1024xf32>) {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %0:2 = stablehlo.while(%iterArg = %c, %iterArg_0 = %arg0) : tensor<i32>, tensor<1024x1024xf32>
    cond {
      %c_1 = stablehlo.constant dense<10> : tensor<i32>
      %5 = stablehlo.compare  LT, %iterArg, %c_1,  SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %5 : tensor<i1>
    } do {
      %5 = stablehlo.dot_general %iterArg_0, %iterArg_0, contracting_dims = [1] x [0] : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
      %c_1 = stablehlo.constant dense<1> : tensor<i32>
      %6 = stablehlo.add %iterArg, %c_1 : tensor<i32>
      stablehlo.return %6, %5 : tensor<i32>, tensor<1024x1024xf32>
    }
    %1 = stablehlo.iota dim = 0 : tensor<1024xi32>
    %2 = stablehlo.slice %0#1 [0:1, 0:1024] : (tensor<1024x1024xf32>) -> tensor<1x1024xf32>
    %3 = stablehlo.reshape %2 : (tensor<1x1024xf32>) -> tensor<1024xf32>
    %4:2 = "stablehlo.sort"(%3, %1) <{dimension = 0 : i64, is_stable = true}> ({
    ^bb0(%arg3: tensor<f32>, %arg4: tensor<f32>, %arg5: tensor<i32>, %arg6: tensor<i32>):
      %5 = stablehlo.compare  LT, %arg3, %arg4,  TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %5 : tensor<i1>
    }) : (tensor<1024xf32>, tensor<1024xi32>) -> (tensor<1024xf32>, tensor<1024xi32>)
    %c_2 = stablehlo.constant dense<0> : tensor<i32>
    %7 = stablehlo.compare  GT, %arg1, %c_2,  SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %8 = "stablehlo.if"(%7) ({
      %9 = stablehlo.negate %0#1 : tensor<1024x1024xf32>
      stablehlo.return %9 : tensor<1024x1024xf32>
    }, {
      stablehlo.return %0#1 : tensor<1024x1024xf32>
    }) : (tensor<i1>) -> tensor<1024x1024xf32>
    %10 = stablehlo.convert %arg1 : (tensor<i32>) -> tensor<i32>
    %11 = "stablehlo.case"(%10) ({
      %9 = stablehlo.exponential %8 : tensor<1024x1024xf32>
      stablehlo.return %9 : tensor<1024x1024xf32>
    }, {
      stablehlo.return %8 : tensor<1024x1024xf32>
    }) : (tensor<i32>) -> tensor<1024x1024xf32>
    %output_state, %output = stablehlo.rng_bit_generator %arg2, algorithm =  DEFAULT : (tensor<2xui32>) -> (tensor<2xui32>, tensor<16x16xui32>)
    %12 = stablehlo.convert %output : (tensor<16x16xui32>) -> tensor<16x16xf32>
    %13 = stablehlo.complex %12, %12 : tensor<16x16xcomplex<f32>>
    %14 = stablehlo.fft %13, type =  FFT, length = [16, 16] : (tensor<16x16xcomplex<f32>>) -> tensor<16x16xcomplex<f32>>
    %cst_9 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %15 = stablehlo.pad %11, %cst_9, low = [0, 0], high = [0, 0], interior = [0, 0] : (tensor<1024x1024xf32>, tensor<f32>) -> tensor<1024x1024xf32>
    %16 = stablehlo.reverse %15, dims = [0] : tensor<1024x1024xf32>
    %17 = stablehlo.clamp %cst_9, %16, %cst_9 : (tensor<f32>, tensor<1024x1024xf32>, tensor<f32>) -> tensor<1024x1024xf32>
    return %17, %4#1, %14, %11 : tensor<1024x1024xf32>, tensor<1024xi32>, tensor<16x16xcomplex<f32>>, tensor<1024x1024xf32>
  }
}
