func.func @f() -> tensor<3xf32> {
  %0 = stablehlo.constant dense<[1.0, 2.0]> : tensor<3xf32>
  return %0 : tensor<3xf32>
}
