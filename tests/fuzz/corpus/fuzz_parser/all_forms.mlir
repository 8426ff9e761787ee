module @all attributes {hlx.identity = "0123abcd"} {
  func.func public @main(%arg0: tensor<2x3xbf16> {hlx.name = "model.embed_tokens.weight", tf.aliasing_output = 0 : i32}, %arg1: tensor<3xi64>, %arg2: tensor<4x6xf32>) -> (tensor<2x3xbf16> {jax.result_info = ""}) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c = stablehlo.constant dense<[true, false]> : tensor<2xi1>
    %cst_0 = stablehlo.constant dense<[[1.000000e+00, 0x7FC0, 0xFF80]]> : tensor<1x3xbf16>
    %c_1 = stablehlo.constant dense<[0, 255]> : tensor<2xui8>
    %0 = stablehlo.iota dim = 0 : tensor<4xi32>
    %1 = stablehlo.add %arg0, %arg0 : tensor<2x3xbf16>
    %2 = stablehlo.compare  LT, %arg2, %arg2,  FLOAT : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xi1>
    %3 = stablehlo.select %2, %arg2, %arg2 : tensor<4x6xi1>, tensor<4x6xf32>
    %4 = stablehlo.slice %arg2 [0:2, 1:5:2] : (tensor<4x6xf32>) -> tensor<2x2xf32>
    %5 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x6xf32>
    %6 = stablehlo.transpose %arg2, dims = [1, 0] : (tensor<4x6xf32>) -> tensor<6x4xf32>
    %7 = stablehlo.pad %arg2, %cst, low = [1, 0], high = [0, 0], interior = [0, 1] : (tensor<4x6xf32>, tensor<f32>) -> tensor<5x11xf32>
    %8 = stablehlo.concatenate %arg2, %5, dim = 0 : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
    %9 = stablehlo.reduce(%arg2 init: %cst) applies stablehlo.maximum across dimensions = [1] : (tensor<4x6xf32>, tensor<f32>) -> tensor<4xf32>
    %10 = stablehlo.dot_general %arg2, %6, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x6xf32>, tensor<6x4xf32>) -> tensor<4x4xf32>
    %11 = stablehlo.convert %1 : (tensor<2x3xbf16>) -> tensor<2x3xf32>
    %12 = chlo.erf %11 : tensor<2x3xf32> -> tensor<2x3xf32>
    %13 = stablehlo.clamp %cst, %11, %cst : (tensor<f32>, tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
    %14 = stablehlo.composite "hlx.rms_norm" %1 {composite_attributes = {eps = 9.99999997E-7 : f32}, decomposition = @rms, version = 1 : i32} : (tensor<2x3xbf16>) -> tensor<2x3xbf16>
    %15 = "stablehlo.gather"(%arg2, %arg1) <{dimension_numbers = #stablehlo.gather<offset_dims = [0], collapsed_slice_dims = [1], start_index_map = [1], index_vector_dim = 1>, slice_sizes = array<i64: 4, 1>}> : (tensor<4x6xf32>, tensor<3xi64>) -> tensor<4x3xf32>
    %16 = stablehlo.dynamic_slice %arg2, %0, %0, sizes = [1, 2] : (tensor<4x6xf32>, tensor<4xi32>, tensor<4xi32>) -> tensor<1x2xf32>
    %17:2 = call @pair(%arg2) : (tensor<4x6xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>)
    stablehlo.custom_call @check.expect_close(%17#0, %17#1) {has_side_effect = true} : (tensor<4x6xf32>, tensor<4x6xf32>) -> ()
    return %14 : tensor<2x3xbf16>
  }
  func.func private @pair(%arg0: tensor<4x6xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>) {
    return %arg0, %arg0 : tensor<4x6xf32>, tensor<4x6xf32>
  }
  func.func private @rms(%arg0: tensor<2x3xbf16>) -> tensor<2x3xbf16> {
    return %arg0 : tensor<2x3xbf16>
  }
}
