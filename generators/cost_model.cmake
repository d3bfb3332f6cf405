# Cost model network kernels: inference and training, for CPU (S = 39) and GPU (S = 73) features.
add_halide_generator(hkfac_gen_cost_model SOURCES cost_model.cpp)
foreach (s IN ITEMS 39 73)
  hkfac_add_kernel(cost_model_predict_s${s} FROM hkfac_gen_cost_model
                   GENERATOR hkfac_cost_model_predict PARAMS num_features=${s})
  hkfac_add_kernel(cost_model_train_s${s} FROM hkfac_gen_cost_model
                   GENERATOR hkfac_cost_model_train PARAMS num_features=${s})
endforeach ()
