module @jit_f {
  func.func public @main(%arg0: !stablehlo.token {jax.token = true}, %arg1: tensor<1024xf32>) -> (!stablehlo.token {jax.token = true}, tensor<1024xf32>, tuple<tensor<1024xf32>, tensor<i32>>) {
    %0 = "stablehlo.sine"(%arg1) : (tensor<1024xf32>) -> tensor<1024xf32>
    %1 = "stablehlo.add"(%0, %arg1) : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>
    %c = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
    %2 = "stablehlo.tuple"(%1, %c) : (tensor<1024xf32>, tensor<i32>) -> tuple<tensor<1024xf32>, tensor<i32>>
    %3 = "stablehlo.get_tuple_element"(%2) <{index = 0 : i32}> : (tuple<tensor<1024xf32>, tensor<i32>>) -> tensor<1024xf32>
    %4:2 = stablehlo.custom_call @xla_python_cpu_callback(%arg0, %3) {api_version = 2 : i32, has_side_effect = true} : (!stablehlo.token, tensor<1024xf32>) -> (!stablehlo.token, tensor<1024xf32>)
    return %4#0, %4#1, %2 : !stablehlo.token, tensor<1024xf32>, tuple<tensor<1024xf32>, tensor<i32>>
  }
}
