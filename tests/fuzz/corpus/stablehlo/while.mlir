module @w {
  func.func public @main(%arg0: tensor<8x4xf32>, %arg1: tensor<i32>) -> tensor<8x4xf32> {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %0:2 = stablehlo.while(%iterArg = %arg0, %iterArg_0 = %c) : tensor<8x4xf32>, tensor<i32>
    cond {
      %1 = stablehlo.compare  LT, %iterArg_0, %iterArg_0,  SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    } do {
      %1 = stablehlo.multiply %iterArg, %iterArg : tensor<8x4xf32>
      %2 = "stablehlo.reduce"(%1, %iterArg_0) ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }) {dimensions = array<i64: 1>} : (tensor<8x4xf32>, tensor<i32>) -> tensor<8xf32>
      stablehlo.return %1, %iterArg_0 : tensor<8x4xf32>, tensor<i32>
    }
    return %0#0 : tensor<8x4xf32>
  }
}
