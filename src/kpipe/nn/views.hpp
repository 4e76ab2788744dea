#pragma once
// Parameter types for layer functions. Inputs are read-only views; the alias is a non-deduced context
// so that a View2<float> argument binds to In2<float> without spelling out the template argument.
#include <type_traits>

#include "kpipe/core/kernel_path.hpp"
#include "kpipe/core/tensor.hpp"

namespace kpipe::nn {

template <class V> struct non_deduced { using type = V; };
template <class T> using In1 = const typename non_deduced<View1<const T>>::type&;
template <class T> using In2 = const typename non_deduced<View2<const T>>::type&;
template <class T> using In3 = const typename non_deduced<View3<const T>>::type&;
template <class T> using In4 = const typename non_deduced<View4<const T>>::type&;

}  // namespace kpipe::nn
