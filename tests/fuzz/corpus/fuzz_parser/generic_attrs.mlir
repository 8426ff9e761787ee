func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "stablehlo.dot_general"(%a, %a) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision HIGH>]}> {x = array<i1: true>, y = 0x7FC00000 : f32, z = @"sym bol", w = "e\0A\"s", u} : (tensor<2xf32>, tensor<2xf32>) -> tensor<f32>
  %1 = "stablehlo.convolution"(%a, %a) {dimension_numbers = #stablehlo.conv<raw input_batch_dimension = 0>} : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %1 : tensor<2xf32>
}
