func.func @f(%a: tensor<f32>) -> tensor<f32> {
  %0 = "x.y"(%a) ({
  ^bb0(%b: tensor<f32>):
    %1 = "x.y"(%b) ({
      "x.z"() : () -> ()
    }) : (tensor<f32>) -> tensor<f32>
    stablehlo.return %1 : tensor<f32>
  }) : (tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}
