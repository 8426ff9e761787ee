func.func @f(%a: tensor<f64>) : () -> ()
