package gguf

// Dequantize is dequantize for the external tests, which compare it with
// llama.cpp's own to_float.
var Dequantize = dequantize
