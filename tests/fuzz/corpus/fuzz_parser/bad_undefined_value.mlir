func.func @f() -> tensor<f32> {
  %0 = stablehlo.add %x, %x : tensor<f32>
  return %0 : tensor<f32>
}
