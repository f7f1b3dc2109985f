module @jit_f {
  func.func public @main(%arg0: tensor<8x8xf32>, %arg1: tensor<8xf32>) -> tensor<8xf32> {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_1 = stablehlo.constant dense<1> : tensor<i32>
    %c_5 = stablehlo.constant dense<5> : tensor<i32>
    %0:2 = stablehlo.while(%iterArg = %c, %iterArg_0 = %arg1) : tensor<i32>, tensor<8xf32>
     cond {
      %1 = stablehlo.compare  LT, %iterArg, %c_5,  SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    } do {
      %1 = stablehlo.add %iterArg, %c_1 : tensor<i32>
      %2 = chlo.broadcast_multiply %iterArg_0, %arg0 : (tensor<8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
      %3:2 = stablehlo.while(%iterArg_2 = %c, %iterArg_3 = %iterArg_0) : tensor<i32>, tensor<8xf32>
       cond {
        %4 = stablehlo.compare  LT, %iterArg_2, %c_5,  SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %4 : tensor<i1>
      } do {
        %4 = stablehlo.add %iterArg_2, %c_1 : tensor<i32>
        %5 = stablehlo.dot_general %2, %iterArg_3, contracting_dims = [1] x [0] : (tensor<8x8xf32>, tensor<8xf32>) -> tensor<8xf32>
        %6 = chlo.lgamma %5 : tensor<8xf32> -> tensor<8xf32>
        stablehlo.return %4, %6 : tensor<i32>, tensor<8xf32>
      }
      stablehlo.return %1, %3#1 : tensor<i32>, tensor<8xf32>
    }
    return %0#1 : tensor<8xf32>
  }
}
