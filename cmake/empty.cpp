// Empty translation unit: the runtime generator only needs GenGen.cpp from Halide::Generator.
