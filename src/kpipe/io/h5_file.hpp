#pragma once
// Small RAII helpers over the HDF5 C API for the trace and timeline files: handles that close themselves,
// extendible chunked datasets that grow by rows (deflate-compressed when the HDF5 build has the filter),
// attributes and whole-dataset reads. Errors are kpipe::InputError naming the file and the object.
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kpipe::io::h5 {

// An HDF5 identifier closed when it goes out of scope (movable, not copyable).
class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : id_(other.id_), close_(other.close_) { other.id_ = -1; }
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = other.id_;
      close_ = other.close_;
      other.id_ = -1;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// Silences HDF5's automatic error-stack printing while alive: the user sees our one line instead.
class QuietErrors {
 public:
  QuietErrors();
  ~QuietErrors();
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t function_ = nullptr;
  void* data_ = nullptr;
};

Handle create_file(const std::string& path);  // truncates
Handle open_file(const std::string& path);    // read-only; InputError when it is not an HDF5 file
bool exists(hid_t location, const std::string& path);  // every link along "a/b/c" exists
Handle open_group(hid_t location, const std::string& path);
Handle require_group(hid_t location, const std::string& path);  // creates missing groups along the path
std::vector<std::string> children(hid_t group);  // link names, in name order

// Whether this HDF5 build can write deflate-compressed datasets.
bool deflate_available();

// Appends `rows` rows of shape `row_shape` (empty: scalars) to the dataset `name` under `location`,
// created on first use as an extendible, chunked dataset [unlimited, row_shape...] of `file_type`.
void append(hid_t location, const std::string& name, hid_t file_type, hid_t memory_type, const void* data,
            hsize_t rows, const std::vector<hsize_t>& row_shape = {});
void append(hid_t location, const std::string& name, const std::vector<double>& values,
            const std::vector<hsize_t>& row_shape = {});
void append(hid_t location, const std::string& name, const std::vector<std::int64_t>& values,
            const std::vector<hsize_t>& row_shape = {});
void append(hid_t location, const std::string& name, const std::vector<std::int32_t>& values,
            const std::vector<hsize_t>& row_shape = {});
void append(hid_t location, const std::string& name, const std::vector<float>& values,
            const std::vector<hsize_t>& row_shape = {});

std::vector<hsize_t> shape(hid_t location, const std::string& name);
// The whole dataset converted to the requested type (HDF5 converts); `label` names the file in errors.
std::vector<double> read_doubles(hid_t location, const std::string& name, const std::string& label);
std::vector<std::int64_t> read_int64s(hid_t location, const std::string& name, const std::string& label);

void write_attribute(hid_t object, const std::string& name, const std::string& value);
void write_attribute(hid_t object, const std::string& name, std::int64_t value);
bool has_attribute(hid_t object, const std::string& name);
std::string read_string_attribute(hid_t object, const std::string& name, const std::string& label);
std::int64_t read_int_attribute(hid_t object, const std::string& name, const std::string& label);

}  // namespace kpipe::io::h5
