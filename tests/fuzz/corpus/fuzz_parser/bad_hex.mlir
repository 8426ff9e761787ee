func.func @f() -> tensor<2xbf16> {
  %0 = stablehlo.constant dense<"0xFF80FF"> : tensor<2xbf16>
  return %0 : tensor<2xbf16>
}
