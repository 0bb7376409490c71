// safetensors (https://github.com/huggingface/safetensors), read and written by
// our own code: an 8-byte little-endian header length N, N bytes of JSON
// {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"k": "v"}}, then the raw little-endian tensor bytes, with
// offsets relative to the end of the header. Pure C++ (no libtorch).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trident::safetensors {

struct Tensor {
  std::string name;
  std::string dtype;           // "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"
  std::vector<int64_t> shape;  // row-major
  std::string data;            // raw little-endian bytes, numel * dtype_size
};

// Bytes per element of a safetensors dtype; throws std::runtime_error on an unknown one.
size_t dtype_size(const std::string& dtype);
int64_t numel(const std::vector<int64_t>& shape);

// The file image of `tensors` (header padded with spaces to a multiple of 8, as
// Hugging Face's writer does, so data starts 8-byte aligned).
std::string encode(const std::vector<Tensor>& tensors, const std::map<std::string, std::string>& metadata = {});
// Parses a file image; every malformation (short file, bad JSON, offsets out of
// range or not matching dtype x shape, overlapping tensors) throws naming
// `source` and the tensor.
std::vector<Tensor> decode(const std::string& bytes, const std::string& source,
                           std::map<std::string, std::string>* metadata = nullptr);

void write_file(const std::string& path, const std::vector<Tensor>& tensors,
                const std::map<std::string, std::string>& metadata = {});  // atomic (atomic_file.h)
std::vector<Tensor> read_file(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

// The values of an F32, F16 or BF16 tensor as floats (exact widening).
std::vector<float> to_float(const Tensor& t, const std::string& source);
// Throws naming the file, the tensor and the first bad element when a value is
// NaN or infinite (a model that would train or evaluate to a NaN loss).
void check_finite(const std::vector<float>& values, const std::string& name, const std::string& source);
// An F32 tensor from floats.
Tensor from_float(std::string name, std::vector<int64_t> shape, const float* values);

}  // namespace trident::safetensors
