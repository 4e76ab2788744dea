# Spack recipe for kpipe. Use it from this repository:  spack repo add spack  (then spack install kpipe)
from spack.package import *


class Kpipe(CMakePackage, CudaPackage):
    """Pipeline-parallel training of GPT language models with Kokkos kernels, MPI stages and HDF5 I/O."""

    homepage = "https://github.com/kpipe/kpipe"
    git = "https://github.com/kpipe/kpipe.git"

    version("main", branch="main")

    variant("nccl", default=False, when="+cuda", description="NCCL for stage-to-stage transfers on GPUs")
    variant("cuda_aware_mpi", default=False, when="+cuda", description="Pass device buffers to MPI")
    variant("tests", default=False, description="Build the GoogleTest suite")

    depends_on("cmake@3.20:", type="build")
    depends_on("mpi")
    depends_on("kokkos@3.4:")
    depends_on("kokkos-kernels@3.4: +blas")
    depends_on("kokkos +cuda +cuda_lambda +wrapper", when="+cuda")
    depends_on("kokkos-kernels +cuda +cublas", when="+cuda")
    depends_on("hdf5 +mpi")
    depends_on("fmt")
    depends_on("nlohmann-json")
    depends_on("tomlplusplus")
    depends_on("cli11")
    depends_on("nccl", when="+nccl")
    depends_on("googletest", type=("build", "test"), when="+tests")
    depends_on("benchmark", type="build", when="+tests")

    for arch in CudaPackage.cuda_arch_values:
        depends_on(f"kokkos cuda_arch={arch}", when=f"+cuda cuda_arch={arch}")

    def cmake_args(self):
        args = [
            self.define_from_variant("KPIPE_ENABLE_TESTS", "tests"),
            self.define_from_variant("KPIPE_ENABLE_BENCHMARKS", "tests"),
            self.define_from_variant("KPIPE_ENABLE_NCCL", "nccl"),
            self.define_from_variant("KPIPE_ENABLE_CUDA_AWARE_MPI", "cuda_aware_mpi"),
            # Spack's compiler wrappers carry the target's flags (target=...): no -march=native on top.
            self.define("KPIPE_ENABLE_NATIVE_ARCH", False),
            # The BPE tokenizer needs SentencePiece, which this recipe does not depend on: never pick up a
            # system copy by accident (byte tokens only; BPE token files are refused with a message).
            self.define("KPIPE_ENABLE_SENTENCEPIECE", "OFF"),
        ]
        if self.spec.satisfies("+cuda"):
            # Kokkos' nvcc_wrapper compiles the kernels' lambdas for the device.
            args.append(self.define("CMAKE_CXX_COMPILER", self.spec["kokkos"].kokkos_cxx))
        return args
