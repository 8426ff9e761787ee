module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<4x3xi1> {jax.result_info = "", mhlo.layout_mode = "default"}) {
    %0:2 = call @inputs() : () -> (tensor<2x3xi1>, tensor<2x3xi1>)
    %1 = call @expected() : () -> tensor<4x3xi1>
    %2 = stablehlo.concatenate %0#0, %0#1, dim = 0 : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<4x3xi1>
    stablehlo.custom_call @check.expect_eq(%2, %1) {has_side_effect = true} : (tensor<4x3xi1>, tensor<4x3xi1>) -> ()
    return %2 : tensor<4x3xi1>
  }
  func.func private @inputs() -> (tensor<2x3xi1> {mhlo.layout_mode = "default"}, tensor<2x3xi1> {mhlo.layout_mode = "default"}) {
    %c = stablehlo.constant dense<true> : tensor<2x3xi1>
    %c_0 = stablehlo.constant dense<true> : tensor<2x3xi1>
    return %c, %c_0 : tensor<2x3xi1>, tensor<2x3xi1>
  }
  func.func private @expected() -> (tensor<4x3xi1> {mhlo.layout_mode = "default"}) {
    %c = stablehlo.constant dense<true> : tensor<4x3xi1>
    return %c : tensor<4x3xi1>
  }
}
