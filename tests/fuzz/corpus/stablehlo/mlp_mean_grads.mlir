module @jit_step attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<512x1024xf32> {tf.aliasing_output = 0 : i32}, %arg1: tensor<1024xf32> {tf.aliasing_output = 1 : i32}, %arg2: tensor<1024x1024xf32> {tf.aliasing_output = 2 : i32}, %arg3: tensor<1024xf32> {tf.aliasing_output = 3 : i32}, %arg4: tensor<1024x1024xf32> {tf.aliasing_output = 4 : i32}, %arg5: tensor<1024xf32> {tf.aliasing_output = 5 : i32}, %arg6: tensor<1024x1024xf32> {tf.aliasing_output = 6 : i32}, %arg7: tensor<1024xf32> {tf.aliasing_output = 7 : i32}, %arg8: tensor<1024x512xf32> {tf.aliasing_output = 8 : i32}, %arg9: tensor<512xf32> {tf.aliasing_output = 9 : i32}, %arg10: tensor<512x1024xf32> {tf.aliasing_output = 10 : i32}, %arg11: tensor<1024xf32> {tf.aliasing_output = 11 : i32}, %arg12: tensor<1024x1024xf32> {tf.aliasing_output = 12 : i32}, %arg13: tensor<1024xf32> {tf.aliasing_output = 13 : i32}, %arg14: tensor<1024x1024xf32> {tf.aliasing_output = 14 : i32}, %arg15: tensor<1024xf32> {tf.aliasing_output = 15 : i32}, %arg16: tensor<1024x1024xf32> {tf.aliasing_output = 16 : i32}, %arg17: tensor<1024xf32> {tf.aliasing_output = 17 : i32}, %arg18: tensor<1024x512xf32> {tf.aliasing_output = 18 : i32}, %arg19: tensor<512xf32> {tf.aliasing_output = 19 : i32}, %arg20: tensor<512x1024xf32> {tf.aliasing_output = 20 : i32}, %arg21: tensor<1024xf32> {tf.aliasing_output = 21 : i32}, %arg22: tensor<1024x1024xf32> {tf.aliasing_output = 22 : i32}, %arg23: tensor<1024xf32> {tf.aliasing_output = 23 : i32}, %arg24: tensor<1024x1024xf32> {tf.aliasing_output = 24 : i32}, %arg25: tensor<1024xf32> {tf.aliasing_output = 25 : i32}, %arg26: tensor<1024x1024xf32> {tf.aliasing_output = 26 : i32}, %arg27: tensor<1024xf32> {tf.aliasing_output = 27 : i32}, %arg28: tensor<1024x512xf32> {tf.aliasing_output = 28 : i32}, %arg29: tensor<512xf32> {tf.aliasing_output = 29 : i32}, %arg30: tensor<i32> {tf.aliasing_output = 30 : i32}, %arg31: tensor<128x512xf32>, %arg32: tensor<128x512xf32>) -> (tensor<512x1024xf32> {jax.result_info = "result[0][0][0]"}, tensor<1024xf32> {jax.result_info = "result[0][0][1]"}, tensor<1024x1024xf32> {jax.result_info = "result[0][1][0]"}, tensor<1024xf32> {jax.result_info = "result[0][1][1]"}, tensor<1024x1024xf32> {jax.result_info = "result[0][2][0]"}, tensor<1024xf32> {jax.result_info = "result[0][2][1]"}, tensor<1024x1024xf32> {jax.result_info = "result[0][3][0]"}, tensor<1024xf32> {jax.result_info = "result[0][3][1]"}, tensor<1024x512xf32> {jax.result_info = "result[0][4][0]"}, tensor<512xf32> {jax.result_info = "result[0][4][1]"}, tensor<512x1024xf32> {jax.result_info = "result[1][0][0][0]"}, tensor<1024xf32> {jax.result_info = "result[1][0][0][1]"}, tensor<1024x1024xf32> {jax.result_info = "result[1][0][1][0]"}, tensor<1024xf32> {jax.result_info = "result[1][0][1][1]"}, tensor<1024x1024xf32> {jax.result_info = "result[1][0][2][0]"}, tensor<1024xf32> {jax.result_info = "result[1][0][2][1]"}, tensor<1024x1024xf32> {jax.result_info = "result[1][0][3][0]"}, tensor<1024xf32> {jax.result_info = "result[1][0][3][1]"}, tensor<1024x512xf32> {jax.result_info = "result[1][0][4][0]"}, tensor<512xf32> {jax.result_info = "result[1][0][4][1]"}, tensor<512x1024xf32> {jax.result_info = "result[1][1][0][0]"}, tensor<1024xf32> {jax.result_info = "result[1][1][0][1]"}, tensor<1024x1024xf32> {jax.result_info = "result[1][1][1][0]"}, tensor<1024xf32> {jax.result_info = "result[1][1][1][1]"}, tensor<1024x1024xf32> {jax.result_info = "result[1][1][2][0]"}, tensor<1024xf32> {jax.result_info = "result[1][1][2][1]"}, tensor<1024x1024xf32> {jax.result_info = "result[1][1][3][0]"}, tensor<1024xf32> {jax.result_info = "result[1][1][3][1]"}, tensor<1024x512xf32> {jax.result_info = "result[1][1][4][0]"}, tensor<512xf32> {jax.result_info = "result[1][1][4][1]"}, tensor<i32> {jax.result_info = "result[1][2]"}, tensor<f32> {jax.result_info = "result[2]"}) {
    %0 = stablehlo.dot_general %arg31, %arg0, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<128x512xf32>, tensor<512x1024xf32>) -> tensor<128x1024xf32>
    %1 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<1024xf32>) -> tensor<1x1024xf32>
    %2 = stablehlo.broadcast_in_dim %1, dims = [0, 1] : (tensor<1x1024xf32>) -> tensor<128x1024xf32>
    %3 = stablehlo.add %0, %2 : tensor<128x1024xf32>
    %4 = stablehlo.multiply %3, %3 : tensor<128x1024xf32>
    %5 = stablehlo.multiply %4, %3 : tensor<128x1024xf32>
    %6 = stablehlo.multiply %3, %3 : tensor<128x1024xf32>
    %cst = stablehlo.constant dense<3.000000e+00> : tensor<f32>
    %7 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %8 = stablehlo.multiply %7, %6 : tensor<128x1024xf32>
    %cst_0 = stablehlo.constant dense<4.471500e-02> : tensor<f32>
    %9 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %10 = stablehlo.multiply %9, %5 : tensor<128x1024xf32>
    %11 = stablehlo.add %3, %10 : tensor<128x1024xf32>
    %cst_1 = stablehlo.constant dense<0.797884583> : tensor<f32>
    %12 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %13 = stablehlo.multiply %12, %11 : tensor<128x1024xf32>
    %14 = stablehlo.tanh %13 : tensor<128x1024xf32>
    %cst_2 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %15 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %16 = stablehlo.add %15, %14 : tensor<128x1024xf32>
    %cst_3 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %17 = stablehlo.broadcast_in_dim %cst_3, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %18 = stablehlo.subtract %17, %14 : tensor<128x1024xf32>
    %19 = stablehlo.multiply %16, %18 : tensor<128x1024xf32>
    %cst_4 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %20 = stablehlo.broadcast_in_dim %cst_4, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %21 = stablehlo.add %20, %14 : tensor<128x1024xf32>
    %cst_5 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %22 = stablehlo.broadcast_in_dim %cst_5, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %23 = stablehlo.multiply %22, %21 : tensor<128x1024xf32>
    %24 = stablehlo.multiply %3, %23 : tensor<128x1024xf32>
    %25 = stablehlo.dot_general %24, %arg2, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<128x1024xf32>, tensor<1024x1024xf32>) -> tensor<128x1024xf32>
    %26 = stablehlo.broadcast_in_dim %arg3, dims = [1] : (tensor<1024xf32>) -> tensor<1x1024xf32>
    %27 = stablehlo.broadcast_in_dim %26, dims = [0, 1] : (tensor<1x1024xf32>) -> tensor<128x1024xf32>
    %28 = stablehlo.add %25, %27 : tensor<128x1024xf32>
    %29 = stablehlo.multiply %28, %28 : tensor<128x1024xf32>
    %30 = stablehlo.multiply %29, %28 : tensor<128x1024xf32>
    %31 = stablehlo.multiply %28, %28 : tensor<128x1024xf32>
    %cst_6 = stablehlo.constant dense<3.000000e+00> : tensor<f32>
    %32 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %33 = stablehlo.multiply %32, %31 : tensor<128x1024xf32>
    %cst_7 = stablehlo.constant dense<4.471500e-02> : tensor<f32>
    %34 = stablehlo.broadcast_in_dim %cst_7, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %35 = stablehlo.multiply %34, %30 : tensor<128x1024xf32>
    %36 = stablehlo.add %28, %35 : tensor<128x1024xf32>
    %cst_8 = stablehlo.constant dense<0.797884583> : tensor<f32>
    %37 = stablehlo.broadcast_in_dim %cst_8, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %38 = stablehlo.multiply %37, %36 : tensor<128x1024xf32>
    %39 = stablehlo.tanh %38 : tensor<128x1024xf32>
    %cst_9 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %40 = stablehlo.broadcast_in_dim %cst_9, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %41 = stablehlo.add %40, %39 : tensor<128x1024xf32>
    %cst_10 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %42 = stablehlo.broadcast_in_dim %cst_10, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %43 = stablehlo.subtract %42, %39 : tensor<128x1024xf32>
    %44 = stablehlo.multiply %41, %43 : tensor<128x1024xf32>
    %cst_11 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %45 = stablehlo.broadcast_in_dim %cst_11, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %46 = stablehlo.add %45, %39 : tensor<128x1024xf32>
    %cst_12 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %47 = stablehlo.broadcast_in_dim %cst_12, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %48 = stablehlo.multiply %47, %46 : tensor<128x1024xf32>
    %49 = stablehlo.multiply %28, %48 : tensor<128x1024xf32>
    %50 = stablehlo.dot_general %49, %arg4, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<128x1024xf32>, tensor<1024x1024xf32>) -> tensor<128x1024xf32>
    %51 = stablehlo.broadcast_in_dim %arg5, dims = [1] : (tensor<1024xf32>) -> tensor<1x1024xf32>
    %52 = stablehlo.broadcast_in_dim %51, dims = [0, 1] : (tensor<1x1024xf32>) -> tensor<128x1024xf32>
    %53 = stablehlo.add %50, %52 : tensor<128x1024xf32>
    %54 = stablehlo.multiply %53, %53 : tensor<128x1024xf32>
    %55 = stablehlo.multiply %54, %53 : tensor<128x1024xf32>
    %56 = stablehlo.multiply %53, %53 : tensor<128x1024xf32>
    %cst_13 = stablehlo.constant dense<3.000000e+00> : tensor<f32>
    %57 = stablehlo.broadcast_in_dim %cst_13, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %58 = stablehlo.multiply %57, %56 : tensor<128x1024xf32>
    %cst_14 = stablehlo.constant dense<4.471500e-02> : tensor<f32>
    %59 = stablehlo.broadcast_in_dim %cst_14, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %60 = stablehlo.multiply %59, %55 : tensor<128x1024xf32>
    %61 = stablehlo.add %53, %60 : tensor<128x1024xf32>
    %cst_15 = stablehlo.constant dense<0.797884583> : tensor<f32>
    %62 = stablehlo.broadcast_in_dim %cst_15, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %63 = stablehlo.multiply %62, %61 : tensor<128x1024xf32>
    %64 = stablehlo.tanh %63 : tensor<128x1024xf32>
    %cst_16 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %65 = stablehlo.broadcast_in_dim %cst_16, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %66 = stablehlo.add %65, %64 : tensor<128x1024xf32>
    %cst_17 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %67 = stablehlo.broadcast_in_dim %cst_17, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %68 = stablehlo.subtract %67, %64 : tensor<128x1024xf32>
    %69 = stablehlo.multiply %66, %68 : tensor<128x1024xf32>
    %cst_18 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %70 = stablehlo.broadcast_in_dim %cst_18, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %71 = stablehlo.add %70, %64 : tensor<128x1024xf32>
    %cst_19 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %72 = stablehlo.broadcast_in_dim %cst_19, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %73 = stablehlo.multiply %72, %71 : tensor<128x1024xf32>
    %74 = stablehlo.multiply %53, %73 : tensor<128x1024xf32>
    %75 = stablehlo.dot_general %74, %arg6, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<128x1024xf32>, tensor<1024x1024xf32>) -> tensor<128x1024xf32>
    %76 = stablehlo.broadcast_in_dim %arg7, dims = [1] : (tensor<1024xf32>) -> tensor<1x1024xf32>
    %77 = stablehlo.broadcast_in_dim %76, dims = [0, 1] : (tensor<1x1024xf32>) -> tensor<128x1024xf32>
    %78 = stablehlo.add %75, %77 : tensor<128x1024xf32>
    %79 = stablehlo.multiply %78, %78 : tensor<128x1024xf32>
    %80 = stablehlo.multiply %79, %78 : tensor<128x1024xf32>
    %81 = stablehlo.multiply %78, %78 : tensor<128x1024xf32>
    %cst_20 = stablehlo.constant dense<3.000000e+00> : tensor<f32>
    %82 = stablehlo.broadcast_in_dim %cst_20, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %83 = stablehlo.multiply %82, %81 : tensor<128x1024xf32>
    %cst_21 = stablehlo.constant dense<4.471500e-02> : tensor<f32>
    %84 = stablehlo.broadcast_in_dim %cst_21, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %85 = stablehlo.multiply %84, %80 : tensor<128x1024xf32>
    %86 = stablehlo.add %78, %85 : tensor<128x1024xf32>
    %cst_22 = stablehlo.constant dense<0.797884583> : tensor<f32>
    %87 = stablehlo.broadcast_in_dim %cst_22, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %88 = stablehlo.multiply %87, %86 : tensor<128x1024xf32>
    %89 = stablehlo.tanh %88 : tensor<128x1024xf32>
    %cst_23 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %90 = stablehlo.broadcast_in_dim %cst_23, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %91 = stablehlo.add %90, %89 : tensor<128x1024xf32>
    %cst_24 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %92 = stablehlo.broadcast_in_dim %cst_24, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %93 = stablehlo.subtract %92, %89 : tensor<128x1024xf32>
    %94 = stablehlo.multiply %91, %93 : tensor<128x1024xf32>
    %cst_25 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %95 = stablehlo.broadcast_in_dim %cst_25, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %96 = stablehlo.add %95, %89 : tensor<128x1024xf32>
    %cst_26 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %97 = stablehlo.broadcast_in_dim %cst_26, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %98 = stablehlo.multiply %97, %96 : tensor<128x1024xf32>
    %99 = stablehlo.multiply %78, %98 : tensor<128x1024xf32>
    %100 = stablehlo.dot_general %99, %arg8, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<128x1024xf32>, tensor<1024x512xf32>) -> tensor<128x512xf32>
    %101 = stablehlo.broadcast_in_dim %arg9, dims = [1] : (tensor<512xf32>) -> tensor<1x512xf32>
    %102 = stablehlo.broadcast_in_dim %101, dims = [0, 1] : (tensor<1x512xf32>) -> tensor<128x512xf32>
    %103 = stablehlo.add %100, %102 : tensor<128x512xf32>
    %104 = stablehlo.subtract %103, %arg32 : tensor<128x512xf32>
    %105 = stablehlo.multiply %104, %104 : tensor<128x512xf32>
    %cst_27 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %106 = stablehlo.broadcast_in_dim %cst_27, dims = [] : (tensor<f32>) -> tensor<128x512xf32>
    %107 = stablehlo.multiply %106, %104 : tensor<128x512xf32>
    %cst_28 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %108 = stablehlo.reduce(%105 init: %cst_28) applies stablehlo.add across dimensions = [0, 1] : (tensor<128x512xf32>, tensor<f32>) -> tensor<f32>
    %cst_29 = stablehlo.constant dense<6.553600e+04> : tensor<f32>
    %109 = stablehlo.divide %108, %cst_29 : tensor<f32>
    %cst_30 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_31 = stablehlo.constant dense<6.553600e+04> : tensor<f32>
    %110 = stablehlo.divide %cst_30, %cst_31 : tensor<f32>
    %111 = stablehlo.broadcast_in_dim %110, dims = [] : (tensor<f32>) -> tensor<128x512xf32>
    %112 = stablehlo.multiply %111, %107 : tensor<128x512xf32>
    %cst_32 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %113 = stablehlo.reduce(%112 init: %cst_32) applies stablehlo.add across dimensions = [0] : (tensor<128x512xf32>, tensor<f32>) -> tensor<512xf32>
    %114 = stablehlo.reshape %113 : (tensor<512xf32>) -> tensor<1x512xf32>
    %cst_33 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %115 = stablehlo.reduce(%114 init: %cst_33) applies stablehlo.add across dimensions = [0] : (tensor<1x512xf32>, tensor<f32>) -> tensor<512xf32>
    %116 = stablehlo.dot_general %112, %99, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<128x512xf32>, tensor<128x1024xf32>) -> tensor<512x1024xf32>
    %117 = stablehlo.transpose %116, dims = [1, 0] : (tensor<512x1024xf32>) -> tensor<1024x512xf32>
    %118 = stablehlo.dot_general %112, %arg8, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<128x512xf32>, tensor<1024x512xf32>) -> tensor<128x1024xf32>
    %119 = stablehlo.multiply %78, %118 : tensor<128x1024xf32>
    %120 = stablehlo.multiply %118, %98 : tensor<128x1024xf32>
    %cst_34 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %121 = stablehlo.broadcast_in_dim %cst_34, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %122 = stablehlo.multiply %121, %119 : tensor<128x1024xf32>
    %123 = stablehlo.multiply %122, %94 : tensor<128x1024xf32>
    %cst_35 = stablehlo.constant dense<0.797884583> : tensor<f32>
    %124 = stablehlo.broadcast_in_dim %cst_35, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %125 = stablehlo.multiply %124, %123 : tensor<128x1024xf32>
    %126 = stablehlo.add %120, %125 : tensor<128x1024xf32>
    %cst_36 = stablehlo.constant dense<4.471500e-02> : tensor<f32>
    %127 = stablehlo.broadcast_in_dim %cst_36, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %128 = stablehlo.multiply %127, %125 : tensor<128x1024xf32>
    %129 = stablehlo.multiply %128, %83 : tensor<128x1024xf32>
    %130 = stablehlo.add %126, %129 : tensor<128x1024xf32>
    %cst_37 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %131 = stablehlo.reduce(%130 init: %cst_37) applies stablehlo.add across dimensions = [0] : (tensor<128x1024xf32>, tensor<f32>) -> tensor<1024xf32>
    %132 = stablehlo.reshape %131 : (tensor<1024xf32>) -> tensor<1x1024xf32>
    %cst_38 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %133 = stablehlo.reduce(%132 init: %cst_38) applies stablehlo.add across dimensions = [0] : (tensor<1x1024xf32>, tensor<f32>) -> tensor<1024xf32>
    %134 = stablehlo.dot_general %130, %74, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<128x1024xf32>, tensor<128x1024xf32>) -> tensor<1024x1024xf32>
    %135 = stablehlo.transpose %134, dims = [1, 0] : (tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
    %136 = stablehlo.dot_general %130, %arg6, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<128x1024xf32>, tensor<1024x1024xf32>) -> tensor<128x1024xf32>
    %137 = stablehlo.multiply %53, %136 : tensor<128x1024xf32>
    %138 = stablehlo.multiply %136, %73 : tensor<128x1024xf32>
    %cst_39 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %139 = stablehlo.broadcast_in_dim %cst_39, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %140 = stablehlo.multiply %139, %137 : tensor<128x1024xf32>
    %141 = stablehlo.multiply %140, %69 : tensor<128x1024xf32>
    %cst_40 = stablehlo.constant dense<0.797884583> : tensor<f32>
    %142 = stablehlo.broadcast_in_dim %cst_40, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %143 = stablehlo.multiply %142, %141 : tensor<128x1024xf32>
    %144 = stablehlo.add %138, %143 : tensor<128x1024xf32>
    %cst_41 = stablehlo.constant dense<4.471500e-02> : tensor<f32>
    %145 = stablehlo.broadcast_in_dim %cst_41, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %146 = stablehlo.multiply %145, %143 : tensor<128x1024xf32>
    %147 = stablehlo.multiply %146, %58 : tensor<128x1024xf32>
    %148 = stablehlo.add %144, %147 : tensor<128x1024xf32>
    %cst_42 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %149 = stablehlo.reduce(%148 init: %cst_42) applies stablehlo.add across dimensions = [0] : (tensor<128x1024xf32>, tensor<f32>) -> tensor<1024xf32>
    %150 = stablehlo.reshape %149 : (tensor<1024xf32>) -> tensor<1x1024xf32>
    %cst_43 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %151 = stablehlo.reduce(%150 init: %cst_43) applies stablehlo.add across dimensions = [0] : (tensor<1x1024xf32>, tensor<f32>) -> tensor<1024xf32>
    %152 = stablehlo.dot_general %148, %49, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<128x1024xf32>, tensor<128x1024xf32>) -> tensor<1024x1024xf32>
    %153 = stablehlo.transpose %152, dims = [1, 0] : (tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
    %154 = stablehlo.dot_general %148, %arg4, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<128x1024xf32>, tensor<1024x1024xf32>) -> tensor<128x1024xf32>
    %155 = stablehlo.multiply %28, %154 : tensor<128x1024xf32>
    %156 = stablehlo.multiply %154, %48 : tensor<128x1024xf32>
    %cst_44 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %157 = stablehlo.broadcast_in_dim %cst_44, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %158 = stablehlo.multiply %157, %155 : tensor<128x1024xf32>
    %159 = stablehlo.multiply %158, %44 : tensor<128x1024xf32>
    %cst_45 = stablehlo.constant dense<0.797884583> : tensor<f32>
    %160 = stablehlo.broadcast_in_dim %cst_45, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %161 = stablehlo.multiply %160, %159 : tensor<128x1024xf32>
    %162 = stablehlo.add %156, %161 : tensor<128x1024xf32>
    %cst_46 = stablehlo.constant dense<4.471500e-02> : tensor<f32>
    %163 = stablehlo.broadcast_in_dim %cst_46, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %164 = stablehlo.multiply %163, %161 : tensor<128x1024xf32>
    %165 = stablehlo.multiply %164, %33 : tensor<128x1024xf32>
    %166 = stablehlo.add %162, %165 : tensor<128x1024xf32>
    %cst_47 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %167 = stablehlo.reduce(%166 init: %cst_47) applies stablehlo.add across dimensions = [0] : (tensor<128x1024xf32>, tensor<f32>) -> tensor<1024xf32>
    %168 = stablehlo.reshape %167 : (tensor<1024xf32>) -> tensor<1x1024xf32>
    %cst_48 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %169 = stablehlo.reduce(%168 init: %cst_48) applies stablehlo.add across dimensions = [0] : (tensor<1x1024xf32>, tensor<f32>) -> tensor<1024xf32>
    %170 = stablehlo.dot_general %166, %24, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<128x1024xf32>, tensor<128x1024xf32>) -> tensor<1024x1024xf32>
    %171 = stablehlo.transpose %170, dims = [1, 0] : (tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
    %172 = stablehlo.dot_general %166, %arg2, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<128x1024xf32>, tensor<1024x1024xf32>) -> tensor<128x1024xf32>
    %173 = stablehlo.multiply %3, %172 : tensor<128x1024xf32>
    %174 = stablehlo.multiply %172, %23 : tensor<128x1024xf32>
    %cst_49 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %175 = stablehlo.broadcast_in_dim %cst_49, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %176 = stablehlo.multiply %175, %173 : tensor<128x1024xf32>
    %177 = stablehlo.multiply %176, %19 : tensor<128x1024xf32>
    %cst_50 = stablehlo.constant dense<0.797884583> : tensor<f32>
    %178 = stablehlo.broadcast_in_dim %cst_50, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %179 = stablehlo.multiply %178, %177 : tensor<128x1024xf32>
    %180 = stablehlo.add %174, %179 : tensor<128x1024xf32>
    %cst_51 = stablehlo.constant dense<4.471500e-02> : tensor<f32>
    %181 = stablehlo.broadcast_in_dim %cst_51, dims = [] : (tensor<f32>) -> tensor<128x1024xf32>
    %182 = stablehlo.multiply %181, %179 : tensor<128x1024xf32>
    %183 = stablehlo.multiply %182, %8 : tensor<128x1024xf32>
    %184 = stablehlo.add %180, %183 : tensor<128x1024xf32>
    %cst_52 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %185 = stablehlo.reduce(%184 init: %cst_52) applies stablehlo.add across dimensions = [0] : (tensor<128x1024xf32>, tensor<f32>) -> tensor<1024xf32>
    %186 = stablehlo.reshape %185 : (tensor<1024xf32>) -> tensor<1x1024xf32>
    %cst_53 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %187 = stablehlo.reduce(%186 init: %cst_53) applies stablehlo.add across dimensions = [0] : (tensor<1x1024xf32>, tensor<f32>) -> tensor<1024xf32>
    %188 = stablehlo.dot_general %184, %arg31, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<128x1024xf32>, tensor<128x512xf32>) -> tensor<1024x512xf32>
    %189 = stablehlo.transpose %188, dims = [1, 0] : (tensor<1024x512xf32>) -> tensor<512x1024xf32>
    %c = stablehlo.constant dense<1> : tensor<i32>
    %190 = stablehlo.add %arg30, %c : tensor<i32>
    %cst_54 = stablehlo.constant dense<0.899999976> : tensor<f32>
    %191 = stablehlo.broadcast_in_dim %cst_54, dims = [] : (tensor<f32>) -> tensor<512x1024xf32>
    %192 = stablehlo.multiply %191, %arg10 : tensor<512x1024xf32>
    %cst_55 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %193 = stablehlo.broadcast_in_dim %cst_55, dims = [] : (tensor<f32>) -> tensor<512x1024xf32>
    %194 = stablehlo.multiply %193, %189 : tensor<512x1024xf32>
    %195 = stablehlo.add %192, %194 : tensor<512x1024xf32>
    %cst_56 = stablehlo.constant dense<0.899999976> : tensor<f32>
    %196 = stablehlo.broadcast_in_dim %cst_56, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %197 = stablehlo.multiply %196, %arg11 : tensor<1024xf32>
    %cst_57 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %198 = stablehlo.broadcast_in_dim %cst_57, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %199 = stablehlo.multiply %198, %187 : tensor<1024xf32>
    %200 = stablehlo.add %197, %199 : tensor<1024xf32>
    %cst_58 = stablehlo.constant dense<0.899999976> : tensor<f32>
    %201 = stablehlo.broadcast_in_dim %cst_58, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %202 = stablehlo.multiply %201, %arg12 : tensor<1024x1024xf32>
    %cst_59 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %203 = stablehlo.broadcast_in_dim %cst_59, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %204 = stablehlo.multiply %203, %171 : tensor<1024x1024xf32>
    %205 = stablehlo.add %202, %204 : tensor<1024x1024xf32>
    %cst_60 = stablehlo.constant dense<0.899999976> : tensor<f32>
    %206 = stablehlo.broadcast_in_dim %cst_60, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %207 = stablehlo.multiply %206, %arg13 : tensor<1024xf32>
    %cst_61 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %208 = stablehlo.broadcast_in_dim %cst_61, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %209 = stablehlo.multiply %208, %169 : tensor<1024xf32>
    %210 = stablehlo.add %207, %209 : tensor<1024xf32>
    %cst_62 = stablehlo.constant dense<0.899999976> : tensor<f32>
    %211 = stablehlo.broadcast_in_dim %cst_62, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %212 = stablehlo.multiply %211, %arg14 : tensor<1024x1024xf32>
    %cst_63 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %213 = stablehlo.broadcast_in_dim %cst_63, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %214 = stablehlo.multiply %213, %153 : tensor<1024x1024xf32>
    %215 = stablehlo.add %212, %214 : tensor<1024x1024xf32>
    %cst_64 = stablehlo.constant dense<0.899999976> : tensor<f32>
    %216 = stablehlo.broadcast_in_dim %cst_64, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %217 = stablehlo.multiply %216, %arg15 : tensor<1024xf32>
    %cst_65 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %218 = stablehlo.broadcast_in_dim %cst_65, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %219 = stablehlo.multiply %218, %151 : tensor<1024xf32>
    %220 = stablehlo.add %217, %219 : tensor<1024xf32>
    %cst_66 = stablehlo.constant dense<0.899999976> : tensor<f32>
    %221 = stablehlo.broadcast_in_dim %cst_66, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %222 = stablehlo.multiply %221, %arg16 : tensor<1024x1024xf32>
    %cst_67 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %223 = stablehlo.broadcast_in_dim %cst_67, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %224 = stablehlo.multiply %223, %135 : tensor<1024x1024xf32>
    %225 = stablehlo.add %222, %224 : tensor<1024x1024xf32>
    %cst_68 = stablehlo.constant dense<0.899999976> : tensor<f32>
    %226 = stablehlo.broadcast_in_dim %cst_68, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %227 = stablehlo.multiply %226, %arg17 : tensor<1024xf32>
    %cst_69 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %228 = stablehlo.broadcast_in_dim %cst_69, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %229 = stablehlo.multiply %228, %133 : tensor<1024xf32>
    %230 = stablehlo.add %227, %229 : tensor<1024xf32>
    %cst_70 = stablehlo.constant dense<0.899999976> : tensor<f32>
    %231 = stablehlo.broadcast_in_dim %cst_70, dims = [] : (tensor<f32>) -> tensor<1024x512xf32>
    %232 = stablehlo.multiply %231, %arg18 : tensor<1024x512xf32>
    %cst_71 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %233 = stablehlo.broadcast_in_dim %cst_71, dims = [] : (tensor<f32>) -> tensor<1024x512xf32>
    %234 = stablehlo.multiply %233, %117 : tensor<1024x512xf32>
    %235 = stablehlo.add %232, %234 : tensor<1024x512xf32>
    %cst_72 = stablehlo.constant dense<0.899999976> : tensor<f32>
    %236 = stablehlo.broadcast_in_dim %cst_72, dims = [] : (tensor<f32>) -> tensor<512xf32>
    %237 = stablehlo.multiply %236, %arg19 : tensor<512xf32>
    %cst_73 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %238 = stablehlo.broadcast_in_dim %cst_73, dims = [] : (tensor<f32>) -> tensor<512xf32>
    %239 = stablehlo.multiply %238, %115 : tensor<512xf32>
    %240 = stablehlo.add %237, %239 : tensor<512xf32>
    %cst_74 = stablehlo.constant dense<9.990000e-01> : tensor<f32>
    %241 = stablehlo.broadcast_in_dim %cst_74, dims = [] : (tensor<f32>) -> tensor<512x1024xf32>
    %242 = stablehlo.multiply %241, %arg20 : tensor<512x1024xf32>
    %243 = chlo.square %189 : tensor<512x1024xf32> -> tensor<512x1024xf32>
    %cst_75 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %244 = stablehlo.broadcast_in_dim %cst_75, dims = [] : (tensor<f32>) -> tensor<512x1024xf32>
    %245 = stablehlo.multiply %244, %243 : tensor<512x1024xf32>
    %246 = stablehlo.add %242, %245 : tensor<512x1024xf32>
    %cst_76 = stablehlo.constant dense<9.990000e-01> : tensor<f32>
    %247 = stablehlo.broadcast_in_dim %cst_76, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %248 = stablehlo.multiply %247, %arg21 : tensor<1024xf32>
    %249 = chlo.square %187 : tensor<1024xf32> -> tensor<1024xf32>
    %cst_77 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %250 = stablehlo.broadcast_in_dim %cst_77, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %251 = stablehlo.multiply %250, %249 : tensor<1024xf32>
    %252 = stablehlo.add %248, %251 : tensor<1024xf32>
    %cst_78 = stablehlo.constant dense<9.990000e-01> : tensor<f32>
    %253 = stablehlo.broadcast_in_dim %cst_78, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %254 = stablehlo.multiply %253, %arg22 : tensor<1024x1024xf32>
    %255 = chlo.square %171 : tensor<1024x1024xf32> -> tensor<1024x1024xf32>
    %cst_79 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %256 = stablehlo.broadcast_in_dim %cst_79, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %257 = stablehlo.multiply %256, %255 : tensor<1024x1024xf32>
    %258 = stablehlo.add %254, %257 : tensor<1024x1024xf32>
    %cst_80 = stablehlo.constant dense<9.990000e-01> : tensor<f32>
    %259 = stablehlo.broadcast_in_dim %cst_80, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %260 = stablehlo.multiply %259, %arg23 : tensor<1024xf32>
    %261 = chlo.square %169 : tensor<1024xf32> -> tensor<1024xf32>
    %cst_81 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %262 = stablehlo.broadcast_in_dim %cst_81, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %263 = stablehlo.multiply %262, %261 : tensor<1024xf32>
    %264 = stablehlo.add %260, %263 : tensor<1024xf32>
    %cst_82 = stablehlo.constant dense<9.990000e-01> : tensor<f32>
    %265 = stablehlo.broadcast_in_dim %cst_82, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %266 = stablehlo.multiply %265, %arg24 : tensor<1024x1024xf32>
    %267 = chlo.square %153 : tensor<1024x1024xf32> -> tensor<1024x1024xf32>
    %cst_83 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %268 = stablehlo.broadcast_in_dim %cst_83, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %269 = stablehlo.multiply %268, %267 : tensor<1024x1024xf32>
    %270 = stablehlo.add %266, %269 : tensor<1024x1024xf32>
    %cst_84 = stablehlo.constant dense<9.990000e-01> : tensor<f32>
    %271 = stablehlo.broadcast_in_dim %cst_84, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %272 = stablehlo.multiply %271, %arg25 : tensor<1024xf32>
    %273 = chlo.square %151 : tensor<1024xf32> -> tensor<1024xf32>
    %cst_85 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %274 = stablehlo.broadcast_in_dim %cst_85, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %275 = stablehlo.multiply %274, %273 : tensor<1024xf32>
    %276 = stablehlo.add %272, %275 : tensor<1024xf32>
    %cst_86 = stablehlo.constant dense<9.990000e-01> : tensor<f32>
    %277 = stablehlo.broadcast_in_dim %cst_86, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %278 = stablehlo.multiply %277, %arg26 : tensor<1024x1024xf32>
    %279 = chlo.square %135 : tensor<1024x1024xf32> -> tensor<1024x1024xf32>
    %cst_87 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %280 = stablehlo.broadcast_in_dim %cst_87, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %281 = stablehlo.multiply %280, %279 : tensor<1024x1024xf32>
    %282 = stablehlo.add %278, %281 : tensor<1024x1024xf32>
    %cst_88 = stablehlo.constant dense<9.990000e-01> : tensor<f32>
    %283 = stablehlo.broadcast_in_dim %cst_88, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %284 = stablehlo.multiply %283, %arg27 : tensor<1024xf32>
    %285 = chlo.square %133 : tensor<1024xf32> -> tensor<1024xf32>
    %cst_89 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %286 = stablehlo.broadcast_in_dim %cst_89, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %287 = stablehlo.multiply %286, %285 : tensor<1024xf32>
    %288 = stablehlo.add %284, %287 : tensor<1024xf32>
    %cst_90 = stablehlo.constant dense<9.990000e-01> : tensor<f32>
    %289 = stablehlo.broadcast_in_dim %cst_90, dims = [] : (tensor<f32>) -> tensor<1024x512xf32>
    %290 = stablehlo.multiply %289, %arg28 : tensor<1024x512xf32>
    %291 = chlo.square %117 : tensor<1024x512xf32> -> tensor<1024x512xf32>
    %cst_91 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %292 = stablehlo.broadcast_in_dim %cst_91, dims = [] : (tensor<f32>) -> tensor<1024x512xf32>
    %293 = stablehlo.multiply %292, %291 : tensor<1024x512xf32>
    %294 = stablehlo.add %290, %293 : tensor<1024x512xf32>
    %cst_92 = stablehlo.constant dense<9.990000e-01> : tensor<f32>
    %295 = stablehlo.broadcast_in_dim %cst_92, dims = [] : (tensor<f32>) -> tensor<512xf32>
    %296 = stablehlo.multiply %295, %arg29 : tensor<512xf32>
    %297 = chlo.square %115 : tensor<512xf32> -> tensor<512xf32>
    %cst_93 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %298 = stablehlo.broadcast_in_dim %cst_93, dims = [] : (tensor<f32>) -> tensor<512xf32>
    %299 = stablehlo.multiply %298, %297 : tensor<512xf32>
    %300 = stablehlo.add %296, %299 : tensor<512xf32>
    %301 = stablehlo.convert %190 : (tensor<i32>) -> tensor<f32>
    %cst_94 = stablehlo.constant dense<0.899999976> : tensor<f32>
    %302 = stablehlo.power %cst_94, %301 : tensor<f32>
    %cst_95 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %303 = stablehlo.subtract %cst_95, %302 : tensor<f32>
    %304 = stablehlo.convert %190 : (tensor<i32>) -> tensor<f32>
    %cst_96 = stablehlo.constant dense<9.990000e-01> : tensor<f32>
    %305 = stablehlo.power %cst_96, %304 : tensor<f32>
    %cst_97 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %306 = stablehlo.subtract %cst_97, %305 : tensor<f32>
    %307 = stablehlo.broadcast_in_dim %303, dims = [] : (tensor<f32>) -> tensor<512x1024xf32>
    %308 = stablehlo.divide %195, %307 : tensor<512x1024xf32>
    %cst_98 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %309 = stablehlo.broadcast_in_dim %cst_98, dims = [] : (tensor<f32>) -> tensor<512x1024xf32>
    %310 = stablehlo.multiply %309, %308 : tensor<512x1024xf32>
    %311 = stablehlo.broadcast_in_dim %306, dims = [] : (tensor<f32>) -> tensor<512x1024xf32>
    %312 = stablehlo.divide %246, %311 : tensor<512x1024xf32>
    %313 = stablehlo.sqrt %312 : tensor<512x1024xf32>
    %cst_99 = stablehlo.constant dense<9.99999993E-9> : tensor<f32>
    %314 = stablehlo.broadcast_in_dim %cst_99, dims = [] : (tensor<f32>) -> tensor<512x1024xf32>
    %315 = stablehlo.add %313, %314 : tensor<512x1024xf32>
    %316 = stablehlo.divide %310, %315 : tensor<512x1024xf32>
    %317 = stablehlo.subtract %arg0, %316 : tensor<512x1024xf32>
    %318 = stablehlo.broadcast_in_dim %303, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %319 = stablehlo.divide %200, %318 : tensor<1024xf32>
    %cst_100 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %320 = stablehlo.broadcast_in_dim %cst_100, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %321 = stablehlo.multiply %320, %319 : tensor<1024xf32>
    %322 = stablehlo.broadcast_in_dim %306, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %323 = stablehlo.divide %252, %322 : tensor<1024xf32>
    %324 = stablehlo.sqrt %323 : tensor<1024xf32>
    %cst_101 = stablehlo.constant dense<9.99999993E-9> : tensor<f32>
    %325 = stablehlo.broadcast_in_dim %cst_101, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %326 = stablehlo.add %324, %325 : tensor<1024xf32>
    %327 = stablehlo.divide %321, %326 : tensor<1024xf32>
    %328 = stablehlo.subtract %arg1, %327 : tensor<1024xf32>
    %329 = stablehlo.broadcast_in_dim %303, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %330 = stablehlo.divide %205, %329 : tensor<1024x1024xf32>
    %cst_102 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %331 = stablehlo.broadcast_in_dim %cst_102, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %332 = stablehlo.multiply %331, %330 : tensor<1024x1024xf32>
    %333 = stablehlo.broadcast_in_dim %306, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %334 = stablehlo.divide %258, %333 : tensor<1024x1024xf32>
    %335 = stablehlo.sqrt %334 : tensor<1024x1024xf32>
    %cst_103 = stablehlo.constant dense<9.99999993E-9> : tensor<f32>
    %336 = stablehlo.broadcast_in_dim %cst_103, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %337 = stablehlo.add %335, %336 : tensor<1024x1024xf32>
    %338 = stablehlo.divide %332, %337 : tensor<1024x1024xf32>
    %339 = stablehlo.subtract %arg2, %338 : tensor<1024x1024xf32>
    %340 = stablehlo.broadcast_in_dim %303, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %341 = stablehlo.divide %210, %340 : tensor<1024xf32>
    %cst_104 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %342 = stablehlo.broadcast_in_dim %cst_104, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %343 = stablehlo.multiply %342, %341 : tensor<1024xf32>
    %344 = stablehlo.broadcast_in_dim %306, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %345 = stablehlo.divide %264, %344 : tensor<1024xf32>
    %346 = stablehlo.sqrt %345 : tensor<1024xf32>
    %cst_105 = stablehlo.constant dense<9.99999993E-9> : tensor<f32>
    %347 = stablehlo.broadcast_in_dim %cst_105, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %348 = stablehlo.add %346, %347 : tensor<1024xf32>
    %349 = stablehlo.divide %343, %348 : tensor<1024xf32>
    %350 = stablehlo.subtract %arg3, %349 : tensor<1024xf32>
    %351 = stablehlo.broadcast_in_dim %303, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %352 = stablehlo.divide %215, %351 : tensor<1024x1024xf32>
    %cst_106 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %353 = stablehlo.broadcast_in_dim %cst_106, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %354 = stablehlo.multiply %353, %352 : tensor<1024x1024xf32>
    %355 = stablehlo.broadcast_in_dim %306, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %356 = stablehlo.divide %270, %355 : tensor<1024x1024xf32>
    %357 = stablehlo.sqrt %356 : tensor<1024x1024xf32>
    %cst_107 = stablehlo.constant dense<9.99999993E-9> : tensor<f32>
    %358 = stablehlo.broadcast_in_dim %cst_107, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %359 = stablehlo.add %357, %358 : tensor<1024x1024xf32>
    %360 = stablehlo.divide %354, %359 : tensor<1024x1024xf32>
    %361 = stablehlo.subtract %arg4, %360 : tensor<1024x1024xf32>
    %362 = stablehlo.broadcast_in_dim %303, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %363 = stablehlo.divide %220, %362 : tensor<1024xf32>
    %cst_108 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %364 = stablehlo.broadcast_in_dim %cst_108, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %365 = stablehlo.multiply %364, %363 : tensor<1024xf32>
    %366 = stablehlo.broadcast_in_dim %306, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %367 = stablehlo.divide %276, %366 : tensor<1024xf32>
    %368 = stablehlo.sqrt %367 : tensor<1024xf32>
    %cst_109 = stablehlo.constant dense<9.99999993E-9> : tensor<f32>
    %369 = stablehlo.broadcast_in_dim %cst_109, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %370 = stablehlo.add %368, %369 : tensor<1024xf32>
    %371 = stablehlo.divide %365, %370 : tensor<1024xf32>
    %372 = stablehlo.subtract %arg5, %371 : tensor<1024xf32>
    %373 = stablehlo.broadcast_in_dim %303, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %374 = stablehlo.divide %225, %373 : tensor<1024x1024xf32>
    %cst_110 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %375 = stablehlo.broadcast_in_dim %cst_110, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %376 = stablehlo.multiply %375, %374 : tensor<1024x1024xf32>
    %377 = stablehlo.broadcast_in_dim %306, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %378 = stablehlo.divide %282, %377 : tensor<1024x1024xf32>
    %379 = stablehlo.sqrt %378 : tensor<1024x1024xf32>
    %cst_111 = stablehlo.constant dense<9.99999993E-9> : tensor<f32>
    %380 = stablehlo.broadcast_in_dim %cst_111, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
    %381 = stablehlo.add %379, %380 : tensor<1024x1024xf32>
    %382 = stablehlo.divide %376, %381 : tensor<1024x1024xf32>
    %383 = stablehlo.subtract %arg6, %382 : tensor<1024x1024xf32>
    %384 = stablehlo.broadcast_in_dim %303, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %385 = stablehlo.divide %230, %384 : tensor<1024xf32>
    %cst_112 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %386 = stablehlo.broadcast_in_dim %cst_112, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %387 = stablehlo.multiply %386, %385 : tensor<1024xf32>
    %388 = stablehlo.broadcast_in_dim %306, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %389 = stablehlo.divide %288, %388 : tensor<1024xf32>
    %390 = stablehlo.sqrt %389 : tensor<1024xf32>
    %cst_113 = stablehlo.constant dense<9.99999993E-9> : tensor<f32>
    %391 = stablehlo.broadcast_in_dim %cst_113, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %392 = stablehlo.add %390, %391 : tensor<1024xf32>
    %393 = stablehlo.divide %387, %392 : tensor<1024xf32>
    %394 = stablehlo.subtract %arg7, %393 : tensor<1024xf32>
    %395 = stablehlo.broadcast_in_dim %303, dims = [] : (tensor<f32>) -> tensor<1024x512xf32>
    %396 = stablehlo.divide %235, %395 : tensor<1024x512xf32>
    %cst_114 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %397 = stablehlo.broadcast_in_dim %cst_114, dims = [] : (tensor<f32>) -> tensor<1024x512xf32>
    %398 = stablehlo.multiply %397, %396 : tensor<1024x512xf32>
    %399 = stablehlo.broadcast_in_dim %306, dims = [] : (tensor<f32>) -> tensor<1024x512xf32>
    %400 = stablehlo.divide %294, %399 : tensor<1024x512xf32>
    %401 = stablehlo.sqrt %400 : tensor<1024x512xf32>
    %cst_115 = stablehlo.constant dense<9.99999993E-9> : tensor<f32>
    %402 = stablehlo.broadcast_in_dim %cst_115, dims = [] : (tensor<f32>) -> tensor<1024x512xf32>
    %403 = stablehlo.add %401, %402 : tensor<1024x512xf32>
    %404 = stablehlo.divide %398, %403 : tensor<1024x512xf32>
    %405 = stablehlo.subtract %arg8, %404 : tensor<1024x512xf32>
    %406 = stablehlo.broadcast_in_dim %303, dims = [] : (tensor<f32>) -> tensor<512xf32>
    %407 = stablehlo.divide %240, %406 : tensor<512xf32>
    %cst_116 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %408 = stablehlo.broadcast_in_dim %cst_116, dims = [] : (tensor<f32>) -> tensor<512xf32>
    %409 = stablehlo.multiply %408, %407 : tensor<512xf32>
    %410 = stablehlo.broadcast_in_dim %306, dims = [] : (tensor<f32>) -> tensor<512xf32>
    %411 = stablehlo.divide %300, %410 : tensor<512xf32>
    %412 = stablehlo.sqrt %411 : tensor<512xf32>
    %cst_117 = stablehlo.constant dense<9.99999993E-9> : tensor<f32>
    %413 = stablehlo.broadcast_in_dim %cst_117, dims = [] : (tensor<f32>) -> tensor<512xf32>
    %414 = stablehlo.add %412, %413 : tensor<512xf32>
    %415 = stablehlo.divide %409, %414 : tensor<512xf32>
    %416 = stablehlo.subtract %arg9, %415 : tensor<512xf32>
    return %317, %328, %339, %350, %361, %372, %383, %394, %405, %416, %195, %200, %205, %210, %215, %220, %225, %230, %235, %240, %246, %252, %258, %264, %270, %276, %282, %288, %294, %300, %190, %109 : tensor<512x1024xf32>, tensor<1024xf32>, tensor<1024x1024xf32>, tensor<1024xf32>, tensor<1024x1024xf32>, tensor<1024xf32>, tensor<1024x1024xf32>, tensor<1024xf32>, tensor<1024x512xf32>, tensor<512xf32>, tensor<512x1024xf32>, tensor<1024xf32>, tensor<1024x1024xf32>, tensor<1024xf32>, tensor<1024x1024xf32>, tensor<1024xf32>, tensor<1024x1024xf32>, tensor<1024xf32>, tensor<1024x512xf32>, tensor<512xf32>, tensor<512x1024xf32>, tensor<1024xf32>, tensor<1024x1024xf32>, tensor<1024xf32>, tensor<1024x1024xf32>, tensor<1024xf32>, tensor<1024x1024xf32>, tensor<1024xf32>, tensor<1024x512xf32>, tensor<512xf32>, tensor<i32>, tensor<f32>
  }
}
