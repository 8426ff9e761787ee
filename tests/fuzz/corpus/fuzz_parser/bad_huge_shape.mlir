func.func @f() -> tensor<99999999999x99999999999xf32> {
  %0 = stablehlo.constant dense<0.0> : tensor<4294967296x65536xf32>
  return %0 : tensor<f32>
}
